//! Test helper: takes a shared VG's VG lease through lvmeta's sanlock lease layer, prints
//! `held`, and keeps it until killed (the mixed-cluster test kills it with SIGKILL to show that
//! the sanlock daemon frees a dead holder's lease and the next writer goes on).
//!
//! usage: hold-vg-lease DEVICE VG HOST_ID   (SANLOCK_RUN_DIR chooses the daemon; the host must
//! have joined the VG's lockspace already)

use std::sync::Arc;
use std::time::Duration;

use lvmeta::dev::{BlockDevice, FileDevice};
use lvmeta::lease::{sanlock::SanlockLeases, Geometry, Host, Mode, VgPlaces};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, device, vg, host_id] = args.as_slice() else {
        eprintln!("usage: hold-vg-lease DEVICE VG HOST_ID");
        std::process::exit(2);
    };
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
    let host = Host {
        manager: Arc::new(SanlockLeases::new()),
        host_id: host_id.parse().expect("host id"),
        io_timeout: 2,
        wait: Duration::from_secs(60),
    };
    let _held = host
        .lock_vg(&sv.vg, &at, Mode::Exclusive)
        .expect("VG lease");
    println!("held");
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}
