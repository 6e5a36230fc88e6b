//! Name rules for VGs, LVs, tags and system ids (lvm2's `lvm-string.c`).

/// Longest VG or LV name (`NAME_LEN` 128 including the NUL).
pub const NAME_MAX: usize = 127;

/// Why a name is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// Empty, too long, `.`/`..`, starting with `-`, or a character outside the allowed set.
    #[error("{kind} name {name:?} is invalid: {why}")]
    Invalid {
        /// "VG", "LV", "tag", ...
        kind: &'static str,
        /// The name.
        name: String,
        /// What is wrong.
        why: &'static str,
    },
}

/// Byte classes of names: [`NAME`] for VG and LV names, [`TAG`] adds tags' extra characters.
const NAME: u8 = 1;
const TAG: u8 = 2;

static CHARSET: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        if c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-' | b'+') {
            t[b] = NAME | TAG;
        } else if matches!(c, b'/' | b'=' | b'!' | b':' | b'&' | b'#') {
            t[b] = TAG;
        }
        b += 1;
    }
    t
};

fn check(kind: &'static str, name: &str, class: u8, max: usize) -> Result<(), NameError> {
    let bad = |why| {
        Err(NameError::Invalid {
            kind,
            name: name.to_owned(),
            why,
        })
    };
    if name.is_empty() {
        return bad("empty");
    }
    if name.len() > max {
        return bad("too long");
    }
    // A fold without early exit: names are short and the loop stays branch-free.
    if name.bytes().fold(class, |c, b| c & CHARSET[usize::from(b)]) == 0 {
        return bad("characters other than A-Z a-z 0-9 . _ - + are not allowed");
    }
    Ok(())
}

fn check_object(kind: &'static str, name: &str) -> Result<(), NameError> {
    check(kind, name, NAME, NAME_MAX)?;
    let bad = |why| {
        Err(NameError::Invalid {
            kind,
            name: name.to_owned(),
            why,
        })
    };
    if name.starts_with('-') {
        return bad("must not start with '-'");
    }
    if name == "." || name == ".." {
        return bad("'.' and '..' are reserved");
    }
    Ok(())
}

/// Checks a VG name.
pub fn check_vg_name(name: &str) -> Result<(), NameError> {
    check_object("VG", name)
}

/// Checks an LV name (the charset rule; the length rule with the VG name is
/// [`check_lv_name_in_vg`]).
pub fn check_lv_name(name: &str) -> Result<(), NameError> {
    check_object("LV", name)
}

/// Checks `len(vg) + len(lv) + 3 < 128`, lvm2's rule for the dm name `vg-lv`.
pub fn check_lv_name_in_vg(vg: &str, lv: &str) -> Result<(), NameError> {
    check_lv_name(lv)?;
    if vg.len() + lv.len() + 3 > NAME_MAX {
        return Err(NameError::Invalid {
            kind: "LV",
            name: lv.to_owned(),
            why: "too long together with the VG name",
        });
    }
    Ok(())
}

/// Name prefixes lvm2 reserves for LVs it makes itself.
const RESERVED_PREFIXES: &[&str] = &["pvmove", "snapshot"];
/// Name parts lvm2 reserves for sub-LVs (`apply_lvname_restrictions`).
const RESERVED_PARTS: &[&str] = &[
    "_cdata", "_cmeta", "_corig", "_cpool", "_cvol", "_wcorig", "_mimage", "_mlog", "_rimage",
    "_rmeta", "_tdata", "_tmeta", "_vdata", "_imeta", "_iorig", "_pmspare", "_vorigin",
];

/// Checks the name of an LV a user creates or renames: [`check_lv_name_in_vg`] plus lvm2's
/// reserved prefixes and sub-LV suffixes (only enforced by lvcreate and lvrename, not on read).
pub fn check_new_lv_name(vg: &str, lv: &str) -> Result<(), NameError> {
    check_lv_name_in_vg(vg, lv)?;
    let bad = |why| {
        Err(NameError::Invalid {
            kind: "LV",
            name: lv.to_owned(),
            why,
        })
    };
    if RESERVED_PREFIXES.iter().any(|p| lv.starts_with(p)) {
        return bad("names starting with \"pvmove\" or \"snapshot\" are reserved");
    }
    if RESERVED_PARTS.iter().any(|p| lv.contains(p)) || lv == "lvmlock" {
        return bad("the name of an lvm2 sub-LV or internal LV is reserved");
    }
    Ok(())
}

/// Checks a tag (also `/ = ! : & #`; no length limit).
pub fn check_tag(tag: &str) -> Result<(), NameError> {
    check("tag", tag, TAG, usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules() {
        assert!(check_vg_name("vg0").is_ok());
        assert!(check_vg_name("-vg").is_err());
        assert!(check_vg_name("..").is_err());
        assert!(check_vg_name("a b").is_err());
        assert!(check_vg_name(&"a".repeat(128)).is_err());
        assert!(check_lv_name("odd.name+-_").is_ok());
        assert!(check_lv_name("lvol$2").is_err());
        assert!(check_lv_name_in_vg("abc", &"l".repeat(121)).is_ok());
        assert!(check_lv_name_in_vg("abc", &"l".repeat(122)).is_err());
        assert!(check_tag("owner=team/a").is_ok());
        assert!(check_tag("a:b&c#d").is_ok());
        assert!(check_tag("a b").is_err());
        assert!(check_new_lv_name("vg", "data").is_ok());
        assert!(check_new_lv_name("vg", "snapshot1").is_err());
        assert!(check_new_lv_name("vg", "x_tmeta").is_err());
        assert!(check_new_lv_name("vg", "lvmlock").is_err());
    }
}
