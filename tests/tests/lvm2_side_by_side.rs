//! Privileged, on a kernel with device-mapper (the VM stage): stock lvm2 and the `lvmeta`
//! command side by side on two copies of one image. Each case runs the same command line
//! as `VERB --devices A ...` (stock lvm2) and `lvmeta VERB --devices B ...` and compares:
//! - the exit code;
//! - stdout, device paths replaced and `WARNING:` lines dropped (those follow the host's
//!   lvm.conf: thin pool autoextend, zeroing);
//! - the VG afterwards, as stock lvm2 reads each copy (`lvs -a` JSON).
//!
//! LVs are made inactive (`-an`): lvmeta's lvcreate does not activate.
//!
//! The command lines cover what issue #32 found different; what lvmeta does not do yet
//! (`--select`, the display verbs, ...) is not here.

use std::process::{Command, Output};

use lvmeta_tests::sandbox::{Sandbox, LVM2_ACTIVE};
use lvmeta_tests::{device_mapper, lvmeta_bin, privileged};

const MIB: u64 = 1 << 20;

/// The VG as stock lvm2 reads the copy on `dev`: every LV's shape, no ids or times.
const STATE: &str = "lv_name,lv_attr,lv_size,segtype,pool_lv,origin,seg_count,data_lv,metadata_lv";

/// One side's run: exit code and normalised stdout.
fn outcome(out: &Output, dev: &str) -> (Option<i32>, Vec<String>) {
    let text = String::from_utf8_lossy(&out.stdout).replace(dev, "DEV");
    let lines = text
        .lines()
        .filter(|l| !l.contains("WARNING:"))
        .map(str::to_owned)
        .collect();
    (out.status.code(), lines)
}

struct Sides {
    sb: Sandbox,
    lvm2: String,
    lvmeta: String,
}

impl Sides {
    /// Stock `VERB` on lvm2's copy.
    fn lvm2(&self, args: &[&str]) -> Output {
        let mut all = vec![args[0], "--devices", &self.lvm2];
        all.extend(&args[1..]);
        self.sb.lvm(&all, Some(LVM2_ACTIVE))
    }

    /// `lvmeta VERB` on lvmeta's copy.
    fn lvmeta(&self, args: &[&str]) -> Output {
        Command::new(lvmeta_bin())
            .arg(args[0])
            .args(["--devices", &self.lvmeta])
            .args(&args[1..])
            .env("LVMETA_LOCKING_DIR", self.sb.lock_dir())
            .env("LVMETA_RUN_DIR", self.sb.path("run"))
            .output()
            .expect("run lvmeta")
    }

