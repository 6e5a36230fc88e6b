//! The kernel NBD client's generic netlink family ("nbd", version 1): CONNECT, RECONFIGURE
//! and DISCONNECT, each acknowledged or refused with the kernel's errno.
//!
//! - Attribute numbers are the kernel's (`include/uapi/linux/nbd-netlink.h`).
//! - Socket descriptors travel as numbers the kernel resolves in this process's table, so
//!   they must stay open until the call returns; the kernel keeps its own references.
//! - Needs CAP_SYS_ADMIN and the `nbd` module.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use neli::consts::nl::NlmF;
use neli::consts::socket::NlFamily;
use neli::genl::{AttrTypeBuilder, Genlmsghdr, GenlmsghdrBuilder, Nlattr, NlattrBuilder};
use neli::nl::{NlPayload, Nlmsghdr};
use neli::router::synchronous::NlRouter;
use neli::types::{Buffer, GenlBuffer};
use neli::utils::Groups;
use neli::{neli_enum, ToBytes};

/// Commands of the "nbd" family.
#[neli_enum(serialized_type = "u8")]
pub enum NbdCmd {
    /// Unused.
    Unspec = 0,
    /// Configure a device over given sockets.
    Connect = 1,
    /// Send DISC and drop the device's sockets.
    Disconnect = 2,
    /// Replace dead sockets, change size or timeouts.
    Reconfigure = 3,
    /// A socket died (kernel to the multicast group).
    LinkDead = 4,
    /// List devices.
    Status = 5,
}
impl neli::consts::genl::Cmd for NbdCmd {}

/// Top-level attributes of the "nbd" family.
#[neli_enum(serialized_type = "u16")]
pub enum NbdAttr {
    /// Unused.
    Unspec = 0,
    /// u32: the device number.
    Index = 1,
    /// u64: the device size.
    SizeBytes = 2,
    /// u64: the logical block size.
    BlockSizeBytes = 3,
    /// u64 seconds: a request later than this kills its socket (and is requeued).
    Timeout = 4,
    /// u64: the export's transmission flags.
    ServerFlags = 5,
    /// u64: [`DESTROY_ON_DISCONNECT`], ...
    ClientFlags = 6,
    /// Nested: one [`SockAttr::Item`] per socket.
    Sockets = 7,
    /// u64 seconds: how long I/O waits with no live socket before failing.
    DeadConnTimeout = 8,
    /// Nested device list (STATUS).
    DeviceList = 9,
    /// String: who the device belongs to (kernel 5.14 and later).
    BackendIdentifier = 10,
}
impl neli::consts::genl::NlAttrType for NbdAttr {}

/// Attributes nested in [`NbdAttr::Sockets`] (one item per socket, holding its fd).
#[neli_enum(serialized_type = "u16")]
pub enum SockAttr {
    /// Unused.
    Unspec = 0,
    /// Nested item: one [`SockItemAttr::Fd`].
    Item = 1,
}
impl neli::consts::genl::NlAttrType for SockAttr {}

/// Attributes nested in a [`SockAttr::Item`].
#[neli_enum(serialized_type = "u16")]
pub enum SockItemAttr {
    /// Unused.
    Unspec = 0,
    /// u32: the socket's descriptor in the sender's table.
    Fd = 1,
}
impl neli::consts::genl::NlAttrType for SockItemAttr {}

/// Client flag: the device goes away once disconnected and unused.
pub const DESTROY_ON_DISCONNECT: u64 = 1 << 0;

/// What a new device is configured with.
#[derive(Debug, Clone)]
pub struct Connect {
    /// The export's size in bytes.
    pub size: u64,
    /// The logical block size (the server's minimum: the LUN's sector).
    pub block_size: u64,
    /// Seconds before a late request kills its socket (and is requeued on another).
    pub timeout: u64,
    /// Seconds I/O waits with no live socket before it fails.
    pub dead_timeout: u64,
    /// The export's transmission flags from the handshake.
    pub server_flags: u16,
    /// Names the volume (found again after a restart; checked by RECONFIGURE).
    pub identifier: String,
}

