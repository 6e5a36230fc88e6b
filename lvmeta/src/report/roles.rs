//! `lv_layout`, `lv_role` and `lv_time`: what an LV is made of, what it is for, and when it
//! was made, in lvm2's words.
//! - Layouts and roles are lvm2's string lists, comma-joined; an LV of a kind not told apart
//!   here is `unknown` (lvm2's word for a layout it cannot name).
//! - Times are `%Y-%m-%d %T %z` in this host's zone, as lvm2 prints them.

use super::attr::LvUses;
use crate::model::{Lv, SegKind};

/// `lv_layout`.
pub fn layout(lv: &Lv) -> String {
    let Some(seg) = lv.segments.first() else {
        return "unknown".into();
    };
    match &seg.kind {
        SegKind::Thin(_) => "thin,sparse".into(),
        SegKind::ThinPool(_) => "thin,pool".into(),
        SegKind::Striped(s) if s.areas.len() > 1 => "striped".into(),
        SegKind::Striped(_) => "linear".into(),
        SegKind::Raid { .. } => match seg.kind.type_name() {
            "raid5" => "raid,raid5,raid5_ls".into(),
            "raid6" => "raid,raid6,raid6_zr".into(),
            t => format!("raid,{t}"),
        },
        SegKind::CachePool(_) => "cache,pool".into(),
        SegKind::Cache(_) => "cache".into(),
        SegKind::Writecache(_) => "writecache".into(),
        _ => "unknown".into(),
    }
}

/// `lv_role`.
pub fn role(lv: &Lv, uses: &LvUses<'_>) -> String {
    let name = lv.name.as_str();
    let thin_pool = matches!(
        lv.segments.first().map(|s| &s.kind),
        Some(SegKind::ThinPool(_))
    );
    if lv.is_visible() && !thin_pool {
        let mut r = String::from("public");
        if uses.used_as_by(name, "origin", "thin") {
            r.push_str(",origin,thinorigin");
        }
        if let Some(SegKind::Thin(t)) = lv.segments.first().map(|s| &s.kind) {
            if t.origin.is_some() {
                r.push_str(",snapshot,thinsnapshot");
            }
        }
        return r;
    }
    let what = if uses.used_as_by(name, "pool", "thin-pool") {
        ",thin,pool,data"
    } else if uses.used_as_by(name, "metadata", "thin-pool") {
        ",thin,pool,metadata"
    } else if !lv.is_visible() && name.contains("_pmspare") {
        ",pool,spare"
    } else {
        ""
    };
    format!("private{what}")
}

/// `secs` since the epoch as lvm2's `lv_time` prints it: `%Y-%m-%d %T %z` in this host's
/// time zone (`TZ`, else `/etc/localtime`, else UTC), as glibc's `localtime` gives it.
pub fn time(secs: u64) -> String {
    time_in(secs, &jiff::tz::TimeZone::system())
}