    fn state(&self, dev: &str) -> String {
        let out = self.sb.lvm_ok(
            &[
                "lvs",
                "--devices",
                dev,
                "-a",
                "--reportformat",
                "json",
                "--units",
                "b",
                "-o",
                STATE,
                "vg0",
            ],
            Some(LVM2_ACTIVE),
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs one case on both sides and compares them.
    fn case(&self, args: &[&str]) {
        let (l, m) = (self.lvm2(args), self.lvmeta(args));
        let (lo, mo) = (outcome(&l, &self.lvm2), outcome(&m, &self.lvmeta));
        let story = || {
            format!(
                "{args:?}\nlvm2 stderr: {}\nlvmeta stderr: {}",
                String::from_utf8_lossy(&l.stderr),
                String::from_utf8_lossy(&m.stderr)
            )
        };
        assert_eq!(lo.0, mo.0, "exit codes differ: {}", story());
        assert_eq!(lo.1, mo.1, "stdout differs: {}", story());
        assert_eq!(
            self.state(&self.lvm2),
            self.state(&self.lvmeta),
            "the VGs differ after {args:?}"
        );
    }
}

#[test]
fn lvm2_and_lvmeta_side_by_side() {
    let test = "lvm2_and_lvmeta_side_by_side";
    if !privileged(test, &["losetup", "lvcreate"]) || !device_mapper(test) {
        return;
    }
    // The starting image: a VG made by stock lvm2, then copied.
    let first = Sandbox::new(&[128 * MIB], 512);
    first.lvm_ok(&["vgcreate", "-s", "4m", "vg0", &first.loops[0]], None);
    let image = std::fs::read(first.path("pv0.img")).expect("image");
    drop(first);
    let sb = Sandbox::with_images(&[image.clone(), image], 512);
    let sides = Sides {
        lvm2: sb.loops[0].clone(),
        lvmeta: sb.loops[1].clone(),
        sb,
    };
    for args in [
        // Thin pool with -T and a size; a thin LV in it; rounding to extents said on stdout.
        &["lvcreate", "-an", "-T", "-L", "40M", "vg0/pool"][..],
        &[
            "lvcreate", "-an", "-T", "vg0/pool", "-V", "100M", "-n", "t1",
        ],
        &["lvcreate", "-an", "-n", "lin", "-L", "12m", "vg0"],
        &["lvcreate", "-an", "-n", "lin2", "-L", "13m", "vg0"],
        &["lvextend", "-L", "30m", "vg0/lin"],
        // Reports: defaults, all LVs, segments, asked-for units, lvm2's field names.
        &["lvs"],
        &["lvs", "-a"],
        &["vgs"],
        &["pvs"],
        &["lvs", "--segments"],
        &["lvs", "--units", "g", "--nosuffix", "-o", "lv_name,lv_size"],
        &["vgs", "--units", "g", "--nosuffix"],
        &["lvs", "-o", "lv_name,lvlockargs,LVNAME,size"],
        &[
            "lvs",
            "-a",
            "-o",
            "lv_name,lv_path,lv_full_name,lv_dm_path,chunk_size,lv_active",
        ],
        &["lvs", "--reportformat", "json"],
        // Layouts scripts parse, and sorting by fields shown or not.
        &["lvs", "--separator", ",", "-o", "lv_name,lv_size,lv_attr"],
        &[
            "lvs",
            "--separator",
            ",",
            "--aligned",
            "-o",
            "lv_name,lv_size",
        ],
        &[
            "lvs",
            "--noheadings",
            "--nameprefixes",
            "--unquoted",
            "-o",
            "lv_name,lv_size",
        ],
        &["lvs", "--nameprefixes", "-o", "lv_name,segtype"],
        &["lvs", "--rows", "-o", "lv_name,lv_size"],
        &["lvs", "-O", "-lv_size", "-o", "lv_name,lv_size"],
        &["lvs", "-O", "seg_count,-lv_name", "-o", "lv_name"],
        &[
            "vgs",
            "--noheadings",
            "--separator",
            ":",
            "--units",
            "b",
            "--nosuffix",
        ],
        // A pool and a thin LV in one command; pools named by --thinpool.
        &[
            "lvcreate",
            "-an",
            "-T",
            "-L",
            "8M",
            "-V",
            "20M",
            "-n",
            "t2",
            "vg0/pool2",
        ],
        &[
            "lvcreate",
            "-an",
            "--type",
            "thin-pool",
            "-L",
            "8M",
            "--thinpool",
            "pool3",
            "vg0",
        ],
        &[
            "lvcreate",
            "-an",
            "-V",
            "20M",
            "--thinpool",
            "vg0/pool3",
            "-n",
            "t3",
        ],
        &["lvremove", "-f", "vg0/lin2"],
        &["lvcreate", "-an", "-L", "4M", "--thinpool", "pool4", "vg0"],
        &["lvs", "-a"],
        // Exit codes: bad command line 3, failed command 5.
        &["lvs", "-o", "bogus_field"],
        &["lvs", "--bogus"],
        &["lvremove", "-f", "nosuchvg"],
        &["lvextend", "-L", "1m", "vg0/lin"],
        &["lvcreate", "-an", "-n", "bad/name", "-L", "4m", "vg0"],
        // Removal: one LV, then a whole VG's.
        &["lvremove", "-f", "vg0/t1"],
        &["lvremove", "-f", "vg0"],
        &["lvs", "-a"],
    ] {
        sides.case(args);
    }
}
