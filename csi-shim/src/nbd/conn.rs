//! One NBD connection served: the handshake, then transmission, pipelined.
//!
//! - The connection's thread reads requests in order; each runs on the server's shared
//!   workers; a writer thread per connection sends the replies as they complete (the
//!   protocol matches them by cookie, in any order).
//! - Bytes and requests in flight are taken from [`Budget`]s before a payload is read or a
//!   request queued, so what a client costs is bounded whatever it sends.
//! - A request the export cannot serve is answered with its errno; the connection ends only
//!   on a protocol error, a failed socket, `DISC` (after the replies of earlier requests), or
//!   the export's closing (without replies: the client requeues them).
//! - Data are never cached here, and a WRITE is answered once it is durable (a device
//!   flush shared with the writes that wait with it): FUA changes nothing, and a FLUSH only
//!   flushes the device again.

use std::io::{self, IoSlice, Read, Write};
use std::net::{IpAddr, Shutdown, TcpStream};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lvmeta::dev::BlockDevice;

use super::buffers::{Buffers, Idle, Pooled, IDLE_PER_CONNECTION, IDLE_PER_NODE};
use super::durable::Outcome;
use super::handshake::{handshake, read_array, Find, ServeError};
use super::later::{Job, Later};
use super::limits::{payload_budget, Budget, Limits, Permit};
use super::proto::{self, errno, Command, Request};
use super::Export;

/// A connected socket the server can split into a reading and a writing half, and end.
pub trait Wire: Read + Write + Send + 'static {
    /// Another handle on the same socket.
    fn split(&self) -> io::Result<Self>
    where
        Self: Sized;
    /// Ends the connection both ways (blocked reads and writes return).
    fn end(&self);
    /// The read timeout (None: none). It is the socket's, shared by all its handles: only
    /// the reading thread sets it.
    fn set_read_timeout_of(&self, t: Option<Duration>) -> io::Result<()>;
    /// The write timeout (None: none); set only by the writing thread.
    fn set_write_timeout_of(&self, t: Option<Duration>) -> io::Result<()>;
    /// The peer's address, if it has one.
    fn peer_ip(&self) -> Option<IpAddr>;
    /// Writes `bufs` in one `sendmsg` with MSG_NOSIGNAL: a peer gone is EPIPE, never a
    /// SIGPIPE (`writev`, which `write_vectored` uses, raises it in a process that does
    /// not ignore it, such as a fuzzer's).
    fn send_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize>;
}

/// Both socket kinds are wires; only TCP has a peer address.
macro_rules! wire_for {
    ($t:ty, $peer:expr) => {
        impl Wire for $t {
            fn split(&self) -> io::Result<Self> {
                self.try_clone()
            }
            fn end(&self) {
                // Already ended or reset: nothing left to end.
                let _ = self.shutdown(Shutdown::Both);
            }
            fn set_read_timeout_of(&self, t: Option<Duration>) -> io::Result<()> {
                self.set_read_timeout(t)
            }
            fn set_write_timeout_of(&self, t: Option<Duration>) -> io::Result<()> {
                self.set_write_timeout(t)
            }
            fn peer_ip(&self) -> Option<IpAddr> {
                $peer(self)
            }
            fn send_vectored(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
                use nix::sys::socket::{sendmsg, MsgFlags};
                use std::os::fd::AsRawFd;
                sendmsg::<()>(self.as_raw_fd(), bufs, &[], MsgFlags::MSG_NOSIGNAL, None)
                    .map_err(io::Error::from)
            }
        }
    };
}

wire_for!(TcpStream, |s: &TcpStream| s
    .peer_addr()
    .ok()
    .map(|a| a.ip()));
wire_for!(UnixStream, |_: &UnixStream| None);

/// How often a request the device failed with EIO is tried again while its export holds
/// I/O errors.
const EIO_RETRY: Duration = Duration::from_millis(500);

/// What the connections of one node share: limits, the bytes budget, the I/O workers
/// (joined when the server goes: no thread outlives it).
pub struct Server {
    limits: Limits,
    budget: Arc<Budget>,
    /// Idle payload buffers of every connection, against one cap.
    idle: Arc<Idle>,
    jobs: Mutex<Option<Sender<Job>>>,
    workers: Mutex<Vec<std::thread::JoinHandle<()>>>,
    /// Requests held through device errors wait here between tries.
    later: Arc<Later>,
}

