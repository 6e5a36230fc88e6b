//! A thin pool's serve board seen through the lock manager's view of the lockspace: slots
//! are stamped with their host's generation, and a slot written in a host life that has
//! ended (the host dead, gone, or joined again since) no longer counts as a staging until
//! its host writes it again. In-memory leases, two hosts on one image file.

use std::sync::Arc;
use std::time::Duration;

use lvmeta::dev::{BlockDevice, FileDevice};
use lvmeta::edit::{self, LvSpec, SharedVg, VgSpec};
use lvmeta::lease::board::{Slot, SlotState, NO_ADDR, SLOTS};
use lvmeta::lease::{FakeLeases, Host};
use lvmeta::session::{PoolBoard, Session};
use lvmeta::testing::stamp;

/// Removes the image file when dropped.
struct Image(std::path::PathBuf);

impl Drop for Image {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Host `id`'s session on the image at `path`.
fn host(fake: &Arc<FakeLeases>, path: &std::path::Path, id: u64) -> Session {
    let dev = FileDevice::open_rw(path).expect("open the image");
    Session::new(vec![Box::new(dev) as Box<dyn BlockDevice>]).with_host(Host::new(
        fake.clone(),
        id,
        10,
        Duration::from_millis(300),
    ))
}

/// A shared VG "vg" on a new image, with pool "pool" and thin LV "t", made by host 7;
/// host 7's session and the pool's board.
fn pool_on_image(fake: &Arc<FakeLeases>, image: &Image) -> (Session, PoolBoard) {
    let f = std::fs::File::create(&image.0).expect("image");
    f.set_len(512 << 20).expect("size");
    let pv = image.0.to_str().expect("utf-8").to_owned();
    let a = host(fake, &image.0, 7);
    a.vgcreate(
        &VgSpec {
            name: "vg".into(),
            extent_size: 8192,
            tags: vec![],
            shared: Some(SharedVg {
                lock_lv_size: lvmeta::units::Bytes(256 << 20),
            }),
        },
        &[pv.as_str()],
    )
    .expect("vgcreate --shared");
    a.lockstart("vg").expect("lockstart as host 7");
    a.update("vg", "lvcreate", |v, ctx| {
        let pool = edit::PoolSpec {
            data: LvSpec::linear("pool", 2, stamp()),
            chunk_size: None,
            metadata_extents: None,
            discards: "passdown".into(),
            zero: true,
        };
        let (v, _) = edit::thin::create_pool(v, ctx, &pool)?;
        let thin = edit::ThinSpec {
            name: Some("t".into()),
            pool: "pool".into(),
            extents: 1,
            origin: None,
            tags: vec![],
            activation_skip: Some(false),
            stamp: stamp(),
        };
        edit::thin::create_thin(v, ctx, &thin)
    })
    .expect("pool and thin LV");
    let board = a.pool_board("vg", "t").expect("board").expect("a thin LV");
    (a, board)
}

/// Host `host`'s slot of thin LV t, as staged.
fn staged_slot(board: &PoolBoard, host: u64) -> Slot {
    Slot {
        lv_id: board.lv_id.replace('-', ""),
        host,
        generation: 0,
        state: SlotState::Staged,
        read_only: false,
        epoch: 1,
        written_ms: 1,
        addr: NO_ADDR,
    }
}

#[test]
fn slots_of_ended_host_lives_do_not_count() {
    let image = Image(std::env::temp_dir().join(format!("board-hosts-{}.img", std::process::id())));
    let fake = Arc::new(FakeLeases::default());
    let (a, board) = pool_on_image(&fake, &image);

    // Host 8 stages t: its slot carries its generation (its first join: 1).
    let b = host(&fake, &image.0, 8);
    b.lockstart("vg").expect("lockstart as host 8");
    let mut slot = staged_slot(&board, 8);
    let index = b.claim_board_slot(&board, &mut slot).expect("claim");
    assert_eq!(slot.generation, 1, "stamped with host 8's generation");
    let staged = |s: &Session| {
        let live = s.read_board_live(&board).expect("read");
        live.slots_of(&board.lv_id)
            .map(|(_, s)| s.host)
            .collect::<Vec<_>>()
    };
    assert_eq!(staged(&a), [8]);

    // Host 8 dies: its slot stays on the LUN but counts no more.
    fake.kill_host(&board.spec.lockspace, 8);
    assert_eq!(staged(&a), [] as [u64; 0]);
    let raw = a.read_board(&board).expect("read");
    assert_eq!(raw.slots_of(&board.lv_id).count(), 1, "still written");

    // It joins again (generation 2): the old slot stays stale until host 8 writes it.
    b.lockstop("vg").expect("lockstop");
    b.lockstart("vg").expect("lockstart again");
    assert_eq!(staged(&a), [] as [u64; 0], "a slot of its earlier life");
    b.write_board_slot(&board, index, &slot).expect("rewrite");
    assert_eq!(staged(&a), [8], "written in its new life");
    let raw = a.read_board(&board).expect("read");
    let (_, written) = raw.slots_of(&board.lv_id).next().expect("slot");
    assert_eq!(written.generation, 2);
}

#[test]
fn a_full_board_reuses_the_slot_of_an_ended_host_life_only() {
    let image = Image(std::env::temp_dir().join(format!("board-reuse-{}.img", std::process::id())));
    let fake = Arc::new(FakeLeases::default());
    let (a, board) = pool_on_image(&fake, &image);
    let b = host(&fake, &image.0, 8);
    b.lockstart("vg").expect("lockstart as host 8");
    let mut eight = staged_slot(&board, 8);
    let index = b.claim_board_slot(&board, &mut eight).expect("claim");
    // The other 43 slots: hosts the lock manager knows nothing of (they count).
    for (n, i) in (0..SLOTS).filter(|i| *i != index).enumerate() {
        a.write_board_slot(&board, i, &staged_slot(&board, 100 + n as u64))
            .expect("fill");
    }
    let c = host(&fake, &image.0, 9);
    c.lockstart("vg").expect("lockstart as host 9");
    let mut nine = staged_slot(&board, 9);
    let full = c.claim_board_slot(&board, &mut nine);
    assert!(full.is_err(), "host 8 is live: {full:?}");

    // Host 8 joins again (generation 2): alive, its slot of generation 1 is still its own.
    b.lockstop("vg").expect("lockstop");
    b.lockstart("vg").expect("lockstart again");
    assert!(
        c.claim_board_slot(&board, &mut nine).is_err(),
        "host 8 lives"
    );
    // Host 8 leaves the lockspace (FREE): its slot goes to host 9.
    b.lockstop("vg").expect("lockstop");
    assert_eq!(c.claim_board_slot(&board, &mut nine).expect("claim"), index);
    b.lockstart("vg").expect("lockstart again");
    let raw = a.read_board(&board).expect("read");
    let (_, now) = raw.slots.iter().find(|(i, _)| *i == index).expect("slot");
    assert_eq!(now.host, 9);
    // Host 8's rewrite of its old slot under the VG lease finds it taken: not written.
    let rewrote = b.rewrite_own_board_slot(&board, index, &eight);
    assert!(!rewrote.expect("rewrite"), "another host's slot now");
    let raw = a.read_board(&board).expect("read");
    let (_, still) = raw.slots.iter().find(|(i, _)| *i == index).expect("slot");
    assert_eq!(still.host, 9, "host 9's slot untouched");
    // Host 8 claims again: nothing free, and host 9's slot is of a live host.
    assert!(b.claim_board_slot(&board, &mut eight).is_err(), "full");
    // Host 9 rewrites its own slot: written.
    assert!(c
        .rewrite_own_board_slot(&board, index, &nine)
        .expect("rewrite"));
    // One of the others leaves: host 8 gets its slot.
    let leaving = Slot {
        state: SlotState::Leaving,
        ..staged_slot(&board, 100)
    };
    let first = if index == 0 { 1 } else { 0 };
    a.write_board_slot(&board, first, &leaving).expect("leave");
    assert_eq!(
        b.claim_board_slot(&board, &mut eight).expect("claim"),
        first
    );
    assert_eq!(eight.generation, 3, "in its new life");
    // Host 8 leaves: its slot only, under the VG lease.
    assert_eq!(b.leave_board_slots(&board, 8, 7).expect("leave"), 1);
    let raw = a.read_board(&board).expect("read");
    let state = |i: usize| {
        raw.slots
            .iter()
            .find(|(j, _)| *j == i)
            .map(|(_, s)| (s.host, s.state))
    };
    assert_eq!(state(first), Some((8, SlotState::Leaving)));
    assert_eq!(
        state(index),
        Some((9, SlotState::Staged)),
        "host 9's untouched"
    );
}
