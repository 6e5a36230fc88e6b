//! Support for lvmeta's integration tests and benchmarks: fixtures written by stock lvm2,
//! comparison of lvmeta's reports with lvm2's, and the gate for privileged tests.

pub mod csi_hosts;
pub mod guest;
pub mod lab;
pub mod sandbox;
pub mod vm;

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use lvmeta::dev::{BlockDevice, FileDevice, MemDevice};
use lvmeta::report::{self, DmState, Kind, Request, Units};
use lvmeta::scan::{self, Scan};
use lvmeta::text::Style;
use serde_json::Value;

/// Directory of the committed fixtures.
pub fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/data")
}

/// The generator script.
pub fn make_fixtures_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/make-fixtures.sh")
}

/// Names of the fixtures the generator makes.
pub const FIXTURES: &[&str] = &[
    "linear",
    "striped",
    "wrapped",
    "sector4k",
    "sysid",
    "shared",
    "cache",
    "writecache",
    "raid",
    "integrity",
];

/// The fixtures whose LVs lvm2 creates only with device-mapper (dm-cache, dm-writecache,
/// dm-raid, dm-integrity) and without udev: made in the VM (`tests/vm/run`), not by the
/// generator's default run.
pub const DM_FIXTURES: &[&str] = &["cache", "writecache", "raid", "integrity"];

/// The fields each fixture's JSON reports hold (the generator's `-o` lists).
pub const LVS_FIELDS: &str =
    "lv_name,vg_name,lv_uuid,lv_size,lv_attr,segtype,seg_count,lv_tags,pool_lv,origin,lv_lock_args";
/// Segment report fields.
pub const SEG_FIELDS: &str =
    "lv_name,vg_name,segtype,devices,seg_start_pe,seg_size_pe,stripes,stripe_size";
/// Thin pool settings, as a pool and its thin LVs show them (compared live only: the
/// fixtures' stored reports predate them).
pub const POOL_FIELDS: &str = "lv_name,vg_name,discards,zero";
/// Metadata area space, as each PV shows its own and its VG's (compared live only: the
/// fixtures' stored reports predate them).
pub const MDA_FIELDS: &str = "pv_name,pv_mda_free,pv_mda_size,vg_mda_free,vg_mda_size,vg_mda_count";
/// VG report fields.
pub const VGS_FIELDS: &str = "vg_name,vg_uuid,vg_size,vg_free,vg_extent_size,vg_extent_count,vg_free_count,pv_count,lv_count,vg_seqno,vg_tags,vg_lock_type,vg_lock_args,vg_systemid,vg_attr";
/// PV report fields.
pub const PVS_FIELDS: &str = "pv_name,pv_uuid,pv_size,dev_size,pe_start,pv_pe_count,pv_pe_alloc_count,pv_mda_count,pv_mda_size,pv_tags,vg_name";

/// A fixture: its PV images (by file name) and what lvm2 reported about them.
pub struct Fixture {
    /// Fixture directory.
    pub dir: PathBuf,
    /// Image file name (`pv0.img`) -> the loop device lvm2 saw it as.
    pub loops: HashMap<String, String>,
    /// Logical sector size the loops had.
    pub sector_size: u32,
}

