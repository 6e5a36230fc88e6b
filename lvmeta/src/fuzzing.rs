//! Entry points of the fuzz targets (`fuzz/`), also used by the corpus replay test, so that
//! every parser sees the same hostile bytes in `cargo test` as under libFuzzer. Each must
//! return without panicking for any input.

use crate::dev::{BlockDevice, MemDevice};
use crate::{label, mda, model, scan, text};

/// Label scan and pv_header decode over the first sectors of a device; valid labels must
/// re-encode to the same sector.
pub fn label(data: &[u8]) {
    let mut buf = data.to_vec();
    buf.resize(label::LABEL_SCAN_SIZE, 0);
    if let Some(l) = label::scan(&buf).label {
        if let Ok(again) = label::encode(&l) {
            let decoded = label::decode(&again, l.sector);
            assert_eq!(
                decoded.as_ref().ok(),
                Some(&l),
                "label re-encode changed it"
            );
        }
    }
}

/// mda_header decode (start and size taken from the first 16 bytes) and text location.
pub fn mda(data: &[u8]) {
    if data.len() < 16 + 512 {
        return;
    }
    let start = u64::from_le_bytes(data[..8].try_into().unwrap_or_default());
    let size = u64::from_le_bytes(data[8..16].try_into().unwrap_or_default());
    if let Ok(h) = mda::decode(&data[16..16 + 512], start, size) {
        let [(_, a), (_, b)] = mda::text_pieces(&h.committed, h.size);
        assert!(h.committed.is_empty() || a + b == h.committed.size);
        assert_eq!(mda::decode(&mda::encode(&h), start, size).as_ref(), Ok(&h));
    }
}

/// Text parser and model import. A tree must print and parse back to itself; a model, once
/// written by lvmeta, must read back to itself.
pub fn text(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(tree) = text::parse(s) else { return };
    let printed = text::print_tree(&tree, text::Style::Raw);
    assert_eq!(text::parse(&printed).as_ref(), Ok(&tree), "tree round trip");
    let Ok(imp) = model::Vg::from_tree(&tree) else {
        return;
    };
    let first = imp.vg.to_text(text::Style::Raw, "fuzz");
    let a = model::Vg::from_text(&first)
        .expect("lvmeta's own text imports")
        .vg;
    let b = model::Vg::from_text(&a.to_text(text::Style::Raw, "fuzz")).map(|i| i.vg);
    assert_eq!(b.as_ref().ok(), Some(&a), "model round trip");
}

/// Search of a whole metadata area for older copies (the VG name is taken from the text at
/// offset 512); every copy found must print and read back to itself.
pub fn history(data: &[u8]) {
    let name = data
        .get(512..)
        .and_then(|t| t.split(|b| *b == b' ').next())
        .and_then(|n| std::str::from_utf8(n).ok())
        .unwrap_or("");
    for vg in crate::history::find(data, name) {
        let again = model::Vg::from_text(&vg.to_text(text::Style::Raw, "fuzz")).map(|i| i.vg);
        assert_eq!(again.as_ref().ok(), Some(&vg), "history copy round trip");
    }
}

/// sanlock lease areas (1 MiB, 512-byte sectors; the input is its start, zero-padded): the
/// in-place rename check and the "held by nobody" check. A lease fit for renaming is unheld,
/// and renaming it back gives its leader back.
pub fn lease(data: &[u8]) {
    use crate::lease::{paxos, Geometry};
    let g = Geometry::for_sector(512);
    let mut area = data.to_vec();
    area.resize(usize::try_from(g.align).unwrap_or(1 << 20), 0);
    let held = paxos::unheld(&area, g);
    if let Ok(leader) = paxos::renamed_leader(&area, g, "lvm_vg", "fuzz") {
        assert_eq!(held, Ok(true), "a lease fit for renaming is held");
        let original = area[..leader.len()].to_vec();
        area[..leader.len()].copy_from_slice(&leader);
        let name = original[104..152]
            .split(|b| *b == 0)
            .next()
            .and_then(|n| std::str::from_utf8(n).ok())
            .unwrap_or("");
        if let Ok(back) = paxos::renamed_leader(&area, g, "lvm_vg", name) {
            assert_eq!(back, original, "renaming back changed the leader");
        }
    }
    board(data);
}

