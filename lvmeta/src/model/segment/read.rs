//! A `segmentN` section read into a typed [`Segment`].

use crate::text::{Node, Tree, Value};

use super::super::read::{fields, Field, Section};
use super::super::{ModelError, ModelWarning};
use super::*;

const RAID_TYPES: &[&str] = &[
    "raid0",
    "raid0_meta",
    "raid1",
    "raid10",
    "raid10_near",
    "raid4",
    "raid5",
    "raid5_n",
    "raid5_la",
    "raid5_ls",
    "raid5_ra",
    "raid5_rs",
    "raid6",
    "raid6_nc",
    "raid6_nr",
    "raid6_zr",
    "raid6_la_6",
    "raid6_ls_6",
    "raid6_ra_6",
    "raid6_rs_6",
    "raid6_n_6",
];

/// Fields every segment has, not part of the type-specific body.
const COMMON: &[&str] = &[
    "start_extent",
    "extent_count",
    "reshape_count",
    "data_copies",
    "type",
    "tags",
];

/// Resolves names while segments are read.
pub(crate) struct Names<'m> {
    /// (PV section key, PV index), sorted by key.
    pub pvs: &'m [(&'m str, usize)],
    /// PE count of each PV.
    pub pe_counts: &'m [u32],
    /// PV ids for messages.
    pub pv_ids: &'m [String],
}

/// Reads one `segmentN` section of an LV into a typed segment.
pub(crate) fn read_segment(
    sec: &Section<'_, '_>,
    names: &Names<'_>,
    warnings: &mut Vec<ModelWarning>,
) -> Result<Segment, ModelError> {
    // The fields of the frequent types (striped, thin) in one pass; others look theirs up.
    fields!(sec, warnings, {
        start_extent = "start_extent",
        extent_count = "extent_count",
        type_ = "type",
        reshape_count = "reshape_count",
        data_copies = "data_copies",
        tags = "tags",
        stripe_count = "stripe_count",
        stripes = "stripes",
        stripe_size = "stripe_size",
        thin_pool = "thin_pool",
        transaction_id = "transaction_id",
        device_id = "device_id",
        origin = "origin",
        external_origin = "external_origin",
        merge = "merge",
    });
    let start_extent = sec.req_u32(start_extent)?;
    let extent_count = sec.req_u32(extent_count)?;
    let full_type = sec.req_ref(type_)?;
    let (base, type_flags) = split_type(full_type);
    let mut seg = Segment {
        start_extent,
        extent_count,
        reshape_count: sec.opt_u32(reshape_count)?,
        data_copies: sec.opt_u32(data_copies)?,
        type_flags,
        tags: sec.str_list(tags)?,
        kind: SegKind::Error,
    };
    let body = || -> Tree<'static> {
        let rest: Vec<Node> = sec
            .nodes
            .iter()
            .filter(|n| !COMMON.contains(&sec.tree.key(n)))
            .copied()
            .collect();
        sec.tree.subtree(&rest)
    };
    seg.kind = match base {
        "striped" | "linear" => {
            let count = sec.req_u32(stripe_count)?;
            let areas = read_areas(sec, stripes, count, &seg, names)?;
            let stripe_size = sec.opt_u32(stripe_size)?;
            if count > 1 && stripe_size.is_none() {
                return Err(sec.err("stripe_size", "missing for a striped segment"));
            }
            SegKind::Striped(Striped { stripe_size, areas })
        }
        "mirror" => {
            let count = sec.req_u32("mirror_count")?;
            let mirror_log = sec.opt_str("mirror_log")?;
            let region_size = sec.opt_u32("region_size")?;
            if mirror_log.is_some() && region_size.is_none() {
                return Err(sec.err("region_size", "missing for a mirror with a log"));
            }
            SegKind::Mirror(Mirror {
                region_size,
                mirror_log,
                extents_moved: sec.opt_u32("extents_moved")?,
                areas: read_areas(sec, sec.field("mirrors"), count, &seg, names)?,
            })
        }
        "thin-pool" => SegKind::ThinPool(read_thin_pool(sec)?),
        "thin" => {
            let device_id = sec.req_u32(device_id)?;
            if device_id > super::super::MAX_THIN_DEVICE_ID {
                return Err(sec.err("device_id", format!("{device_id} is above 0xFFFFFF")));
            }
            SegKind::Thin(Thin {
                thin_pool: sec.req_str(thin_pool)?,
                transaction_id: sec.req_u64(transaction_id)?,
                device_id,
                origin: sec.opt_str(origin)?,
                external_origin: sec.opt_str(external_origin)?,
                merge: sec.opt_str(merge)?,
            })
        }
        "snapshot" => {
            let (cow, merging) = match (sec.opt_str("cow_store")?, sec.opt_str("merging_store")?) {
                (Some(c), None) => (c, false),
                (None, Some(m)) => (m, true),
                _ => {
                    return Err(sec.err(
                        "cow_store",
                        "exactly one of cow_store and merging_store is required",
                    ))
                }
            };
            SegKind::Snapshot(Snapshot {
                chunk_size: sec.req_u32("chunk_size")?,
                origin: sec.req_str("origin")?,
                cow,
                merging,
            })
        }
        "error" => SegKind::Error,
        "zero" => SegKind::Zero,
        t if RAID_TYPES.contains(&t) => {
            let list = if sec.value("raids").is_some() {
                "raids"
            } else {
                "raid0_lvs"
            };
            let names = sec.req_str_list(list)?;
            let refs = names
                .into_iter()
                .map(|lv| LvRef {
                    field: if list == "raids" {
                        "raids"
                    } else {
                        "raid0_lvs"
                    },
                    lv,
                })
                .collect();
            SegKind::Raid {
                level: t.to_owned(),
                body: Composite {
                    refs,
                    fields: body(),
                },
            }
        }
        "cache" => SegKind::Cache(composite(sec, &["cache_pool", "origin"], &[], body())?),
        "cache-pool" => SegKind::CachePool(composite(sec, &["data", "metadata"], &[], body())?),
        "writecache" => {
            SegKind::Writecache(composite(sec, &["writecache", "origin"], &[], body())?)
        }
        "integrity" => SegKind::Integrity(composite(sec, &["origin"], &["meta_dev"], body())?),
        "vdo" => SegKind::Vdo(composite(sec, &["vdo_pool"], &[], body())?),
        "vdo-pool" => SegKind::VdoPool(composite(sec, &["data"], &[], body())?),
        _ => {
            tracing::warn!(path = %sec.path, segtype = %full_type, "unrecognised segment type, kept verbatim");
            seg.type_flags.clear();
            SegKind::Unknown(Unknown {
                type_name: full_type.to_owned(),
                fields: body(),
            })
        }
    };
    Ok(seg)
}