/// [`time`] in zone `tz`.
fn time_in(secs: u64, tz: &jiff::tz::TimeZone) -> String {
    let t = i64::try_from(secs)
        .ok()
        .and_then(|s| jiff::Timestamp::from_second(s).ok())
        .unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    t.to_zoned_datetime(tz.clone())
        .strftime("%Y-%m-%d %H:%M:%S %z")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Vg;

    #[test]
    fn times_are_lvm2s_in_utc() {
        let utc = jiff::tz::TimeZone::UTC;
        assert_eq!(time_in(0, &utc), "1970-01-01 00:00:00 +0000");
        assert_eq!(time_in(1_765_080_000, &utc), "2025-12-07 04:00:00 +0000");
        assert_eq!(time_in(951_782_400, &utc), "2000-02-29 00:00:00 +0000");
        // A zone half an hour off whole hours, and one with summer time.
        let fixed = jiff::tz::TimeZone::fixed(jiff::tz::offset(5));
        assert_eq!(time_in(0, &fixed), "1970-01-01 05:00:00 +0500");
        let posix = jiff::tz::TimeZone::posix("CET-1CEST,M3.5.0,M10.5.0/3").expect("zone");
        assert_eq!(time_in(1_751_328_000, &posix), "2025-07-01 02:00:00 +0200");
        assert_eq!(time_in(1_765_080_000, &posix), "2025-12-07 05:00:00 +0100");
        // Past what a timestamp holds: the epoch, not a panic.
        assert_eq!(time_in(u64::MAX, &utc), "1970-01-01 00:00:00 +0000");
    }

    /// A thin pool with an origin and its snapshot, as lvm2 names their roles.
    #[test]
    fn roles_and_layouts_are_lvm2s() {
        let text = r#"contents = "Text Format Volume Group"
version = 1
vg {
id = "Wy5uaz-Lt9l-yM3b-6ldt-vk9a-rMOe-FcG3Ur"
seqno = 1
format = "lvm2"
status = ["RESIZEABLE", "READ", "WRITE"]
flags = []
extent_size = 8192
max_lv = 0
max_pv = 0
metadata_copies = 0
physical_volumes {
pv0 {
id = "xKkCd5-V9Ym-8tzv-Kkm6-5wPQ-vYqI-hcBqjl"
device = "/dev/x"
status = ["ALLOCATABLE"]
flags = []
dev_size = 262144
pe_start = 2048
pe_count = 31
}
}
logical_volumes {
pool {
id = "aaaaaa-aaaa-aaaa-aaaa-aaaa-aaaa-aaaaaa"
status = ["READ", "WRITE", "VISIBLE"]
flags = []
segment_count = 1
segment1 {
start_extent = 0
extent_count = 2
type = "thin-pool"
metadata = "pool_tmeta"
pool = "pool_tdata"
transaction_id = 2
chunk_size = 128
discards = "passdown"
zero_new_blocks = 1
}
}
o {
id = "bbbbbb-aaaa-aaaa-aaaa-aaaa-aaaa-aaaaaa"
status = ["READ", "WRITE", "VISIBLE"]
flags = []
segment_count = 1
segment1 {
start_extent = 0
extent_count = 1
type = "thin"
thin_pool = "pool"
transaction_id = 0
device_id = 1
}
}
s {
id = "cccccc-aaaa-aaaa-aaaa-aaaa-aaaa-aaaaaa"
status = ["READ", "WRITE", "VISIBLE"]
flags = []
segment_count = 1
segment1 {
start_extent = 0
extent_count = 1
type = "thin"
thin_pool = "pool"
transaction_id = 1
device_id = 2
origin = "o"
}
}
lvol0_pmspare {
id = "dddddd-aaaa-aaaa-aaaa-aaaa-aaaa-aaaaaa"
status = ["READ", "WRITE"]
flags = []
segment_count = 1
segment1 {
start_extent = 0
extent_count = 1
type = "striped"
stripe_count = 1
stripes = ["pv0", 0]
}
}
pool_tmeta {
id = "eeeeee-aaaa-aaaa-aaaa-aaaa-aaaa-aaaaaa"
status = ["READ", "WRITE"]
flags = []
segment_count = 1
segment1 {
start_extent = 0
extent_count = 1
type = "striped"
stripe_count = 1
stripes = ["pv0", 1]
}
}
pool_tdata {
id = "ffffff-aaaa-aaaa-aaaa-aaaa-aaaa-aaaaaa"
status = ["READ", "WRITE"]
flags = []
segment_count = 1
segment1 {
start_extent = 0
extent_count = 2
type = "striped"
stripe_count = 1
stripes = ["pv0", 2]
}
}
}
}
"#;
        let vg = Vg::from_text(text).expect("test VG").vg;
        let uses = LvUses::of(&vg);
        let got = |n: &str| {
            let lv = vg.lv(n).expect(n);
            (role(lv, &uses), layout(lv))
        };
        let pair = |r: &str, l: &str| (r.to_owned(), l.to_owned());
        assert_eq!(got("pool"), pair("private", "thin,pool"));
        assert_eq!(got("o"), pair("public,origin,thinorigin", "thin,sparse"));
        assert_eq!(
            got("s"),
            pair("public,snapshot,thinsnapshot", "thin,sparse")
        );
        assert_eq!(got("lvol0_pmspare"), pair("private,pool,spare", "linear"));
        assert_eq!(
            got("pool_tmeta"),
            pair("private,thin,pool,metadata", "linear")
        );
        assert_eq!(got("pool_tdata"), pair("private,thin,pool,data", "linear"));
    }
}