/// A netlink socket bound to the "nbd" family.
pub struct NbdNetlink {
    router: NlRouter,
    family: u16,
}

type Msg = Genlmsghdr<NbdCmd, NbdAttr>;

impl NbdNetlink {
    /// Opens a generic netlink socket and resolves the family; the error names the module
    /// when the kernel lacks it.
    pub fn open() -> io::Result<Self> {
        let (router, _) = NlRouter::connect(NlFamily::Generic, Some(0), Groups::empty())
            .map_err(|e| io::Error::other(format!("generic netlink socket: {e}")))?;
        let family = router.resolve_genl_family("nbd").map_err(|e| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("generic netlink family \"nbd\" not found (is the nbd module loaded? modprobe nbd): {e}"),
            )
        })?;
        Ok(Self { router, family })
    }

    /// Configures a new device over `socks` (past the handshake); its index.
    pub fn connect(&self, c: &Connect, socks: &[BorrowedFd<'_>]) -> io::Result<u32> {
        let attrs = vec![
            attr(NbdAttr::SizeBytes, c.size)?,
            attr(NbdAttr::BlockSizeBytes, c.block_size)?,
            attr(NbdAttr::Timeout, c.timeout)?,
            attr(NbdAttr::DeadConnTimeout, c.dead_timeout)?,
            attr(NbdAttr::ServerFlags, u64::from(c.server_flags))?,
            attr(NbdAttr::ClientFlags, DESTROY_ON_DISCONNECT)?,
            attr(NbdAttr::BackendIdentifier, c.identifier.as_str())?,
            sockets(socks)?,
        ];
        let replies = self.call(NbdCmd::Connect, attrs, "CONNECT")?;
        replies
            .iter()
            .find_map(|m| {
                let p = m.get_payload()?;
                p.attrs()
                    .get_attr_handle()
                    .get_attr_payload_as::<u32>(NbdAttr::Index)
                    .ok()
            })
            .ok_or_else(|| io::Error::other("nbd CONNECT: no device index in the reply"))
    }

    /// Fills dead socket slots of device `index` with `socks`, and sets its size when given.
    pub fn reconfigure(
        &self,
        index: u32,
        identifier: &str,
        socks: &[BorrowedFd<'_>],
        size: Option<u64>,
    ) -> io::Result<()> {
        let mut attrs = vec![
            attr(NbdAttr::Index, index)?,
            attr(NbdAttr::BackendIdentifier, identifier)?,
        ];
        if !socks.is_empty() {
            attrs.push(sockets(socks)?);
        }
        if let Some(size) = size {
            attrs.push(attr(NbdAttr::SizeBytes, size)?);
        }
        self.call(NbdCmd::Reconfigure, attrs, "RECONFIGURE")
            .map(drop)
    }

    /// Disconnects device `index` (queued I/O fails; the device goes once unused).
    pub fn disconnect(&self, index: u32) -> io::Result<()> {
        let attrs = vec![attr(NbdAttr::Index, index)?];
        self.call(NbdCmd::Disconnect, attrs, "DISCONNECT").map(drop)
    }

    /// Sends one command and collects its replies; a refusal carries the kernel's errno.
    fn call(
        &self,
        cmd: NbdCmd,
        attrs: Vec<Nlattr<NbdAttr, Buffer>>,
        what: &str,
    ) -> io::Result<Vec<Nlmsghdr<u16, Msg>>> {
        let msg = GenlmsghdrBuilder::default()
            .cmd(cmd)
            .version(1)
            .attrs(attrs.into_iter().collect::<GenlBuffer<_, _>>())
            .build()
            .map_err(|e| io::Error::other(format!("nbd {what}: {e}")))?;
        let recv = self
            .router
            .send::<_, _, u16, Msg>(self.family, NlmF::ACK, NlPayload::Payload(msg))
            .map_err(|e| io::Error::other(format!("nbd {what}: {e}")))?;
        let mut replies = Vec::new();
        for r in recv {
            match r {
                Ok(m) => replies.push(m),
                Err(neli::err::RouterError::Nlmsgerr(e)) => {
                    let errno = -*e.error();
                    let err = io::Error::from_raw_os_error(errno);
                    return Err(io::Error::new(err.kind(), format!("nbd {what}: {err}")));
                }
                Err(e) => return Err(io::Error::other(format!("nbd {what}: {e}"))),
            }
        }
        Ok(replies)
    }
}

/// One attribute of type `t` holding `v`.
fn attr<P: neli::Size + ToBytes>(t: NbdAttr, v: P) -> io::Result<Nlattr<NbdAttr, Buffer>> {
    NlattrBuilder::default()
        .nla_type(build(AttrTypeBuilder::default().nla_type(t).build())?)
        .nla_payload(v)
        .build()
        .map_err(|e| io::Error::other(format!("nbd attribute {t:?}: {e}")))
}

/// The SOCKETS attribute: one nested item per socket, each holding the fd as u32.
fn sockets(socks: &[BorrowedFd<'_>]) -> io::Result<Nlattr<NbdAttr, Buffer>> {
    let mut all = attr(NbdAttr::Sockets, Buffer::from(Vec::new()))?;
    for s in socks {
        let fd = u32::try_from(s.as_raw_fd()).map_err(|_| io::ErrorKind::InvalidInput)?;
        let fd_attr = NlattrBuilder::default()
            .nla_type(build(
                AttrTypeBuilder::default()
                    .nla_type(SockItemAttr::Fd)
                    .build(),
            )?)
            .nla_payload(fd)
            .build()
            .map_err(|e| io::Error::other(format!("nbd socket attribute: {e}")))?;
        let item = NlattrBuilder::default()
            .nla_type(build(
                AttrTypeBuilder::default().nla_type(SockAttr::Item).build(),
            )?)
            .nla_payload(Buffer::from(Vec::new()))
            .build()
            .map_err(|e| io::Error::other(format!("nbd socket item: {e}")))?
            .nest(&fd_attr)
            .map_err(|e| io::Error::other(format!("nbd socket item: {e}")))?;
        all = all
            .nest(&item)
            .map_err(|e| io::Error::other(format!("nbd sockets: {e}")))?;
    }
    Ok(all)
}

fn build<T, E: std::fmt::Display>(r: Result<T, E>) -> io::Result<T> {
    r.map_err(|e| io::Error::other(format!("nbd attribute type: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    fn bytes(a: &Nlattr<NbdAttr, Buffer>) -> Vec<u8> {
        let mut c = Cursor::new(Vec::new());
        a.to_bytes(&mut c).expect("serialise");
        c.into_inner()
    }

    #[test]
    fn attributes_have_the_kernels_layout() {
        // nla_len 12, type 2, then the u64 in host order.
        let size = bytes(&attr(NbdAttr::SizeBytes, 0x0102_0304_0506_0708u64).expect("attr"));
        let mut want = vec![12, 0, 2, 0];
        want.extend_from_slice(&0x0102_0304_0506_0708u64.to_ne_bytes());
        assert_eq!(size, want);
        // The identifier is NUL-terminated and padded to 4 bytes.
        let id = bytes(&attr(NbdAttr::BackendIdentifier, "ab").expect("attr"));
        assert_eq!(id, vec![7, 0, 10, 0, b'a', b'b', 0, 0]);
        // SOCKETS(7, nested) > ITEM(1, nested) > FD(1, u32).
        let file = std::fs::File::open("/dev/null").expect("fd");
        let fd = file.as_raw_fd() as u32;
        let s = bytes(&sockets(&[std::os::fd::AsFd::as_fd(&file)]).expect("sockets"));
        let nested = 0x8000u16;
        let mut want = vec![];
        want.extend_from_slice(&16u16.to_ne_bytes());
        want.extend_from_slice(&(7 | nested).to_ne_bytes());
        want.extend_from_slice(&12u16.to_ne_bytes());
        want.extend_from_slice(&(1 | nested).to_ne_bytes());
        want.extend_from_slice(&8u16.to_ne_bytes());
        want.extend_from_slice(&1u16.to_ne_bytes());
        want.extend_from_slice(&fd.to_ne_bytes());
        assert_eq!(s, want);
    }
}