impl Fixture {
    /// Reads a fixture directory.
    pub fn open(dir: &Path) -> Self {
        let map = std::fs::read_to_string(dir.join("devices.map")).expect("devices.map");
        let loops = map
            .lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(a, b)| (a.to_owned(), b.to_owned()))
            .collect();
        let sector_size = std::fs::read_to_string(dir.join("sector-size"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(512);
        Self {
            dir: dir.to_owned(),
            loops,
            sector_size,
        }
    }

    /// Image names in order.
    pub fn images(&self) -> Vec<String> {
        let mut v: Vec<String> = self.loops.keys().cloned().collect();
        v.sort();
        v
    }

    /// The images as in-memory devices (decompressing `.xz` copies), named `pvN.img`.
    pub fn mem_devices(&self) -> Vec<MemDevice> {
        self.images()
            .iter()
            .map(|name| {
                let plain = self.dir.join(name);
                let data = if plain.exists() {
                    std::fs::read(&plain).expect("image")
                } else {
                    let f = std::fs::File::open(self.dir.join(format!("{name}.xz")))
                        .expect("compressed image");
                    let mut out = Vec::new();
                    std::io::Read::read_to_end(&mut xz2::read::XzDecoder::new(f), &mut out)
                        .expect("xz");
                    out
                };
                MemDevice::from_bytes(name, data, self.sector_size)
            })
            .collect()
    }

    /// The images opened as files (uncompressed fixtures only), named by file name.
    pub fn file_devices(&self) -> Vec<FileDevice> {
        self.images()
            .iter()
            .map(|n| FileDevice::open(&self.dir.join(n)).expect("open image"))
            .collect()
    }

    /// A JSON report lvm2 wrote, with its device names replaced by image names.
    pub fn lvm_json(&self, file: &str) -> Value {
        let text = std::fs::read_to_string(self.dir.join(file)).expect("report");
        let mut v: Value = serde_json::from_str(&text).expect("lvm2 JSON");
        let rename: HashMap<&str, &str> = self
            .loops
            .iter()
            .map(|(img, l)| (l.as_str(), img.as_str()))
            .collect();
        rename_devices(&mut v, &rename);
        if DmState::probe() != DmState::Unknown {
            inactive_here(&mut v);
        }
        v
    }
}

/// The `lv_attr` values of a stored report as lvm2 prints them on a kernel with
/// device-mapper: the generator reported with activation off (state and open `XX`, and the
/// health of raid LVs and their sub-LVs `X`), and the fixtures' LVs are never active here
/// (`--`, health `-`).
fn inactive_here(v: &mut Value) {
    match v {
        Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                match (k.as_str(), x) {
                    ("lv_attr", Value::String(s)) if s.get(4..6) == Some("XX") => {
                        s.replace_range(4..6, "--");
                        if s.get(8..9) == Some("X") {
                            s.replace_range(8..9, "-");
                        }
                    }
                    (_, x) => inactive_here(x),
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(inactive_here),
        _ => {}
    }
}

/// Replaces device names in a report (`pv_name` values and the devices of `devices`
/// lists) by the names `rename` maps them to.
pub fn rename_devices(v: &mut Value, rename: &HashMap<&str, &str>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                match (k.as_str(), x) {
                    ("pv_name", Value::String(s)) => {
                        if let Some(n) = rename.get(s.as_str()) {
                            *s = (*n).to_owned();
                        }
                    }
                    ("devices", Value::String(s)) => {
                        let parts: Vec<String> = s
                            .split(',')
                            .filter(|p| !p.is_empty())
                            .map(|p| match p.split_once('(') {
                                Some((d, rest)) => {
                                    format!("{}({rest}", rename.get(d).copied().unwrap_or(d))
                                }
                                None => p.to_owned(),
                            })
                            .collect();
                        *s = parts.join(",");
                    }
                    (_, x) => rename_devices(x, rename),
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| rename_devices(x, rename)),
        _ => {}
    }
}

/// Scans a set of devices.
pub fn scan_all<D: BlockDevice>(devs: &[D]) -> Scan {
    let refs: Vec<&dyn BlockDevice> = devs.iter().map(|d| d as &dyn BlockDevice).collect();
    scan::scan(&refs)
}

/// lvmeta's JSON for a report, as `lvmeta <kind> -a --units b --nosuffix -o FIELDS` prints it.
pub fn lvmeta_json(
    scan: &Scan,
    kind: Kind,
    fields: &str,
    segments: bool,
    select: &[String],
) -> Value {
    let req = Request {
        kind,
        fields: report::parse_fields(kind, Some(fields)).expect("fields"),
        all: true,
        segments,
        select,
        by_name: true,
    };
    // As `lvmeta lvs` on this machine: lvm2 prints `XX` for state and open without
    // device-mapper, the devices' state with it.
    let table = report::build(scan, &req, &DmState::probe());
    let text = table.to_json(Units {
        unit: 'b',
        suffix: false,
    });
    serde_json::from_str(&text).expect("lvmeta JSON")
}

/// Rows of a report as sorted strings, so the two sides compare whatever their device names'
/// sort order.
pub fn rows(v: &Value) -> Vec<String> {
    let report = &v["report"][0];
    let list = report
        .as_object()
        .and_then(|o| o.values().next())
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut out: Vec<String> = list.iter().map(|r| r.to_string()).collect();
    out.sort();
    out
}

/// The JSON key of a report's rows.
pub fn row_key(v: &Value) -> String {
    v["report"][0]
        .as_object()
        .and_then(|o| o.keys().next().cloned())
        .unwrap_or_default()
}

/// A backup file with comments, the description and the top-level creation lines removed.
pub fn normalise_backup(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| {
            !l.starts_with("description")
                && !l.starts_with("creation_time")
                && !l.starts_with("creation_host")
        })
        .map(|l| strip_comment(l).trim_end().to_owned())
        .filter(|l| !l.starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n")
        .trim()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn strip_comment(line: &str) -> &str {
    let mut quoted = false;
    let mut escaped = false;
    for (i, c) in line.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            '#' if !quoted && i > 0 => return &line[..i],
            _ => {}
        }
    }
    line
}