impl Server {
    /// A server with `limits`, its workers started.
    pub fn new(limits: Limits) -> io::Result<Arc<Self>> {
        let (tx, rx) = channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        let mut workers = Vec::new();
        for i in 0..limits.workers.max(1) {
            let rx = rx.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("nbd-io-{i}"))
                .spawn(move || work(&rx));
            match spawned {
                Ok(w) => workers.push(w),
                // The ones started end as the sender goes.
                Err(e) => return Err(e),
            }
        }
        let to_workers = Mutex::new(tx.clone());
        let later = Later::start(move |job| {
            // Workers gone (only while the server goes): the request ends unanswered.
            let _ = to_workers.lock().map(|w| w.send(job));
        })?;
        Ok(Arc::new(Self {
            budget: payload_budget(limits.budget_bytes),
            idle: Idle::new(IDLE_PER_NODE),
            limits,
            jobs: Mutex::new(Some(tx)),
            workers: Mutex::new(workers),
            later: Arc::new(later),
        }))
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Payload bytes in flight on the node now.
    pub fn bytes_in_flight(&self) -> u64 {
        self.budget.used()
    }

    /// Serves one connection: the handshake within the limits' deadline (`handshook` is
    /// called once it is done), then requests until the client disconnects, the socket
    /// fails or the export closes.
    pub fn serve<W: Wire>(
        &self,
        mut wire: W,
        find: &Find<'_>,
        handshook: impl FnOnce(),
    ) -> Result<(), ServeError> {
        let chosen = handshake(&mut Deadline::new(&mut wire, self.limits.handshake), find)?;
        handshook();
        // Transmission: a client may be idle as long as it likes, but must take its replies.
        wire.set_read_timeout_of(None)?;
        wire.set_write_timeout_of(None)?;
        let Some(grant) = chosen else {
            return Ok(());
        };
        let (export, read_only) = (grant.export.clone(), grant.read_only());
        let ender = wire.split()?;
        let Some(id) = export.attach(Box::new(move || ender.end())) else {
            // Closed or full since the handshake looked: dropped, nothing was sent.
            return Ok(());
        };
        // Detached however transmission ends (a panic included): the slot is freed.
        let _attached = Attached(&export, id);
        self.transmit(wire, &export, read_only)
    }

    fn transmit<W: Wire>(
        &self,
        mut reader: W,
        export: &Arc<Export>,
        read_only: bool,
    ) -> Result<(), ServeError> {
        let (replies, queue) = channel::<Reply>();
        let writer = reader.split()?;
        let alive = Arc::new(AtomicBool::new(true));
        let (closing, writer_alive) = (export.clone(), alive.clone());
        let timeout = self.limits.reply_timeout;
        let sender = std::thread::Builder::new()
            .name("nbd-reply".into())
            .spawn(move || send_replies(writer, &queue, &closing, &writer_alive, timeout))?;
        let read = self.read_requests(&mut reader, export, read_only, &replies, &alive);
        if read.is_err() {
            // A connection that failed runs none of its queued requests: the client has
            // requeued them elsewhere, and a late run could land after their retries.
            alive.store(false, Ordering::SeqCst);
            reader.end();
        }
        // The writer ends once every queued request has replied (or been dropped).
        drop(replies);
        if sender.join().is_err() {
            tracing::error!("NBD reply thread panicked");
        }
        read
    }

