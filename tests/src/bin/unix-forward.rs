//! `unix-forward PORT SOCKET`: accepts TCP connections on 0.0.0.0:PORT and joins each to a
//! new connection to the unix socket SOCKET. Inside a test VM it lets the host's test reach
//! a guest's CSI socket through QEMU's forwarded port (`tests/vm/run --fwd`).

use std::io::{copy, Result};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::thread;

fn pipe(tcp: TcpStream, socket: &str) -> Result<()> {
    let unix = UnixStream::connect(socket)?;
    let (mut tcp_r, mut unix_w) = (tcp.try_clone()?, unix.try_clone()?);
    let up = thread::spawn(move || {
        let _ = copy(&mut tcp_r, &mut unix_w);
        let _ = unix_w.shutdown(Shutdown::Write);
    });
    let (mut unix_r, mut tcp_w) = (unix, tcp);
    let _ = copy(&mut unix_r, &mut tcp_w);
    let _ = tcp_w.shutdown(Shutdown::Write);
    let _ = up.join();
    Ok(())
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let [_, port, socket] = args.as_slice() else {
        eprintln!("usage: unix-forward PORT SOCKET");
        std::process::exit(2);
    };
    let Ok(port) = port.parse::<u16>() else {
        eprintln!("unix-forward: {port:?} is not a port number");
        std::process::exit(2);
    };
    let listener = TcpListener::bind(("0.0.0.0", port))?;
    for conn in listener.incoming() {
        let tcp = conn?;
        let socket = socket.clone();
        thread::spawn(move || {
            if let Err(e) = pipe(tcp, &socket) {
                eprintln!("unix-forward: {socket}: {e}");
            }
        });
    }
    Ok(())
}