/// Compares everything lvmeta reads from a fixture with what lvm2 reported. Panics with a
/// description of the first difference.
pub fn check_fixture(fx: &Fixture, scan: &Scan) {
    let name = fx.dir.display();
    assert!(
        scan.warnings.is_empty(),
        "{name}: unexpected warnings: {:?}",
        scan.warnings
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
    );
    let vg_name = scan.vgs.first().map(|v| v.vg.name.clone()).expect("a VG");
    let select = [vg_name.clone()];
    for (file, kind, fields, seg, sel) in [
        ("pvs.json", Kind::Pvs, PVS_FIELDS, false, &[][..]),
        ("vgs.json", Kind::Vgs, VGS_FIELDS, false, &select[..]),
        ("lvs.json", Kind::Lvs, LVS_FIELDS, false, &select[..]),
        ("lvs-seg.json", Kind::Lvs, SEG_FIELDS, true, &select[..]),
    ] {
        let theirs = fx.lvm_json(file);
        let mut ours = lvmeta_json(scan, kind, fields, seg, sel);
        // Image files opened by path show their full path; lvm2's loops were renamed to the
        // bare image name.
        let short: Vec<(String, String)> = scan
            .pvs
            .iter()
            .map(|p| {
                (
                    p.device.clone(),
                    p.device.rsplit('/').next().unwrap_or(&p.device).to_owned(),
                )
            })
            .collect();
        let rename: HashMap<&str, &str> = short
            .iter()
            .map(|(a, b)| (a.as_str(), b.as_str()))
            .collect();
        rename_devices(&mut ours, &rename);
        assert!(
            !rows(&theirs).is_empty(),
            "{name}/{file}: lvm2 reported nothing"
        );
        assert_eq!(row_key(&ours), row_key(&theirs), "{name}/{file}: row key");
        assert_eq!(rows(&ours), rows(&theirs), "{name}/{file}");
    }
    // vgcfgbackup: the same file apart from comments and description lines.
    let svg = scan.vg(&vg_name).expect("VG");
    let ours = svg.vg.to_text(Style::File, "lvmeta test");
    let theirs = std::fs::read_to_string(fx.dir.join("vgcfgbackup")).expect("vgcfgbackup");
    assert_eq!(
        normalise_backup(&ours),
        normalise_backup(&theirs),
        "{name}: vgcfgbackup"
    );
    // Printed text re-parses to the same model, in both layouts.
    for style in [Style::Raw, Style::File] {
        let text = svg.vg.to_text(style, "lvmeta test");
        let back = lvmeta::model::Vg::from_text(&text).expect("re-parses").vg;
        assert_eq!(back, svg.vg, "{name}: {style:?} round trip");
    }
}

/// The `lvmeta` binary of this workspace (built by `cargo test --workspace`; built here if a
/// narrower `cargo test -p` left it out).
pub fn lvmeta_bin() -> PathBuf {
    workspace_bin("lvmeta-cli", "lvmeta")
}

/// Binary `name` of workspace package `package`, next to the test binaries: built if missing,
/// and in a benchmark (target/release) built or found up to date every time.
pub fn workspace_bin(package: &str, name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target dir")
        .to_owned();
    let bin = dir.join(name);
    // Benchmarks run from target/release: the binary is built (or found up to date) in the
    // same profile every time, never taken stale from an earlier build. A debug binary
    // older than this test binary is from an earlier build of a reused target directory
    // (`cargo test --workspace` builds a package's binary only for its own tests).
    let release = dir.file_name().is_some_and(|d| d == "release");
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let stale = match (modified(&bin), modified(&exe)) {
        (Some(b), Some(t)) => b < t,
        _ => true,
    };
    if release || stale {
        let status = Command::new(env!("CARGO"))
            .args(["build", "-p", package, "--bin", name])
            .args(release.then_some("--release"))
            .status();
        // Inside the VM there is no cargo (root's home is the guest's own): the host built
        // the binary before the run (docs/benchmarks.md).
        let status = match status {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && bin.exists() => return bin,
            s => s.expect("run cargo build"),
        };
        assert!(
            status.success(),
            "cargo build -p {package} --bin {name} failed"
        );
    }
    bin
}

