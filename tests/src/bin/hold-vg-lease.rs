//! Test helper for the mixed-cluster test, on lvmeta's sanlock lease layer.
//!
//! `hold-vg-lease DEVICE VG HOST_ID` takes the VG lease, prints `held`, and keeps it until
//! killed (the test kills it with SIGKILL to show that the sanlock daemon frees a dead holder's
//! lease and the next writer goes on).
//!
//! `hold-vg-lease DEVICE VG HOST_ID LINGER_MS N` creates the LVs `kept-1` .. `kept-N` through a
//! session whose host keeps its VG lease for LINGER_MS after each change (csi-shim's linger),
//! prints `changed`, and exits once the releaser thread has given the lease back (the test
//! shows that an lvmlockd host waits meanwhile and then sees every change).
//!
//! SANLOCK_RUN_DIR chooses the daemon; the host must have joined the VG's lockspace already.

use std::sync::Arc;
use std::time::Duration;

use lvmeta::dev::{BlockDevice, FileDevice};
use lvmeta::edit::{self, LvSpec, Stamp};
use lvmeta::lease::{sanlock::SanlockLeases, Geometry, Host, Mode, VgPlaces};
use lvmeta::session::Session;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (device, vg, host_id, kept) = match args.as_slice() {
        [_, d, v, h] => (d, v, h, None),
        [_, d, v, h, ms, n] => (
            d,
            v,
            h,
            Some((
                Duration::from_millis(ms.parse().expect("LINGER_MS")),
                n.parse::<u32>().expect("N"),
            )),
        ),
        _ => {
            eprintln!("usage: hold-vg-lease DEVICE VG HOST_ID [LINGER_MS N]");
            std::process::exit(2);
        }
    };
    let host = Host::new(
        Arc::new(SanlockLeases::new()),
        host_id.parse().expect("host id"),
        2,
        Duration::from_secs(60),
    );
    match kept {
        None => hold(device, vg, &host),
        Some((linger, n)) => change_and_keep(device, vg, host, linger, n),
    }
}

/// Takes the VG lease and keeps it until killed.
fn hold(device: &str, vg: &str, host: &Host) {
    let dev = FileDevice::open(std::path::Path::new(device)).expect("open device");
    let devs: [&dyn BlockDevice; 1] = [&dev];
    let scan = lvmeta::scan::scan(&devs);
    let sv = scan.vg(vg).expect("VG");
    let paths = sv
        .pv_devices
        .iter()
        .map(|d| d.map(|i| scan.pvs[i].device.clone()))
        .collect();
    let at = VgPlaces {
        paths,
        geometry: Geometry::for_sector(dev.logical_sector_size()),
    };
    let _held = host
        .lock_vg(&sv.vg, &at, Mode::Exclusive)
        .expect("VG lease");
    println!("held");
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

/// Makes `n` changes with a host that keeps its VG lease for `linger`, then waits for the
/// releaser thread to give it back.
fn change_and_keep(device: &str, vg: &str, host: Host, linger: Duration, n: u32) {
    let dev = FileDevice::open_rw(std::path::Path::new(device)).expect("open device");
    let s = Session::new(vec![Box::new(dev) as Box<dyn BlockDevice>])
        .with_host(host.with_linger(linger, Duration::from_secs(600)));
    for i in 1..=n {
        let stamp = Stamp {
            time: 1_800_000_000,
            host: "linger".into(),
        };
        s.update(vg, "lvcreate", |v, ctx| {
            edit::lv::create(v, ctx, &LvSpec::linear(&format!("kept-{i}"), 1, stamp)).map(|x| x.0)
        })
        .expect("lvcreate");
    }
    println!("changed");
    // The releaser gives the lease back after `linger` unused; the session stays alive until
    // well after that, so it is the releaser (not the session's drop) that releases it.
    std::thread::sleep(linger * 2);
}