    /// Reads requests until `DISC` or an error, queueing each on the workers.
    fn read_requests<W: Wire>(
        &self,
        reader: &mut W,
        export: &Arc<Export>,
        read_only: bool,
        replies: &Sender<Reply>,
        alive: &Arc<AtomicBool>,
    ) -> Result<(), ServeError> {
        let in_flight = Budget::new(self.limits.max_in_flight);
        let own_bytes = payload_budget(self.limits.connection_bytes);
        let buffers = Buffers::new(IDLE_PER_CONNECTION, self.idle.clone());
        loop {
            let req = Request::parse(read_array(reader)?)?;
            if req.command == Command::Disconnect {
                return Ok(());
            }
            // Read each time: the export grows while connections stay open.
            let checked = req.check(export.size(), read_only);
            let count = in_flight.take(1);
            let data_len = match req.command {
                Command::Write => req.len,
                Command::Read if checked.is_ok() => req.len,
                _ => 0,
            };
            // Bounded before anything is allocated: a payload too large to read is a
            // protocol error (the stream cannot be resynchronised).
            if data_len > proto::MAX_PAYLOAD {
                return Err(ServeError::Io(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("a {:?} of {} bytes", req.command, req.len),
                )));
            }
            // The connection's own budget first: a connection waiting on itself holds
            // nothing of the node's.
            let own = own_bytes.take(u64::from(data_len));
            let bytes = self.budget.take(u64::from(data_len));
            let mut data = buffers.take(data_len as usize);
            if req.command == Command::Write {
                // The whole payload must arrive in time: a stalled one would hold its budget.
                let t = self.limits.reply_timeout;
                Deadline::new(&mut *reader, t).read_exact(data.as_mut_slice())?;
                reader.set_read_timeout_of(None)?;
            }
            let work = Work {
                export: export.clone(),
                req,
                checked,
                data,
                permits: (count, own, bytes),
                replies: replies.clone(),
                alive: alive.clone(),
                later: self.later.clone(),
                held_since: None,
            };
            self.submit(Box::new(move || work.run()));
        }
    }

    fn submit(&self, job: Job) {
        let jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
        let refused = match jobs.as_ref() {
            Some(tx) => tx.send(job).err().map(|e| e.0),
            None => Some(job),
        };
        if let Some(job) = refused {
            // Workers gone (only while the server goes): run it here.
            job();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // Held requests first: the retry thread holds a way to the workers' queue.
        self.later.stop();
        // The workers end once the queue closes and they have run what was in it.
        drop(self.jobs.lock().unwrap_or_else(|p| p.into_inner()).take());
        let workers = std::mem::take(&mut *self.workers.lock().unwrap_or_else(|p| p.into_inner()));
        for w in workers {
            if w.join().is_err() {
                tracing::error!("NBD I/O worker panicked");
            }
        }
    }
}

/// A worker's loop: run jobs until the server goes.
fn work(rx: &Mutex<Receiver<Job>>) {
    loop {
        let job = match rx.lock().unwrap_or_else(|p| p.into_inner()).recv() {
            Ok(job) => job,
            Err(_) => return,
        };
        job();
    }
}

/// A request on its way: run it, queue its reply.
struct Work {
    export: Arc<Export>,
    req: Request,
    checked: Result<(), u32>,
    data: Pooled,
    permits: (Permit, Permit, Permit),
    replies: Sender<Reply>,
    /// Cleared when the connection fails: its queued requests are not run.
    alive: Arc<AtomicBool>,
    /// Where a request held through device errors waits for its next try.
    later: Arc<Later>,
    /// When the device first failed it with EIO, while held.
    held_since: Option<Instant>,
}

impl Work {
    /// Runs the request (again, when held) and queues its reply; checked first at every
    /// try: a connection that failed runs nothing more (the client requeued its requests).
    /// A WRITE or FLUSH is answered after a flush round that started once it ran
    /// (`durable.rs`), without waiting for it here.
    fn run(mut self) {
        if !self.alive.load(Ordering::SeqCst) {
            return;
        }
        // The device is held across the I/O: a closed export touches it no more and
        // answers nothing.
        let (req, data) = (&self.req, &mut self.data);
        let done = match self.checked {
            Err(e) => Err(e),
            Ok(()) => match self
                .export
                .with_device(|dev| run(dev, req, data).map_err(|e| (dev.name().to_owned(), e)))
            {
                Some(Ok(())) if matches!(req.command, Command::Write | Command::Flush) => {
                    return self.after_flush();
                }
                Some(Ok(())) => Ok(()),
                Some(Err((device, e))) => return self.failed(&device, &e),
                None => return,
            },
        };
        self.answer(done);
    }

    /// Joins the export's next flush round; answered (or held, or dropped) by its outcome.
    fn after_flush(self) {
        let export = self.export.clone();
        let flush =
            || export.with_device(|dev| dev.flush().map_err(|e| (dev.name().to_owned(), e)));
        export.flushes.then(
            &flush,
            Box::new(move |outcome| match outcome {
                Outcome::Flushed => self.answer(Ok(())),
                Outcome::Failed(device, e) => self.failed(device, e),
                Outcome::Closed => {}
            }),
        );
    }

