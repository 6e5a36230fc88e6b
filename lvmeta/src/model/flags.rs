//! Status and flag words (lvm2's `flags.c`), and the WRITE <-> WRITE_LOCKED substitution.

/// Words a VG `status` list may hold.
pub const VG_STATUS: &[&str] = &[
    "EXPORTED",
    "RESIZEABLE",
    "PVMOVE",
    "READ",
    "WRITE",
    "CLUSTERED",
    "SHARED",
    "PARTIAL",
];
/// Words a PV `status` list may hold.
pub const PV_STATUS: &[&str] = &["ALLOCATABLE", "EXPORTED", "MISSING"];
/// Words an LV `status` list may hold besides the [`SEGTYPE_FLAGS`], which lvm2 accepts there
/// too.
pub const LV_STATUS: &[&str] = &[
    "READ",
    "WRITE",
    "FIXED_MINOR",
    "VISIBLE",
    "PVMOVE",
    "LOCKED",
    "NOTSYNCED",
    "REBUILD",
    "WRITEMOSTLY",
    "CACHE_VOL",
];
/// Segment-type flags that may follow a segment type as `+FLAG`.
pub const SEGTYPE_FLAGS: &[&str] = &[
    "RESHAPE",
    "RESHAPE_DATA_OFFSET",
    "RESHAPE_DELTA_DISKS_PLUS",
    "RESHAPE_DELTA_DISKS_MINUS",
    "REMOVE_AFTER_RESHAPE",
    "METADATA_FORMAT",
    "CROP_METADATA",
    "CACHE_USES_CACHEVOL",
];

/// The compatible flag that stands for `WRITE` in VGs with a system id or a lock type.
pub const WRITE_LOCKED: &str = "WRITE_LOCKED";

/// Compatible flags lvm2 2.03 writes.
const COMPAT_FLAGS: &[&str] = &[
    "WRITE_LOCKED",
    "NOAUTOACTIVATE",
    "ACTIVATION_SKIP",
    "ERROR_WHEN_FULL",
    "CACHE_VOL",
    "MISSING",
];

/// A status or flag word: known words borrow a static string, unknown ones are kept owned.
pub type Word = std::borrow::Cow<'static, str>;

/// The [`Word`] for `s`, without allocating when lvm2 knows it.
pub fn word(s: &str) -> Word {
    // LV words first: they are the most frequent by far (READ, WRITE, VISIBLE lead the list).
    for list in [LV_STATUS, VG_STATUS, PV_STATUS, SEGTYPE_FLAGS, COMPAT_FLAGS] {
        for w in list {
            if *w == s {
                return Word::Borrowed(w);
            }
        }
    }
    Word::Owned(s.to_owned())
}

/// The first word of `status` that is in none of the `known` lists.
pub fn unknown_status<'a>(status: &'a [Word], known: &[&[&str]]) -> Option<&'a str> {
    status
        .iter()
        .map(|w| &**w)
        .find(|s| !known.iter().any(|l| l.contains(s)))
}

/// On read: turns a `WRITE_LOCKED` flag back into `WRITE` in `status` (after `READ`).
pub fn unlock_write(status: &mut Vec<Word>, flags: &mut Vec<Word>) {
    if let Some(i) = flags.iter().position(|f| f == WRITE_LOCKED) {
        flags.remove(i);
        if !status.iter().any(|s| s == "WRITE") {
            let at = status
                .iter()
                .position(|s| s == "READ")
                .map_or(status.len(), |i| i + 1);
            status.insert(at, Word::Borrowed("WRITE"));
        }
    }
}

/// On write: the `status` and `flags` lists as they go into the text, with `WRITE` moved to
/// `WRITE_LOCKED` when `locked`.
pub fn lock_write(status: &[Word], flags: &[Word], locked: bool) -> (Vec<Word>, Vec<Word>) {
    let writable = status.iter().any(|s| s == "WRITE");
    if !(locked && writable) {
        return (status.to_vec(), flags.to_vec());
    }
    let st = status.iter().filter(|s| *s != "WRITE").cloned().collect();
    let mut fl = Vec::with_capacity(flags.len() + 1);
    fl.push(Word::Borrowed(WRITE_LOCKED));
    fl.extend(flags.iter().cloned());
    (st, fl)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &[&str]) -> Vec<Word> {
        s.iter().map(|x| word(x)).collect()
    }

    #[test]
    fn segtype_flags_are_valid_lv_status() {
        let st = v(&["READ", "CROP_METADATA"]);
        assert_eq!(unknown_status(&st, &[LV_STATUS, SEGTYPE_FLAGS]), None);
        assert_eq!(unknown_status(&st, &[LV_STATUS]), Some("CROP_METADATA"));
        assert!(matches!(word("CROP_METADATA"), Word::Borrowed(_)));
        assert!(matches!(word("FUTURE"), Word::Owned(_)));
    }

    #[test]
    fn write_locked_round_trip() {
        let (mut st, mut fl) = (
            v(&["RESIZEABLE", "READ"]),
            v(&["WRITE_LOCKED", "NOAUTOACTIVATE"]),
        );
        unlock_write(&mut st, &mut fl);
        assert_eq!(st, v(&["RESIZEABLE", "READ", "WRITE"]));
        assert_eq!(fl, v(&["NOAUTOACTIVATE"]));
        let (st2, fl2) = lock_write(&st, &fl, true);
        assert_eq!(st2, v(&["RESIZEABLE", "READ"]));
        assert_eq!(fl2, v(&["WRITE_LOCKED", "NOAUTOACTIVATE"]));
        assert_eq!(lock_write(&st, &fl, false), (st.clone(), fl.clone()));
    }
}
