//! Both ends of the NBD data path for the two-host tests, without the CSI driver: one guest
//! serves a device with csi-shim's NBD server, the other attaches it with the kernel's NBD
//! client over generic netlink (`csi_shim::attach`).
//!
//! ```text
//! nbd-peer serve DEV IP%IF PORT      serve DEV as export `vol` on [IP%IF]:PORT, for ever
//! nbd-peer attach IP%IF PORT ID      attach `vol` there (two connections), as a device
//!                                    with backend identifier ID; prints its path
//! nbd-peer detach INDEX              disconnect /dev/nbdINDEX
//! ```

use std::net::{IpAddr, SocketAddr, SocketAddrV6};
use std::path::Path;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use csi_shim::attach::netlink::NbdNetlink;
use csi_shim::attach::{attach, device_path, AttachOptions};
use csi_shim::nbd::limits::Limits;
use csi_shim::nbd::listener::{Finder, Listener};
use csi_shim::nbd::Export;
use lvmeta::dev::FileDevice;

#[derive(Parser)]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Serve a device.
    Serve { dev: String, ip: String, port: u16 },
    /// Attach a served device.
    Attach { ip: String, port: u16, id: String },
    /// Disconnect an attached device.
    Detach { index: u32 },
}

/// `IP%IF` and `port` as a socket address (the interface's index as the scope).
fn addr(ip: &str, port: u16) -> SocketAddr {
    let (ip, scope) = match ip.split_once('%') {
        Some((ip, iface)) => {
            let index = std::fs::read_to_string(format!("/sys/class/net/{iface}/ifindex"))
                .unwrap_or_else(|e| panic!("interface {iface}: {e}"));
            (ip, index.trim().parse::<u32>().expect("ifindex"))
        }
        None => (ip, 0),
    };
    match ip.parse::<IpAddr>().expect("an IP address") {
        IpAddr::V6(v6) => SocketAddr::V6(SocketAddrV6::new(v6, port, 0, scope)),
        v4 => SocketAddr::new(v4, port),
    }
}

fn main() {
    match Args::parse().cmd {
        Cmd::Serve { dev, ip, port } => {
            let dev = FileDevice::open_data(Path::new(&dev)).expect("open the device");
            let export = Export::new(Box::new(dev), false, 4);
            let find: Arc<Finder> =
                Arc::new(move |_, n: &[u8]| (n == b"vol").then(|| export.clone()));
            let server = Listener::bind(addr(&ip, port), find, Limits::default()).expect("listen");
            println!("serving at {}", server.local_addr());
            loop {
                std::thread::park();
            }
        }
        Cmd::Attach { ip, port, id } => {
            let nl = NbdNetlink::open().expect("nbd netlink");
            let o = AttachOptions {
                connections: 2,
                timeout: 30,
                dead_timeout: 120,
                identifier: id,
            };
            let (index, _) = attach(&nl, addr(&ip, port), b"vol", &o).expect("attach");
            println!("{}", device_path(index).display());
        }
        Cmd::Detach { index } => {
            NbdNetlink::open()
                .expect("nbd netlink")
                .disconnect(index)
                .expect("DISCONNECT");
        }
    }
}
