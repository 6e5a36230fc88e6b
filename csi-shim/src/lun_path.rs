//! The LUN named by a path that stays the same across boots and on every node.
//!
//! - Kernel names (`/dev/sdX`, `/dev/vdX`, `/dev/xvdX`, `/dev/hdX`, `/dev/dasdX`,
//!   `/dev/nvmeXnY`, `/dev/nvmeXcYnZ`, `/dev/mmcblkN`, `/dev/dm-N`, `/dev/nbdN`,
//!   `/dev/rbdN`, with or without a partition number) are handed out in probe order: one
//!   LUN may be `/dev/sdb` on one node and `/dev/sdc` on another, or after a reboot. Such a
//!   path is refused, naming the stable paths of the same device found here.
//! - Anything else (`/dev/disk/by-id/...`, `/dev/mapper/...`, loop devices and files in
//!   tests) is taken as given.

use std::path::{Path, PathBuf};

/// Where names of block devices that are the same on every node live (not
/// `/dev/disk/by-path`: a path through one node's HBA is not another's).
pub const STABLE_DIRS: [&str; 2] = ["/dev/disk/by-id", "/dev/mapper"];

/// Is `path` a kernel name of a disk (or a partition of one) directly under `/dev`?
pub fn is_kernel_name(path: &Path) -> bool {
    if path.parent() != Some(Path::new("/dev")) {
        return false;
    }
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    let letters_then_digits = |rest: &str| {
        let disk = rest.trim_end_matches(|c: char| c.is_ascii_digit());
        !disk.is_empty() && disk.bytes().all(|b| b.is_ascii_lowercase())
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    // A number with an optional `p<number>` partition.
    let numbered = |s: &str| match s.split_once('p') {
        Some((n, p)) => digits(n) && digits(p),
        None => digits(s),
    };
    if let Some(rest) = name.strip_prefix("nvme") {
        // nvme<ctrl>n<ns>[p<part>], or a path of a multipath one: nvme<sub>c<ctrl>n<ns>
        let (ctrl, ns) = rest.split_once('n').unwrap_or(("", ""));
        let ctrl = match ctrl.split_once('c') {
            Some((sub, c)) if digits(sub) => c,
            Some(_) => "",
            None => ctrl,
        };
        return digits(ctrl) && numbered(ns);
    }
    if let Some(rest) = ["dm-", "nbd", "rbd", "mmcblk"]
        .iter()
        .find_map(|p| name.strip_prefix(p))
    {
        return numbered(rest);
    }
    ["xvd", "dasd", "sd", "vd", "hd"]
        .iter()
        .find_map(|p| name.strip_prefix(p))
        .is_some_and(letters_then_digits)
}

/// Entries of `dirs` that resolve to the same file as `path`, sorted.
pub fn stable_aliases(path: &Path, dirs: &[&Path]) -> Vec<PathBuf> {
    let Ok(target) = std::fs::canonicalize(path) else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = dirs
        .iter()
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| std::fs::canonicalize(p).is_ok_and(|t| t == target))
        .collect();
    found.sort();
    found
}

/// Refuses a kernel name, naming the stable paths of its device in `dirs`.
pub fn check(path: &Path, dirs: &[&Path]) -> Result<(), String> {
    if !is_kernel_name(path) {
        return Ok(());
    }
    let aliases = stable_aliases(path, dirs);
    let instead = match aliases.is_empty() {
        true => "a path under /dev/disk/by-id or a multipath alias under /dev/mapper (none \
                 names this device here)"
            .to_owned(),
        false => aliases
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(" or "),
    };
    Err(format!(
        "{}: a kernel name, handed out in probe order (another node, or this one after a \
         reboot, may give the LUN another one); name it by a stable path: {instead}",
        path.display()
    ))
}