/// The first sectors of `data` read as a serve board: an entry that decodes encodes back
/// to the same bytes.
fn board(data: &[u8]) {
    use crate::lease::board::{Board, ServeRecord, Slot, BOARD_SECTORS, ENTRY_LEN};
    const POOL: &str = "0123456789abcdef0123456789abcdef";
    let mut bytes = data.to_vec();
    bytes.resize(BOARD_SECTORS as usize * 512, 0);
    let Ok(b) = Board::decode(&bytes, 512, POOL) else {
        panic!("a board of the right size always decodes");
    };
    if let Some(r) = b.record {
        let again = r.encode(POOL).ok();
        assert_eq!(
            again.as_ref().map(|e| &e[..]),
            Some(&bytes[..ENTRY_LEN]),
            "record round trip"
        );
        assert_eq!(
            ServeRecord::decode(&bytes[..ENTRY_LEN], POOL)
                .ok()
                .flatten(),
            Some(r)
        );
    }
    for (i, slot) in b.slots {
        let at = (1 + i) * 512;
        let again = slot.encode(POOL).ok();
        assert_eq!(
            again.as_ref().map(|e| &e[..]),
            Some(&bytes[at..at + ENTRY_LEN]),
            "slot round trip"
        );
        assert_eq!(
            Slot::decode(&bytes[at..at + ENTRY_LEN], POOL)
                .ok()
                .flatten(),
            Some(slot)
        );
    }
}

/// Short texts from outside: the kernel's status lines of thin-pool, thin, raid, cache and
/// writecache targets.
pub fn words(data: &[u8]) {
    use crate::activate::status::{parse, Usage};
    let text = String::from_utf8_lossy(data);
    if let Ok(st) = crate::activate::thin::parse_pool_status("fuzz", &text) {
        assert!(!(st.read_only && st.out_of_data_space), "one metadata mode");
    }
    for target in ["thin-pool", "thin", "raid", "cache", "writecache"] {
        if let Some(Usage::Writecache { total, free }) = parse(target, &text) {
            assert!(free <= total, "no more free blocks than blocks");
        }
    }
}

/// A whole-device scan of an in-memory image.
pub fn device(data: &[u8]) {
    let dev = MemDevice::from_bytes("fuzz", data.to_vec(), 512);
    let devs: [&dyn BlockDevice; 1] = [&dev];
    let _ = scan::scan(&devs);
}

/// The sanlock daemon's status reply ([`crate::lease::daemon::parse`]): never a panic, and
/// what reads names only lockspaces and leases whose records it read.
pub fn sanlock_status(data: &[u8]) {
    if let Ok(st) = crate::lease::daemon::parse(data) {
        assert!(st.lockspaces.len() + st.resources.len() + st.clients.len() <= data.len() / 80);
    }
}

/// What a device carries ([`crate::signature::inspect`], the first half of `data` as its
/// head, the rest as its tail) and the creation claim's record ([`crate::claim::decode`]):
/// never a panic; a decoded record encodes to a sector that decodes and encodes the same.
pub fn blank(data: &[u8]) {
    let (head, tail) = data.split_at(data.len() / 2);
    let size =
        (head.len() + tail.len()) as u64 + u64::from(data.first().copied().unwrap_or(0)) * 4096;
    let skip = data.len().min(crate::claim::OFFSET as usize)..data.len();
    let _ = crate::signature::inspect(head, tail, size, skip);
    if let crate::claim::Sector::Claim(r) = crate::claim::decode(data) {
        // Names are decoded lossily and cut to fit: encoding is stable from the first round.
        let again = crate::claim::encode(&r);
        let crate::claim::Sector::Claim(back) = crate::claim::decode(&again) else {
            panic!("an encoded record does not decode");
        };
        assert_eq!((back.token, back.since), (r.token, r.since));
        assert_eq!(crate::claim::encode(&back), again, "encoding not stable");
    }
}