    /// Holds the request through device error `e`, or answers EIO.
    fn failed(mut self, device: &str, e: &io::Error) {
        match self.hold(device, e) {
            true => self.again(),
            false => self.answer(Err(errno::EIO)),
        }
    }

    /// Queues the reply: `done` is the errno, or success (a READ's with its data).
    fn answer(self, done: Result<(), u32>) {
        let error = done.err().unwrap_or(0);
        let with_data = error == 0 && self.req.command == Command::Read;
        let reply = Reply {
            head: proto::simple_reply(error, self.req.cookie),
            data: with_data.then_some(self.data),
            _permits: self.permits,
        };
        // The writer is gone only when the connection ended: nobody to answer.
        let _ = self.replies.send(reply);
    }

    /// Is device error `e` of this request held rather than answered? Only EIO (a lost
    /// path reads as EIO), for at most the export's hold. Any request may be held: no
    /// write answered rests on a flush that failed. Logs the first failure and the
    /// answer.
    fn hold(&mut self, device: &str, e: &io::Error) -> bool {
        let (req, hold) = (&self.req, self.export.io_error_hold());
        let eio = lvmeta::dev::os_error(e) == Some(nix::errno::Errno::EIO as i32);
        let may = eio && !hold.is_zero();
        let first = self.held_since.is_none();
        let since = *self.held_since.get_or_insert_with(Instant::now);
        if may && since.elapsed() < hold {
            if first {
                tracing::warn!(device, offset = req.offset, len = req.len, error = %e, hold_s = hold.as_secs(), "NBD request failed: held, tried again until it succeeds, the export closes or the hold ends");
            }
            return true;
        }
        tracing::warn!(device, offset = req.offset, len = req.len, error = %e, held_ms = since.elapsed().as_millis() as u64, "NBD request failed: answered EIO");
        false
    }

    /// Tries the request again after [`EIO_RETRY`], off the workers.
    fn again(self) {
        let later = self.later.clone();
        // A server that is going drops it: unanswered, the client requeues it.
        let _ = later.at(Instant::now() + EIO_RETRY, Box::new(move || self.run()));
    }
}

/// A reply ready to send, holding its budget until sent.
struct Reply {
    head: [u8; 16],
    data: Option<Pooled>,
    _permits: (Permit, Permit, Permit),
}

/// Sends replies until every request has replied; stops writing once the export closes or
/// the socket fails (the rest are dropped, and their budget freed). Each reply must be
/// taken by the client within `timeout`, or the connection ends.
fn send_replies<W: Wire>(
    mut writer: W,
    queue: &Receiver<Reply>,
    export: &Export,
    alive: &AtomicBool,
    timeout: Duration,
) {
    for reply in queue {
        if !alive.load(Ordering::SeqCst) || export.is_closed() {
            continue;
        }
        let mut within = Deadline::new(&mut writer, timeout);
        let data = reply.data.as_ref().map_or(&[][..], Pooled::as_slice);
        let sent = write_all_vectored(
            &mut within,
            &mut [IoSlice::new(&reply.head), IoSlice::new(data)],
        );
        if let Err(e) = sent.and_then(|()| within.flush()) {
            tracing::debug!(error = %e, "NBD reply not sent; ending the connection");
            alive.store(false, Ordering::SeqCst);
            writer.end();
        }
    }
}

/// Detaches a connection from its export when dropped.
struct Attached<'a>(&'a Export, u64);

impl Drop for Attached<'_> {
    fn drop(&mut self) {
        self.0.detach(self.1);
    }
}

/// Runs a request that passed its check on the export's device. A WRITE or FLUSH is
/// durable only after the flush round it then joins.
fn run(dev: &dyn BlockDevice, req: &Request, data: &mut Pooled) -> io::Result<()> {
    let len = u64::from(req.len);
    // TRIM and WRITE_ZEROES are durable on return already (the trait's promise).
    match req.command {
        Command::Read => dev.read_at(req.offset, data.as_mut_slice()),
        Command::Write => dev.write_at(req.offset, data.as_slice()),
        // A hint: a device that cannot discard keeps the data.
        Command::Trim => dev.discard(req.offset, len).map(drop),
        Command::WriteZeroes => dev.write_zeroes(req.offset, len),
        Command::Flush => Ok(()),
        // Refused by the check (never reaches a device).
        Command::Disconnect | Command::Other(_) => Err(io::ErrorKind::InvalidInput.into()),
    }
}

