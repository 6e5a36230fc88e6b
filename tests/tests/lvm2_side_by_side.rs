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
//! The command lines cover what issue #32 found different.

use std::process::{Command, Output};

use lvmeta_tests::sandbox::{Sandbox, LVM2_ACTIVE};
use lvmeta_tests::{device_mapper, lvmeta_bin, privileged};

const MIB: u64 = 1 << 20;

/// The VG as stock lvm2 reads the copy on `dev`: every LV's shape, no ids or times.
const STATE: &str = "lv_name,lv_attr,lv_size,segtype,pool_lv,origin,seg_count,data_lv,metadata_lv";

/// One side's run: exit code and normalised stdout (the device's path; in display blocks,
/// the values that differ between LVs each side made: ids, creation times, seqnos).
fn outcome(out: &Output, dev: &str) -> (Option<i32>, Vec<String>) {
    let text = String::from_utf8_lossy(&out.stdout).replace(dev, "DEV");
    let own = [
        "  LV UUID ",
        "  LV Creation host, time ",
        "  Metadata Sequence No ",
    ];
    let lines = text
        .lines()
        .filter(|l| !l.contains("WARNING:"))
        .map(|l| match own.iter().find(|p| l.starts_with(*p)) {
            Some(p) => format!("{p}..."),
            None => l.to_owned(),
        })
        .collect();
    (out.status.code(), lines)
}

/// `arg`, or `dev` for the placeholder `DEV`.
fn on<'a>(arg: &'a str, dev: &'a str) -> &'a str {
    if arg == "DEV" {
        dev
    } else {
        arg
    }
}

struct Sides {
    sb: Sandbox,
    lvm2: String,
    lvmeta: String,
}

impl Sides {
    /// Stock `VERB` on lvm2's copy (`DEV` in `args`: its device).
    fn lvm2(&self, args: &[&str]) -> Output {
        let mut all = vec![args[0], "--devices", &self.lvm2];
        all.extend(args[1..].iter().map(|a| on(a, &self.lvm2)));
        self.sb.lvm(&all, Some(LVM2_ACTIVE))
    }