/// The devices stacked on the block device `path` names (its `holders` in `sys_block`,
/// normally `/sys/class/block`): a multipath map, an md array, a device-mapper device. Named
/// `dm-N (name)` where device-mapper names them. Empty for a file or a device without any.
pub fn holders(path: &Path, sys_block: &Path) -> Vec<String> {
    let Some(name) = std::fs::canonicalize(path)
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
    else {
        return Vec::new();
    };
    let Ok(dir) = std::fs::read_dir(sys_block.join(&name).join("holders")) else {
        return Vec::new();
    };
    let mut out: Vec<String> = dir
        .flatten()
        .map(|e| {
            let h = e.file_name().to_string_lossy().into_owned();
            match std::fs::read_to_string(sys_block.join(&h).join("dm/name")) {
                Ok(dm) => format!("{h} ({})", dm.trim()),
                Err(_) => h,
            }
        })
        .collect();
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holders_are_named_with_their_dm_names() {
        let tmp = std::env::temp_dir().join(format!("holders-{}", std::process::id()));
        let lun = tmp.join("lun0");
        std::fs::create_dir_all(tmp.join("sys/lun0/holders/dm-3")).expect("mkdir");
        std::fs::create_dir_all(tmp.join("sys/lun0/holders/md1")).expect("mkdir");
        std::fs::create_dir_all(tmp.join("sys/dm-3/dm")).expect("mkdir");
        std::fs::write(tmp.join("sys/dm-3/dm/name"), "mpatha\n").expect("dm name");
        std::fs::write(&lun, b"").expect("the device");
        assert_eq!(
            holders(&lun, &tmp.join("sys")),
            ["dm-3 (mpatha)".to_owned(), "md1".to_owned()]
        );
        assert!(holders(&tmp.join("missing"), &tmp.join("sys")).is_empty());
        std::fs::remove_dir_all(&tmp).expect("cleanup");
    }

    #[test]
    fn kernel_names_are_told_from_stable_ones() {
        for unstable in [
            "/dev/sda",
            "/dev/sdab",
            "/dev/sdb1",
            "/dev/vdc",
            "/dev/xvdf2",
            "/dev/hda",
            "/dev/nvme0n1",
            "/dev/nvme12n3p4",
            "/dev/nvme0c1n2",
            "/dev/dm-7",
            "/dev/nbd3",
            "/dev/rbd0p1",
            "/dev/mmcblk0p2",
            "/dev/dasda1",
        ] {
            assert!(is_kernel_name(Path::new(unstable)), "{unstable}");
        }
        for stable in [
            "/dev/disk/by-id/wwn-0x5000c500a1b2c3d4",
            "/dev/mapper/mpatha",
            "/dev/mapper/lun",
            "/dev/loop3",
            "/dev/sd",
            "/dev/sdA",
            "/dev/nvme0",
            "/dev/nvme0n1px",
            "/dev/dm-",
            "/tmp/sda",
            "lun.img",
        ] {
            assert!(!is_kernel_name(Path::new(stable)), "{stable}");
        }
    }

    #[test]
    fn a_kernel_name_is_refused_with_its_stable_names() {
        let dir = tempfile::tempdir().expect("dir");
        let disk = dir.path().join("disk");
        std::fs::write(&disk, b"").expect("disk");
        let by_id = dir.path().join("by-id");
        std::fs::create_dir(&by_id).expect("by-id");
        std::os::unix::fs::symlink(&disk, by_id.join("wwn-0x5000")).expect("link");
        std::os::unix::fs::symlink(dir.path().join("other"), by_id.join("wwn-other"))
            .expect("link");
        let found = stable_aliases(&disk, &[by_id.as_path()]);
        assert_eq!(found, vec![by_id.join("wwn-0x5000")]);
        // A kernel name that does not exist here: refused, pointing at by-id in general.
        let e = check(Path::new("/dev/sdzz"), &[by_id.as_path()]).expect_err("kernel name");
        assert!(
            e.contains("/dev/sdzz") && e.contains("/dev/disk/by-id"),
            "{e}"
        );
        assert!(check(&by_id.join("wwn-0x5000"), &[by_id.as_path()]).is_ok());
    }
}