/// Writes every byte of `bufs`, header and data in as few system calls as the socket takes.
fn write_all_vectored(w: &mut impl Write, mut bufs: &mut [IoSlice<'_>]) -> io::Result<()> {
    IoSlice::advance_slices(&mut bufs, 0);
    while !bufs.is_empty() {
        match w.write_vectored(bufs) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut bufs, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A wire whose reads and writes must all finish within a timeout (a handshake, a
/// payload, a reply).
/// - The socket's timeout is armed once per direction, not per system call: each call
///   then waits at most the whole timeout, and none starts past the deadline, so a stalled
///   message ends within twice its timeout.
struct Deadline<'a, W: Wire> {
    wire: &'a mut W,
    timeout: Duration,
    deadline: Instant,
    /// (read, write) timeouts armed.
    armed: (bool, bool),
}

impl<'a, W: Wire> Deadline<'a, W> {
    /// `wire` with `timeout` from now.
    fn new(wire: &'a mut W, timeout: Duration) -> Self {
        Self {
            wire,
            timeout,
            deadline: Instant::now() + timeout,
            armed: (false, false),
        }
    }

    /// An error once the deadline passed.
    fn check(&self) -> io::Result<()> {
        if Instant::now() >= self.deadline {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "past the deadline"));
        }
        Ok(())
    }
}

/// Reads arm the read timeout only, writes the write timeout only: the two directions of
/// a connection are served by different threads, and the timeouts are the socket's.
impl<W: Wire> Read for Deadline<'_, W> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.check()?;
        if !self.armed.0 {
            self.wire.set_read_timeout_of(Some(self.timeout))?;
            self.armed.0 = true;
        }
        self.wire.read(buf)
    }
}

impl<W: Wire> Write for Deadline<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.arm_write()?;
        self.wire.send_vectored(&[IoSlice::new(buf)])
    }
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.arm_write()?;
        self.wire.send_vectored(bufs)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.wire.flush()
    }
}