pub use lvmeta::testing::privileged_required;

/// Checks the prerequisites of a privileged test. `Ok(false)`: skip (a message was printed);
/// panics when they are missing and [`privileged_required`].
pub fn privileged(test: &str, tools: &[&str]) -> bool {
    let mut missing = Vec::new();
    if !is_root() {
        missing.push("root".to_owned());
    }
    if !Path::new("/dev/loop-control").exists() {
        missing.push("/dev/loop-control".to_owned());
    }
    for t in tools {
        if !has_tool(t) {
            missing.push((*t).to_owned());
        }
    }
    if missing.is_empty() {
        return true;
    }
    let msg = format!("{test}: missing {}", missing.join(", "));
    if privileged_required() {
        panic!("{msg} (CI=true or LVMETA_REQUIRE_PRIVILEGED=1: privileged tests must run)");
    }
    skipped(&msg);
    false
}

/// Whether this kernel has device-mapper with thin pools (see [`device_mapper`]).
pub fn has_device_mapper() -> bool {
    let targets = Command::new("dmsetup").arg("targets").output();
    let thin = targets.is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("thin-pool"));
    Path::new("/dev/mapper/control").exists() && thin
}

/// The gate of a test that needs device-mapper with thin pools (`/dev/mapper/control` and
/// `dm-thin-pool` loaded): the test machines' kernels have not, the VM stage's has
/// (`tests/vm/run`). Without: skips with a message, or panics inside the VM (`LVMETA_VM=1`)
/// or with `LVMETA_REQUIRE_DM=1`, where it must be there.
pub fn device_mapper(test: &str) -> bool {
    if has_device_mapper() {
        return true;
    }
    let msg = format!(
        "{test}: this kernel has no device-mapper with thin-pool (the VM stage runs it: \
         tests/vm/run, docs/testing.md, \"Tests on a real kernel\")"
    );
    let required = ["LVMETA_VM", "LVMETA_REQUIRE_DM"]
        .iter()
        .any(|v| std::env::var(v).is_ok_and(|x| x == "1"));
    if required {
        panic!("{msg}");
    }
    skipped(&msg);
    false
}

/// Writes `data` at byte `at` of `path` (a device or a file, made if missing), synced.
pub fn write_at(path: &Path, at: u64, data: &[u8]) {
    use std::io::{Seek, SeekFrom};
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .expect("open for writing");
    f.seek(SeekFrom::Start(at)).expect("seek");
    f.write_all(data).expect("write");
    f.sync_all().expect("fsync");
}

/// `n` bytes at byte `at` of `path`.
pub fn read_at(path: &Path, at: u64, n: usize) -> Vec<u8> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(path).expect("open");
    f.seek(SeekFrom::Start(at)).expect("seek");
    let mut buf = vec![0u8; n];
    f.read_exact(&mut buf).expect("read");
    buf
}

/// The kernel's transaction id of thin pool device `tpool` (`dmsetup status`, the
/// `-tpool` device's name), `None` when it is not up.
pub fn kernel_pool_tid(tpool: &str) -> Option<u64> {
    let out = Command::new("dmsetup")
        .args(["status", tpool])
        .output()
        .expect("dmsetup");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .nth(3)
        .and_then(|w| w.parse().ok())
}

/// Asserts that nothing is mounted at or below `dir` (a kubelet directory at the end of a
/// node test: a mount left there would make kubelet believe a target is clean).
pub fn assert_nothing_mounted_under(dir: &Path) {
    let info = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let left: Vec<String> = csi_shim::mount::mounts(&info)
        .map(|m| m.point)
        .filter(|p| Path::new(p).starts_with(dir))
        .collect();
    assert!(
        left.is_empty(),
        "left mounted under {}: {left:?}",
        dir.display()
    );
}