/// A segment `type` split into its base type and `+FLAG` suffixes. lvm2 2.03.16: an unknown
/// flag makes the whole string an unknown segment type.
fn split_type(full_type: &str) -> (&str, Vec<String>) {
    let Some((base, rest)) = full_type.split_once('+') else {
        return (full_type, Vec::new());
    };
    if rest
        .split('+')
        .all(|f| super::super::flags::SEGTYPE_FLAGS.contains(&f))
    {
        (base, rest.split('+').map(str::to_owned).collect())
    } else {
        (full_type, Vec::new())
    }
}

fn composite(
    sec: &Section<'_, '_>,
    required: &[&'static str],
    optional: &[&'static str],
    fields: Tree<'static>,
) -> Result<Composite, ModelError> {
    let mut refs = Vec::new();
    for &f in required {
        refs.push(LvRef {
            field: f,
            lv: sec.req_str(f)?,
        });
    }
    for &f in optional {
        if let Some(lv) = sec.opt_str(f)? {
            refs.push(LvRef { field: f, lv });
        }
    }
    Ok(Composite { refs, fields })
}

fn read_thin_pool(sec: &Section<'_, '_>) -> Result<ThinPool, ModelError> {
    let chunk_size = sec.req_u32("chunk_size")?;
    if !(128..=2_097_152).contains(&chunk_size) || chunk_size % 128 != 0 {
        return Err(sec.err(
            "chunk_size",
            format!("{chunk_size} is not a multiple of 128 in 128..=2097152"),
        ));
    }
    let discards = sec.opt_str("discards")?;
    if let Some(d) = &discards {
        if !DISCARDS.contains(&d.as_str()) {
            return Err(sec.err("discards", format!("unknown value {d:?}")));
        }
    }
    let mut messages = Vec::new();
    for (_, msec) in sec.sections() {
        {
            messages.push(match (msec.opt_str("create")?, msec.opt_u32("delete")?) {
                (Some(lv), None) => ThinMessage::Create(lv),
                (None, Some(id)) => ThinMessage::Delete(id),
                _ => {
                    return Err(
                        msec.err("create", "a message needs exactly one of create and delete")
                    )
                }
            });
        }
    }
    Ok(ThinPool {
        metadata: sec.req_str("metadata")?,
        pool: sec.req_str("pool")?,
        transaction_id: sec.req_u64("transaction_id")?,
        chunk_size,
        discards,
        zero_new_blocks: sec.opt_int("zero_new_blocks")?.unwrap_or(0) != 0,
        crop_metadata: sec.opt_u32("crop_metadata")?,
        messages,
    })
}

fn read_areas<'t>(
    sec: &Section<'t, '_>,
    field: Field<'t>,
    count: u32,
    seg: &Segment,
    names: &Names<'_>,
) -> Result<Vec<Area>, ModelError> {
    let key = field.key;
    let items = match field.value {
        Some(Value::Array(span)) => sec.tree.items(*span),
        Some(_) => return Err(sec.err(key, "must be a list")),
        None => return Err(sec.err(key, "missing")),
    };
    if count == 0 || items.len() != 2 * count as usize {
        return Err(sec.err(key, format!("{} entries for {count} areas", items.len())));
    }
    if !seg.extent_count.is_multiple_of(count) && key == "stripes" {
        return Err(sec.err(
            "extent_count",
            format!("{} is not a multiple of {count} stripes", seg.extent_count),
        ));
    }
    let area_len = if key == "stripes" {
        seg.extent_count / count
    } else {
        seg.extent_count
    };
    let mut out = Vec::with_capacity(count as usize);
    for pair in items.chunks(2) {
        let (Some(name), Value::Int(pos)) = (sec.tree.value_str(&pair[0]), &pair[1]) else {
            return Err(sec.err(key, "entries must be \"name\", integer pairs"));
        };
        let pos = u32::try_from(*pos)
            .map_err(|_| sec.err(key, format!("position {pos} out of range")))?;
        let pv_index = names
            .pvs
            .binary_search_by(|(k, _)| (*k).cmp(name))
            .ok()
            .map(|i| names.pvs[i].1);
        if let Some(pv) = pv_index {
            if u64::from(pos) + u64::from(area_len) > u64::from(names.pe_counts[pv]) {
                return Err(sec.err(
                    key,
                    format!(
                        "segment with extent {} in PV {} not found",
                        u64::from(pos) + u64::from(area_len) - 1,
                        names.pv_ids[pv]
                    ),
                ));
            }
            out.push(Area::Pv { pv, pe: pos });
        } else {
            out.push(Area::Lv {
                lv: name.to_owned(),
                le: pos,
            });
        }
    }
    Ok(out)
}