impl<W: Wire> Deadline<'_, W> {
    fn arm_write(&mut self) -> io::Result<()> {
        self.check()?;
        if !self.armed.1 {
            self.wire.set_write_timeout_of(Some(self.timeout))?;
            self.armed.1 = true;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Serves one connection with a server of its own.
    fn serve<W: Wire>(wire: W, find: &Find<'_>) -> Result<(), ServeError> {
        let limits = Limits {
            workers: 2,
            ..Limits::default()
        };
        Server::new(limits)?.serve(wire, find, || {})
    }
    use crate::nbd::Grant;
    use lvmeta::dev::MemDevice;
    use proto::{opt, rep, CMD_FLAG_FUA, CMD_FLAG_NO_HOLE};
    use std::os::unix::net::UnixStream;
    use std::thread::JoinHandle;

    const SIZE: u64 = 1 << 20;

    /// A server on one end of a socket pair, exporting `vol` (read-only with `ro`).
    fn start(ro: bool) -> (UnixStream, JoinHandle<Result<(), ServeError>>) {
        start_granted(ro, false)
    }

    /// As [`start`], the client granted read-only access with `ro_client`.
    fn start_granted(
        ro: bool,
        ro_client: bool,
    ) -> (UnixStream, JoinHandle<Result<(), ServeError>>) {
        let (server, client) = UnixStream::pair().expect("socket pair");
        let export = Export::new(Box::new(MemDevice::new("vol", SIZE, 512)), ro, 4);
        let handle = std::thread::spawn(move || {
            let find = move |name: &[u8]| {
                use crate::nbd::Refusal;
                match name {
                    b"vol" => Ok(Grant {
                        export: export.clone(),
                        read_only_client: ro_client,
                    }),
                    b"not-now" => Err(Refusal::NotAdmitted),
                    _ => Err(Refusal::NotServed),
                }
            };
            serve(server, &find)
        });
        (client, handle)
    }

    fn read_n(s: &mut UnixStream, n: usize) -> Vec<u8> {
        let mut b = vec![0u8; n];
        s.read_exact(&mut b).expect("read");
        b
    }

    /// The greeting read, the client flags sent.
    fn hello(s: &mut UnixStream, flags: u32) {
        assert_eq!(read_n(s, 18), proto::greeting());
        s.write_all(&flags.to_be_bytes()).expect("flags");
    }

    fn option(s: &mut UnixStream, option: u32, data: &[u8]) {
        let mut b = proto::IHAVEOPT.to_be_bytes().to_vec();
        b.extend_from_slice(&option.to_be_bytes());
        b.extend_from_slice(&(data.len() as u32).to_be_bytes());
        b.extend_from_slice(data);
        s.write_all(&b).expect("option");
    }

    /// One option reply: its type and data.
    fn reply(s: &mut UnixStream) -> (u32, Vec<u8>) {
        let h = read_n(s, 20);
        assert_eq!(h[..8], proto::REPLY_MAGIC.to_be_bytes());
        let kind = u32::from_be_bytes(h[12..16].try_into().expect("4"));
        let len = u32::from_be_bytes(h[16..].try_into().expect("4"));
        (kind, read_n(s, len as usize))
    }

    fn go_data(name: &[u8]) -> Vec<u8> {
        let mut d = (name.len() as u32).to_be_bytes().to_vec();
        d.extend_from_slice(name);
        d.extend_from_slice(&0u16.to_be_bytes());
        d
    }

    /// Sends a request (and a write's data); returns the reply's errno and a read's data.
    fn request(s: &mut UnixStream, r: Request, data: &[u8]) -> (u32, Vec<u8>) {
        s.write_all(&r.encode()).expect("request");
        s.write_all(data).expect("data");
        let h = read_n(s, 16);
        assert_eq!(h[..4], proto::SIMPLE_REPLY_MAGIC.to_be_bytes());
        assert_eq!(h[8..], r.cookie.to_be_bytes());
        let err = u32::from_be_bytes(h[4..8].try_into().expect("4"));
        let body = match (r.command, err) {
            (Command::Read, 0) => read_n(s, r.len as usize),
            _ => Vec::new(),
        };
        (err, body)
    }

    fn req(command: Command, flags: u16, offset: u64, len: u32) -> Request {
        Request {
            flags,
            command,
            cookie: offset ^ u64::from(len),
            offset,
            len,
        }
    }

    #[test]
    fn a_client_goes_to_an_export_and_its_data_round_trip() {
        let (mut c, server) = start(false);
        hello(&mut c, 3);
        // Names are not disclosed; unknown options are refused; the handshake goes on.
        option(&mut c, opt::LIST, &[]);
        assert_eq!(reply(&mut c).0, rep::ERR_POLICY);
        option(&mut c, 99, b"junk");
        assert_eq!(reply(&mut c).0, rep::ERR_UNSUP);
        option(&mut c, opt::GO, &go_data(b"other"));
        assert_eq!(reply(&mut c).0, rep::ERR_UNKNOWN);
        option(&mut c, opt::GO, &go_data(b"not-now"));
        assert_eq!(
            reply(&mut c).0,
            rep::ERR_POLICY,
            "served, not to this client"
        );
        option(&mut c, opt::GO, &[1, 2]);
        assert_eq!(reply(&mut c).0, rep::ERR_INVALID);
        option(&mut c, opt::GO, &go_data(b"vol"));
        let (kind, info) = reply(&mut c);
        assert_eq!(kind, rep::INFO);
        assert_eq!(info[2..10], SIZE.to_be_bytes());
        let flags = u16::from_be_bytes(info[10..].try_into().expect("2"));
        assert_ne!(flags & proto::transmission::CAN_MULTI_CONN, 0);
        assert_eq!(flags & proto::transmission::READ_ONLY, 0);
        assert_eq!(reply(&mut c).0, rep::INFO);
        assert_eq!(reply(&mut c).0, rep::ACK);
        // Transmission.
        let data = vec![0x5a; 4096];
        let w = req(Command::Write, CMD_FLAG_FUA, 8192, 4096);
        assert_eq!(request(&mut c, w, &data).0, 0);
        let (err, back) = request(&mut c, req(Command::Read, 0, 8192, 4096), &[]);
        assert_eq!((err, back), (0, data.clone()));
        assert_eq!(request(&mut c, req(Command::Flush, 0, 0, 0), &[]).0, 0);
        let z = req(Command::WriteZeroes, CMD_FLAG_NO_HOLE, 8192, 512);
        assert_eq!(request(&mut c, z, &[]).0, 0);
        let (_, back) = request(&mut c, req(Command::Read, 0, 8192, 1024), &[]);
        assert!(back[..512].iter().all(|&b| b == 0) && back[512..].iter().all(|&b| b == 0x5a));
        assert_eq!(request(&mut c, req(Command::Trim, 0, 0, 4096), &[]).0, 0);
        // Refusals keep the connection: past the end, unknown commands.
        let past = req(Command::Write, 0, SIZE - 512, 1024);
        assert_eq!(request(&mut c, past, &[1; 1024]).0, errno::ENOSPC);
        let other = req(Command::Other(42), 0, 0, 0);
        assert_eq!(request(&mut c, other, &[]).0, errno::EINVAL);
        let (err, _) = request(&mut c, req(Command::Read, 0, 8192 + 512, 512), &[]);
        assert_eq!(err, 0);
        c.write_all(&req(Command::Disconnect, 0, 0, 0).encode())
            .expect("disc");
        server.join().expect("server").expect("clean end");
    }

    #[test]
    fn a_read_only_export_refuses_writes_and_stays_in_step() {
        for (mut c, server) in [start(true), start_granted(false, true)] {
            read_only_session(&mut c);
            drop(c);
            // The client went away without DISC: the connection ends with the socket.
            assert!(matches!(
                server.join().expect("server"),
                Err(ServeError::Io(_))
            ));
        }
    }

    /// A client of a read-only export (or grant): told so, its writes refused, reads served.
    fn read_only_session(c: &mut UnixStream) {
        hello(c, 1);
        // EXPORT_NAME, without NO_ZEROES: size, flags and 124 zero bytes.
        option(c, opt::EXPORT_NAME, b"vol");
        let r = read_n(c, 134);
        assert_eq!(r[..8], SIZE.to_be_bytes());
        let flags = u16::from_be_bytes(r[8..10].try_into().expect("2"));
        assert_ne!(flags & proto::transmission::READ_ONLY, 0);
        let w = req(Command::Write, 0, 0, 512);
        assert_eq!(request(c, w, &[7; 512]).0, errno::EPERM);
        let (err, back) = request(c, req(Command::Read, 0, 0, 512), &[]);
        assert_eq!((err, back), (0, vec![0; 512]));
    }

    #[test]
    fn hostile_clients_end_their_connection_without_hurting_the_server() {
        // Unknown client flags.
        let (mut c, server) = start(false);
        hello(&mut c, 0x80);
        assert!(matches!(
            server.join().expect("server"),
            Err(ServeError::Proto(_))
        ));
        // An option claiming 4 GiB of data.
        let (mut c, server) = start(false);
        hello(&mut c, 3);
        let mut h = proto::IHAVEOPT.to_be_bytes().to_vec();
        h.extend_from_slice(&opt::GO.to_be_bytes());
        h.extend_from_slice(&u32::MAX.to_be_bytes());
        c.write_all(&h).expect("header");
        assert!(matches!(
            server.join().expect("server"),
            Err(ServeError::Proto(_))
        ));
        // A request with a bad magic, and a write larger than any payload.
        for bad in [
            {
                let mut r = req(Command::Read, 0, 0, 512).encode();
                r[0] ^= 0xff;
                r
            },
            req(Command::Write, 0, 0, u32::MAX).encode(),
        ] {
            let (mut c, server) = start(false);
            hello(&mut c, 3);
            option(&mut c, opt::GO, &go_data(b"vol"));
            for _ in 0..3 {
                reply(&mut c);
            }
            c.write_all(&bad).expect("request");
            assert!(server.join().expect("server").is_err());
        }
        // ABORT ends the handshake cleanly.
        let (mut c, server) = start(false);
        hello(&mut c, 3);
        option(&mut c, opt::ABORT, &[]);
        assert_eq!(reply(&mut c).0, rep::ACK);
        server.join().expect("server").expect("aborted");
    }
}