/// Prints `SKIPPED <why>` where it shows: straight to the process's stderr, since the test
/// harness captures `eprintln!` of a passing test and would hide the skip.
pub fn skipped(why: &str) {
    let _ = writeln!(std::io::stderr(), "SKIPPED {why}");
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

fn has_tool(t: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {t}"))
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Metadata text (raw, as on disk) of a VG with `lvs` linear LVs of one extent each, tags
/// and creation data included: the benchmark's and the proptests' large input.
pub fn synthetic_vg_text(lvs: usize) -> String {
    use lvmeta::model::{Area, Header, Lv, Pv, SegKind, Segment, Striped, Vg};
    use lvmeta::uuid::Uuid;
    let pe_count = u32::try_from(lvs).expect("LV count") + 16;
    let vg = Vg {
        name: "bigvg".into(),
        id: Uuid::random(),
        seqno: 42,
        format: Some("lvm2".into()),
        status: vec!["RESIZEABLE".into(), "READ".into(), "WRITE".into()],
        flags: vec![],
        tags: vec![],
        system_id: None,
        lock_type: None,
        lock_args: None,
        extent_size: 8192,
        max_lv: 0,
        max_pv: 0,
        allocation_policy: None,
        profile: None,
        metadata_copies: Some(0),
        pvs: vec![Pv {
            id: Uuid::random(),
            device: Some("/dev/sdz".into()),
            device_id_type: None,
            device_id: None,
            status: vec!["ALLOCATABLE".into()],
            flags: vec![],
            tags: vec![],
            dev_size: Some(u64::from(pe_count) * 8192 + 2048),
            pe_start: 2048,
            pe_count,
            ba: None,
        }],
        lvs: (0..lvs)
            .map(|i| {
                std::sync::Arc::new(Lv {
                    name: format!("pvc-{i:08}-volume"),
                    id: Uuid::random(),
                    status: vec!["READ".into(), "WRITE".into(), "VISIBLE".into()],
                    flags: vec![],
                    tags: vec![format!("csi.volume={i}")],
                    creation: Some((1_796_208_360 + i as u64, "node-1".into())),
                    lock_args: None,
                    allocation_policy: None,
                    profile: None,
                    read_ahead: None,
                    major: None,
                    minor: None,
                    segments: vec![Segment {
                        start_extent: 0,
                        extent_count: 1,
                        reshape_count: None,
                        data_copies: None,
                        type_flags: vec![],
                        tags: vec![],
                        kind: SegKind::Striped(Striped {
                            stripe_size: None,
                            areas: vec![Area::Pv {
                                pv: 0,
                                pe: u32::try_from(i).expect("index"),
                            }],
                        }),
                    }],
                })
            })
            .collect(),
        historical_lvs: Default::default(),
        header: Header {
            description: Some("synthetic".into()),
            creation_host: Some("node-1".into()),
            creation_host_system_id: None,
            creation_time: Some(1_796_208_360),
        },
    };
    vg.to_text(Style::Raw, "lvmeta synthetic")
}

/// One LV create + remove through the library (two commits): the step the commit and lease
/// benchmarks time.
pub fn create_remove_lv(s: &lvmeta::session::Session, vg: &str, extents: u32) {
    use lvmeta::edit::{self, LvSpec};
    s.update(vg, "lvcreate", |v, ctx| {
        edit::lv::create(
            v,
            ctx,
            &LvSpec::linear("bench", extents, lvmeta::testing::stamp()),
        )
        .map(|x| x.0)
    })
    .expect("create");
    s.update(vg, "lvremove", |v, ctx| {
        edit::lv::remove(v, ctx, "bench", false)
    })
    .expect("remove");
}

/// The floor of any commit, for the benchmarks: two 4 KiB O_DIRECT|O_DSYNC writes, one after
/// the other, in the last 8 KiB of the device at `path` (`size` bytes).
pub fn commit_floor(path: &str, size: u64) -> impl FnMut() {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(nix::libc::O_DIRECT | nix::libc::O_DSYNC)
        .open(path)
        .expect("open O_DIRECT|O_DSYNC");
    let mut buf = vec![0u8; 8192];
    let start = buf.as_ptr().align_offset(4096);
    buf[start..start + 4096].fill(0x5a);
    move || {
        let block = &buf[start..start + 4096];
        f.write_all_at(block, size - 8192).expect("write");
        f.write_all_at(block, size - 4096).expect("write");
    }
}

/// Unbinds, when dropped (also when a test fails), every loop device bound over `0` (a LUN),
/// unmounting it first: what lvmeta's loop activation left behind.
pub struct UnbindOver(pub String);

impl Drop for UnbindOver {
    fn drop(&mut self) {
        let Ok(out) = Command::new("losetup")
            .args(["-j", &self.0, "-O", "NAME", "-n"])
            .output()
        else {
            return;
        };
        for dev in String::from_utf8_lossy(&out.stdout).split_whitespace() {
            let _ = Command::new("umount").args(["-A", dev]).status();
            let _ = Command::new("losetup").args(["-d", dev]).status();
        }
    }
}