    /// `lvmeta VERB` on lvmeta's copy (`DEV` in `args`: its device).
    fn lvmeta(&self, args: &[&str]) -> Output {
        Command::new(lvmeta_bin())
            .arg(args[0])
            .args(["--devices", &self.lvmeta])
            .args(args[1..].iter().map(|a| on(a, &self.lvmeta)))
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

    /// Runs one case on both sides and compares them: what differs, if anything.
    fn case(&self, args: &[&str]) -> Option<String> {
        let (l, m) = (self.lvm2(args), self.lvmeta(args));
        let (lo, mo) = (outcome(&l, &self.lvm2), outcome(&m, &self.lvmeta));
        let story = |what: &str| {
            Some(format!(
                "{what} after {args:?}\nlvm2:   {:?} {:?}\nlvmeta: {:?} {:?}\nlvm2 stderr: {}\nlvmeta stderr: {}",
                lo.0,
                lo.1,
                mo.0,
                mo.1,
                String::from_utf8_lossy(&l.stderr),
                String::from_utf8_lossy(&m.stderr)
            ))
        };
        if lo.0 != mo.0 {
            return story("exit codes differ");
        }
        if lo.1 != mo.1 {
            return story("stdout differs");
        }
        let (a, b) = (self.state(&self.lvm2), self.state(&self.lvmeta));
        (a != b).then(|| format!("the VGs differ after {args:?}:\nlvm2:   {a}\nlvmeta: {b}"))
    }
}

#[test]
fn lvm2_and_lvmeta_side_by_side() {
    let test = "lvm2_and_lvmeta_side_by_side";
    if !privileged(test, &["losetup", "lvcreate"]) || !device_mapper(test) {
        return;
    }
    // The starting image: a VG made by stock lvm2, then copied.
    let first = Sandbox::new(&[256 * MIB], 512);
    first.lvm_ok(&["vgcreate", "-s", "4m", "vg0", &first.loops[0]], None);
    first.lvm_ok(
        &["lvcreate", "-an", "-Zn", "-n", "base", "-L", "8m", "vg0"],
        None,
    );
    let image = std::fs::read(first.path("pv0.img")).expect("image");
    drop(first);
    let sb = Sandbox::with_images(&[image.clone(), image], 512);
    let sides = Sides {
        lvm2: sb.loops[0].clone(),
        lvmeta: sb.loops[1].clone(),
        sb,
    };
    let differ = [
        // The display verbs, on what stock lvm2 made (the same ids and times on both).
        &["pvdisplay"][..],
        &["pvdisplay", "DEV"],
        &["vgdisplay"],
        &["vgdisplay", "vg0"],
        &["lvdisplay"],
        &["lvdisplay", "vg0/base"],
        &["lvdisplay", "/dev/vg0/base"],
        &["lvdisplay", "vg0/nosuch"],
        &["vgdisplay", "nosuchvg"],
        // Thin pool with -T and a size; a thin LV in it; rounding to extents said on stdout.
        &["lvcreate", "-an", "-T", "-L", "40M", "vg0/pool"][..],
        &[
            "lvcreate", "-an", "-T", "vg0/pool", "-V", "100M", "-n", "t1",
        ],
        &["lvcreate", "-an", "-n", "lin", "-L", "12m", "vg0"],
        &["lvcreate", "-an", "-n", "lin2", "-L", "13m", "vg0"],
        &["lvextend", "-L", "30m", "vg0/lin"],
        // Relative sizes round to whole extents: up when added, down when taken off.
        &["lvextend", "-L", "+6m", "vg0/lin"],
        &["lvreduce", "-f", "-L", "-6m", "vg0/lin"],
        &["lvresize", "-l", "+1", "vg0/lin"],
        &["lvextend", "-L", "+4m", "/dev/vg0/lin"],
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
        // What LVs are made of and for, and when they were made.
        &["lvs", "-a", "-o", "lv_name,lv_layout,lv_role"],
        &["lvs", "-o", "lv_name,lv_time,lv_host", "vg0/base"],
        &["pvs", "-o", "pv_name,pv_used"],
        &["lvs", "-a", "--binary", "-o", "lv_name,zero"],
        // Displays of LVs each side made (ids, times and seqnos normalised).
        &["lvdisplay", "vg0/pool", "vg0/t1"],
        &["lvdisplay", "-a", "vg0/pool_tdata"],
        &["vgdisplay"],
        &["pvdisplay"],
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
        // Units: --nosuffix keeps human units' letters; zero in a fixed unit.
        &["lvs", "--nosuffix", "-o", "lv_name,lv_size"],
        &["lvs", "--units", "k", "-o", "lv_name,chunk_size"],
        &[
            "lvs",
            "--units",
            "k",
            "--nosuffix",
            "-o",
            "lv_name,chunk_size",
        ],
        // Several -o and -O, fields taken out; lvm2's narrowest columns, headings or not.
        &["lvs", "-o", "lv_name", "-o", "lv_size"],
        &["lvs", "-o", "-vg_name,data_percent"],
        &["lvs", "-o", "+lv_uuid", "-o", "-lv_uuid,lv_attr"],
        &["lvs", "-o", "name,size", "-O", "-lv_size", "-O", "lv_name"],
        &["vgs", "--noheadings", "-o", "vg_name"],
        &["pvs", "-o", "pv_name,pe_start,pv_pe_count"],
        // Another object's fields: vgs lists PVs or LVs; lvs cannot show PV fields.
        &["vgs", "-o", "vg_name,pv_name"],
        &["vgs", "-o", "vg_name,lv_name,lv_size"],
        &["lvs", "-o", "lv_name,pv_name"],
        // Selection (-S): strings, regexes, sizes, numbers, lists, and/or/not, groups.
        &["lvs", "-a", "-S", "lv_size>8m", "-o", "lv_name,lv_size"],
        &["lvs", "-S", "name=~^pool || name=lin", "-o", "lv_name"],
        &["lvs", "-S", "!(segtype=thin) && size<=40", "-o", "lv_name"],
        &[
            "lvs",
            "-S",
            "pool_lv=pool2, lv_name!=\"x\"",
            "-o",
            "lv_name",
        ],
        &["lvs", "-S", "tags=[]", "-o", "lv_name"],
        &["vgs", "-S", "lv_count>=3", "-o", "vg_name"],
        &["pvs", "-S", "pv_pe_count>10", "-o", "pv_name"],
        &["lvs", "-S", "bogus=1"],
        &["lvs", "-S", "name=(", "-o", "lv_name"],
        // Tags name objects: an LV's, its VG's; nothing tagged prints nothing.
        &["lvchange", "--addtag", "web", "vg0/lin"],
        &["lvs", "@web", "-o", "lv_name,lv_tags"],
        &["lvs", "@nosuch"],
        &["vgchange", "--addtag", "site", "vg0"],
        &["vgs", "@site", "-o", "vg_name,vg_tags"],
        &["lvs", "@site", "vg0/lin", "-o", "lv_name"],
        &["pvs", "@nosuch"],
        // Objects named as lvm2 names them.
        &["pvs", "DEV"],
        &["lvs", "/dev/vg0/lin"],
        &["pvs", "/dev/nosuchdevice"],
        // Exit codes: bad command line 3, failed command 5.
        &["lvs", "-o", "bogus_field"],
        &["lvs", "--bogus"],
        &["lvremove", "-f", "nosuchvg"],
        &["lvextend", "-L", "1m", "vg0/lin"],
        &["lvcreate", "-an", "-n", "bad/name", "-L", "4m", "vg0"],
        // Removal: one LV, then a whole VG's.
        &["lvremove", "-f", "vg0/t1"],
        // Removal in lvm2's order: metadata order (new thin pools first), a pool's thin LVs
        // right before it, whatever the order on the command line.
        &["lvdisplay"],
        &["lvremove", "-f", "vg0/t2", "vg0/t3", "vg0/pool2"],
        &["lvremove", "-f", "vg0/pool3", "vg0/pool4"],
        &["lvremove", "-f", "vg0"],
        &["lvs", "-a"],
    ]
    .iter()
    .filter_map(|args| sides.case(args))
    .collect::<Vec<_>>();
    assert!(
        differ.is_empty(),
        "{} of the cases differ:\n\n{}",
        differ.len(),
        differ.join("\n\n")
    );
}
