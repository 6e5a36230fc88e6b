//! Test helper on lvmeta's sanlock lease layer: `host-view LOCKSPACE HOST_ID` prints how
//! this host's sanlock daemon (SANLOCK_RUN_DIR chooses which) sees host HOST_ID of
//! LOCKSPACE, as `generation=G state=S`, or `none` while it cannot say yet.
//!
//! A process of its own per daemon: libsanlock reads SANLOCK_RUN_DIR once per process.

use lvmeta::lease::{sanlock::SanlockLeases, LeaseManager};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, lockspace, id] = args.as_slice() else {
        eprintln!("usage: host-view LOCKSPACE HOST_ID");
        std::process::exit(2);
    };
    let Ok(id) = id.parse::<u64>() else {
        eprintln!("host-view: HOST_ID {id:?} is not a number");
        std::process::exit(2);
    };
    match SanlockLeases::new().host(lockspace, id) {
        Ok(Some(v)) => println!("generation={} state={:?}", v.generation, v.state),
        Ok(None) => println!("none"),
        Err(e) => {
            eprintln!("host-view: {e}");
            std::process::exit(1);
        }
    }
}
