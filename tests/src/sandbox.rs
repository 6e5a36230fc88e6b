//! A private stock-lvm2 sandbox over loop devices: its own `LVM_SYSTEM_DIR` (activation off,
//! backups off, a filter that accepts only its loop devices), its own lock directory shared
//! with lvmeta, and the loop devices detached on drop, also when a test fails.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::{
    lvmeta_bin, rows, LVS_FIELDS, MDA_FIELDS, POOL_FIELDS, PVS_FIELDS, SEG_FIELDS, VGS_FIELDS,
};

/// Loop devices over image files, with an lvm2 configuration that sees only them.
pub struct Sandbox {
    dir: tempfile::TempDir,
    /// The loop devices, in order.
    pub loops: Vec<String>,
    /// More loop devices over the same images ([`Sandbox::another_path`]).
    more: Vec<String>,
}

/// lvm2 with activation on and no udev (lvmeta makes its device nodes itself, and lvm2
/// then does too): `--config` for lvm2 commands that activate or report active LVs.
pub const LVM2_ACTIVE: &str = "global/activation=1 activation/udev_sync=0 activation/udev_rules=0";

fn check(what: &str, out: &Output) {
    assert!(
        out.status.success(),
        "{what}: exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Sandbox {
    /// Sparse images of `sizes` bytes on loop devices with `sector`-byte logical sectors.
    pub fn new(sizes: &[u64], sector: u32) -> Self {
        Self::build(sizes.len(), sector, |i, f| f.set_len(sizes[i]))
    }

    /// Loop devices over copies of `images`.
    pub fn with_images(images: &[Vec<u8>], sector: u32) -> Self {
        Self::build(images.len(), sector, |i, f| {
            std::io::Write::write_all(&mut &*f, &images[i])
        })
    }

    fn build(
        n: usize,
        sector: u32,
        fill: impl Fn(usize, &std::fs::File) -> std::io::Result<()>,
    ) -> Self {
        let dir = tempfile::tempdir_in("/var/tmp").expect("temp dir");
        let mut sb = Self {
            dir,
            loops: Vec::new(),
            more: Vec::new(),
        };
        for i in 0..n {
            let img = sb.dir.path().join(format!("pv{i}.img"));
            let f = std::fs::File::create(&img).expect("image");
            fill(i, &f).expect("fill image");
            let out = Command::new("losetup")
                .args(["-f", "--show", "--sector-size", &sector.to_string()])
                .arg(&img)
                .output()
                .expect("losetup");
            check("losetup", &out);
            sb.loops
                .push(String::from_utf8_lossy(&out.stdout).trim().to_owned());
        }
        sb.write_config();
        sb
    }

    fn write_config(&self) {
        let sys = self.dir.path().join("sys");
        std::fs::create_dir_all(&sys).expect("sys dir");
        let devices: Vec<&std::path::Path> = self.loops.iter().map(std::path::Path::new).collect();
        let conf = crate::lab::private_lvm_conf(&self.lock_dir(), &devices);
        std::fs::write(sys.join("lvm.conf"), conf).expect("lvm.conf");
    }

    /// The lock directory lvm2 and lvmeta share.
    pub fn lock_dir(&self) -> PathBuf {
        self.dir.path().join("lock")
    }

    /// Another loop device over image `i`: a second host's own path to the same LUN (hosts
    /// simulated on one kernel must not share device paths, or each would find the other's
    /// devices over them as its own). lvm2 in the sandbox does not see it.
    pub fn another_path(&mut self, i: usize) -> String {
        let img = self.dir.path().join(format!("pv{i}.img"));
        let sector = std::fs::read_to_string(format!(
            "/sys/block/{}/queue/logical_block_size",
            self.loops[i].trim_start_matches("/dev/")
        ))
        .expect("sector size");
        let out = Command::new("losetup")
            .args(["-f", "--show", "--sector-size", sector.trim()])
            .arg(&img)
            .output()
            .expect("losetup");
        check("losetup", &out);
        let dev = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        self.more.push(dev.clone());
        dev
    }

    /// A scratch path inside the sandbox.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Runs an lvm2 command (with `extra` config, e.g. `global/use_lvmlockd=1`).
    pub fn lvm(&self, args: &[&str], extra: Option<&str>) -> Output {
        let mut c = Command::new(args[0]);
        if let Some(cfg) = extra {
            c.args(["--config", cfg]);
        }
        c.args(&args[1..])
            .env("LVM_SYSTEM_DIR", self.dir.path().join("sys"))
            .env("LVM_SUPPRESS_FD_WARNINGS", "1")
            .output()
            .expect("run lvm2")
    }

    /// Runs an lvm2 command that must succeed.
    pub fn lvm_ok(&self, args: &[&str], extra: Option<&str>) -> Output {
        let out = self.lvm(args, extra);
        check(&format!("lvm2 {args:?}"), &out);
        out
    }

    /// The words of a stock lvm2 report (`cmd`: `lvs`, `pvs`, `vgs`) of `fields` for `names`,
    /// sizes in bytes without a suffix, no heading.
    pub fn report_words(&self, cmd: &str, fields: &str, names: &[&str]) -> Vec<String> {
        let mut args = vec![
            cmd,
            "--noheadings",
            "--units",
            "b",
            "--nosuffix",
            "-o",
            fields,
        ];
        args.extend_from_slice(names);
        let out = self.lvm_ok(&args, None);
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    }

    /// Runs `lvmeta VERB --devices <loops> ARGS...`.
    pub fn lvmeta(&self, verb: &str, args: &[&str]) -> Output {
        Command::new(lvmeta_bin())
            .arg(verb)
            .args(["--devices", &self.loops.join(",")])
            .args(args)
            .env("LVMETA_LOCKING_DIR", self.lock_dir())
            .env("LVMETA_RUN_DIR", self.path("run"))
            .output()
            .expect("run lvmeta")
    }

    /// Runs an lvmeta verb that must succeed.
    pub fn lvmeta_ok(&self, verb: &str, args: &[&str]) -> Output {
        let out = self.lvmeta(verb, args);
        check(&format!("lvmeta {verb} {args:?}"), &out);
        out
    }

    /// `lvcreate -an -L 8m -n bench vg` + `lvremove -f vg/bench` as two `lvmeta` processes
    /// over the first loop device (`bin`: the binary, found once by the caller): the pair
    /// the benchmarks time against [`Sandbox::lvm2_pair`].
    pub fn lvmeta_pair(&self, bin: &Path) {
        for args in [
            &["lvcreate", "-an", "-L", "8m", "-n", "bench", "vg"][..],
            &["lvremove", "-f", "vg/bench"],
        ] {
            let out = Command::new(bin)
                .args(&args[..1])
                .args(["--devices", &self.loops[0]])
                .args(&args[1..])
                .env("LVMETA_LOCKING_DIR", self.lock_dir())
                .output()
                .expect("run lvmeta");
            assert!(out.status.success(), "lvmeta {args:?}");
        }
    }

    /// Stock lvm2's `lvcreate -an -Zn` + `lvremove -f` of the same LV ([`Sandbox::lvmeta_pair`]).
    pub fn lvm2_pair(&self) {
        let create = [
            "lvcreate", "-q", "-an", "-Zn", "-L", "8m", "-n", "bench", "vg",
        ];
        self.lvm_ok(&create, None);
        self.lvm_ok(&["lvremove", "-q", "-f", "vg/bench"], None);
    }

    /// Stock `vgck VG` must pass without a warning about the metadata.
    pub fn vgck_clean(&self, vg: &str, extra: Option<&str>) {
        let out = self.lvm_ok(&["vgck", vg], extra);
        let err = String::from_utf8_lossy(&out.stderr);
        let bad: Vec<&str> = err
            .lines()
            .filter(|l| {
                !l.contains("Activation disabled")
                    && !l.contains("lvmlockd")
                    && !l.contains("without a lock")
            })
            .collect();
        assert!(bad.is_empty(), "vgck {vg} complained: {bad:?}");
    }

    /// lvm2's and lvmeta's `pvs`, `vgs`, `lvs -a` and `lvs -a --segments` JSON for the
    /// standard field lists (and `lvs -a` for the thin pool settings, `pvs` for the metadata
    /// areas' space) must hold the same rows.
    /// - where the kernel has device-mapper, lvm2 runs with activation on (udev off): with
    ///   it off, lvm2 prints `XX` for every LV's state and open columns even there, and
    ///   lvmeta shows what the kernel has. Without device-mapper both print `XX` with the
    ///   sandbox's activation off (with it on, lvm2 prints `--` for a thin pool only).
    pub fn reports_match(&self, what: &str, extra: Option<&str>) {
        let config = match crate::has_device_mapper() {
            true => format!("{} {LVM2_ACTIVE}", extra.unwrap_or("")),
            false => extra.unwrap_or("").to_owned(),
        };
        let extra = (!config.is_empty()).then_some(config.as_str());
        for (verb, fields, seg) in [
            ("pvs", PVS_FIELDS, false),
            ("vgs", VGS_FIELDS, false),
            ("lvs", LVS_FIELDS, false),
            ("lvs", SEG_FIELDS, true),
            ("lvs", POOL_FIELDS, false),
            ("pvs", MDA_FIELDS, false),
        ] {
            let mut args = vec![
                verb,
                "--reportformat",
                "json",
                "--units",
                "b",
                "--nosuffix",
                "-o",
                fields,
            ];
            if seg {
                args.push("--segments");
            }
            // `pvs -a` would add devices that are not PVs; lvmeta lists PVs only.
            if verb != "pvs" {
                args.push("-a");
            }
            let lvm = self.lvm_ok(&args, extra);
            let ours = self.lvmeta_ok(args[0], &args[1..]);
            let want: Value = serde_json::from_slice(&lvm.stdout).expect("lvm2 JSON");
            let got: Value = serde_json::from_slice(&ours.stdout).expect("lvmeta JSON");
            assert_eq!(rows(&got), rows(&want), "{what}: {verb} {fields}");
        }
    }
}

/// The device-mapper devices stacked on any of `loops` (directly or through each other):
/// what a test that failed midway left of its LVs.
fn dm_devices_over(loops: &[String]) -> Vec<String> {
    let Ok(out) = Command::new("dmsetup")
        .args(["deps", "-o", "blkdevname"])
        .output()
    else {
        return Vec::new();
    };
    // Lines: `<name>: 2 dependencies  : (loop0) (dm-3)`.
    let text = String::from_utf8_lossy(&out.stdout);
    let deps: Vec<(String, Vec<String>)> = text
        .lines()
        .filter_map(|l| {
            let (name, rest) = l.split_once(':')?;
            let d = rest
                .split(['(', ')'])
                .skip(1)
                .step_by(2)
                .map(str::to_owned)
                .collect();
            Some((name.trim().to_owned(), d))
        })
        .collect();
    // dm name -> kernel name (`dm-3`), from sysfs.
    let kernel_name = |name: &str| {
        std::fs::read_dir("/sys/block")
            .ok()?
            .flatten()
            .find_map(|e| {
                let n = std::fs::read_to_string(e.path().join("dm/name")).ok()?;
                (n.trim() == name).then(|| e.file_name().to_string_lossy().into_owned())
            })
    };
    let mut under: Vec<String> = loops
        .iter()
        .filter_map(|l| l.rsplit('/').next().map(str::to_owned))
        .collect();
    let mut found: Vec<String> = Vec::new();
    loop {
        let more: Vec<String> = deps
            .iter()
            .filter(|(n, d)| !found.contains(n) && d.iter().any(|x| under.contains(x)))
            .map(|(n, _)| n.clone())
            .collect();
        if more.is_empty() {
            return found;
        }
        for n in more {
            under.extend(kernel_name(&n));
            found.push(n);
        }
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        // Top first: a device is removed after the ones stacked on it.
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        for name in dm_devices_over(&self.loops).iter().rev() {
            // Its mounts (mountinfo: id, parent, major:minor, root, mount point, ...).
            let devnum = std::fs::read_dir("/sys/block")
                .into_iter()
                .flatten()
                .flatten()
                .find(|e| {
                    std::fs::read_to_string(e.path().join("dm/name"))
                        .is_ok_and(|n| n.trim() == name)
                })
                .and_then(|e| std::fs::read_to_string(e.path().join("dev")).ok());
            if let Some(devnum) = devnum {
                for l in mounts.lines() {
                    let f: Vec<&str> = l.split(' ').collect();
                    if f.get(2) == Some(&devnum.trim()) {
                        let _ = Command::new("umount").args(["-l", f[4]]).output();
                    }
                }
            }
            let _ = Command::new("dmsetup").args(["remove", name]).output();
            let _ = std::fs::remove_file(format!("/dev/mapper/{name}"));
        }
        for l in self.more.iter().chain(&self.loops) {
            let _ = Command::new("losetup").args(["-d", l]).status();
        }
    }
}
