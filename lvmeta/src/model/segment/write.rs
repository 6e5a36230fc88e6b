//! A [`Segment`] written as lvm2's exporter writes it.

use crate::text::Emitter;

use super::*;

/// Writes the segment as lvm2's exporter does.
pub(crate) fn write_segment(e: &mut Emitter, index: usize, seg: &Segment, pv_keys: &[String]) {
    e.open_numbered("segment", index);
    e.int("start_extent", i64::from(seg.start_extent));
    e.int("extent_count", i64::from(seg.extent_count));
    e.blank();
    if let Some(r) = seg.reshape_count {
        e.int("reshape_count", i64::from(r));
    }
    // lvm2 writes a raid segment's data copies among its raid fields (see write_raid).
    if let Some(d) = seg
        .data_copies
        .filter(|_| !matches!(seg.kind, SegKind::Raid { .. }))
    {
        e.int("data_copies", i64::from(d));
    }
    if seg.type_flags.is_empty() {
        e.str("type", seg.kind.type_name());
    } else {
        let mut ty = seg.kind.type_name().to_owned();
        for f in &seg.type_flags {
            ty.push('+');
            ty.push_str(f);
        }
        e.str("type", &ty);
    }
    if !seg.tags.is_empty() {
        e.str_list("tags", &seg.tags);
    }
    match &seg.kind {
        SegKind::Striped(s) => {
            e.int("stripe_count", s.areas.len() as i64);
            if let Some(sz) = s.stripe_size.filter(|_| s.areas.len() > 1) {
                e.int("stripe_size", i64::from(sz));
            }
            e.blank();
            write_areas(e, "stripes", &s.areas, pv_keys);
        }
        SegKind::Mirror(m) => {
            e.int("mirror_count", m.areas.len() as i64);
            if let Some(x) = m.extents_moved {
                e.int("extents_moved", i64::from(x));
            }
            if let Some(l) = &m.mirror_log {
                e.str("mirror_log", l);
            }
            if let Some(r) = m.region_size {
                e.int("region_size", i64::from(r));
            }
            e.blank();
            write_areas(e, "mirrors", &m.areas, pv_keys);
        }
        SegKind::ThinPool(p) => {
            e.str("metadata", &p.metadata);
            e.str("pool", &p.pool);
            e.int("transaction_id", p.transaction_id as i64);
            e.int("chunk_size", i64::from(p.chunk_size));
            if let Some(d) = &p.discards {
                e.str("discards", d);
            }
            if p.zero_new_blocks {
                e.int("zero_new_blocks", 1);
            }
            if let Some(c) = p.crop_metadata {
                e.int("crop_metadata", i64::from(c));
            }
            for (i, m) in p.messages.iter().enumerate() {
                e.open_numbered("message", i + 1);
                match m {
                    ThinMessage::Create(lv) => e.str("create", lv),
                    ThinMessage::Delete(id) => e.int("delete", i64::from(*id)),
                }
                e.close();
            }
        }
        SegKind::Thin(t) => {
            e.str("thin_pool", &t.thin_pool);
            e.int("transaction_id", t.transaction_id as i64);
            if let Some(o) = &t.origin {
                e.str("origin", o);
            }
            if let Some(m) = &t.merge {
                e.str("merge", m);
            }
            if let Some(x) = &t.external_origin {
                e.str("external_origin", x);
            }
            e.int("device_id", i64::from(t.device_id));
        }
        SegKind::Snapshot(s) => {
            e.int("chunk_size", i64::from(s.chunk_size));
            e.str("origin", &s.origin);
            e.str(s.store_key(), &s.cow);
        }
        SegKind::Unknown(u) => e.nodes(&u.fields, u.fields.top()),
        SegKind::Raid { body, .. } => write_raid(e, seg.data_copies, body),
        k => {
            if let Some(body) = k.composite() {
                e.nodes(&body.fields, body.fields.top());
            }
        }
    }
    e.close();
}

/// A raid segment's fields in their order, `data_copies` after `device_count` and the sub-LV
/// list as lvm2 lays it out: after an empty line, one image per line (`raid0_lvs`) or one
/// metadata/image pair per line (`raids`).
fn write_raid(e: &mut Emitter, data_copies: Option<u32>, body: &Composite) {
    let tree = &body.fields;
    // Written after `device_count`, or before the list when there is none (never by lvm2).
    let mut data_copies = data_copies;
    for n in tree.top() {
        let key = tree.key(n);
        let items = match &n.body {
            crate::text::Body::Value(crate::text::Value::Array(span))
                if key == "raids" || key == "raid0_lvs" =>
            {
                tree.items(*span)
            }
            _ => {
                e.nodes(tree, std::slice::from_ref(n));
                if key == "device_count" {
                    if let Some(d) = data_copies.take() {
                        e.int("data_copies", i64::from(d));
                    }
                }
                continue;
            }
        };
        if let Some(d) = data_copies.take() {
            e.int("data_copies", i64::from(d));
        }
        let per_line = if key == "raids" { 2 } else { 1 };
        e.blank();
        e.line(&format!("{key} = ["));
        let lines: Vec<String> = items
            .chunks(per_line)
            .map(|chunk| {
                chunk
                    .iter()
                    .map(|v| crate::text::quote(tree.value_str(v).unwrap_or_default()))
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .collect();
        for (i, l) in lines.iter().enumerate() {
            let sep = if i + 1 < lines.len() { "," } else { "" };
            if e.style() == crate::text::Style::File {
                e.line(&format!("\t{l}{sep}"));
            } else {
                e.line(&format!("{l}{sep}"));
            }
        }
        e.line("]");
    }
    if let Some(d) = data_copies {
        e.int("data_copies", i64::from(d));
    }
}

fn write_areas(e: &mut Emitter, key: &str, areas: &[Area], pv_keys: &[String]) {
    e.line(&format!("{key} = ["));
    let n = areas.len();
    for (i, a) in areas.iter().enumerate() {
        let sep = if i + 1 < n { "," } else { "" };
        let line = match a {
            Area::Pv { pv, pe } => format!("\t{}, {pe}{sep}", crate::text::quote(&pv_keys[*pv])),
            Area::Lv { lv, le } => format!("\t{}, {le}{sep}", crate::text::quote(lv)),
        };
        if e.style() == crate::text::Style::File {
            e.line(&line);
        } else {
            e.line(line.trim_start_matches('\t'));
        }
    }
    e.line("]");
}
