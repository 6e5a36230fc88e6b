//! Properties: binary headers and text round-trip exactly, and any single flipped byte in a
//! header or in the metadata text is detected.

use lvmeta::crc;
use lvmeta::label::{self, DiskLocn, PvExtension, PvLabel};
use lvmeta::mda::{self, MdaHeader, RawLocn};
use lvmeta::model::{Area, SegKind, Vg};
use lvmeta::text::{self, Style};
use lvmeta::uuid::Uuid;
use proptest::prelude::*;

const ALNUM: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";

fn uuid() -> impl Strategy<Value = Uuid> {
    proptest::collection::vec(proptest::sample::select(ALNUM.to_vec()), 32).prop_map(|v| {
        let mut raw = [0u8; 32];
        raw.copy_from_slice(&v);
        Uuid::from_raw(raw).expect("alphabet")
    })
}

fn locn() -> impl Strategy<Value = DiskLocn> {
    (1u64.., any::<u64>()).prop_map(|(offset, size)| DiskLocn { offset, size })
}

fn label_strategy() -> impl Strategy<Value = PvLabel> {
    (
        0u64..4,
        uuid(),
        any::<u64>(),
        proptest::collection::vec(locn(), 0..3),
        proptest::collection::vec(locn(), 0..3),
        proptest::option::of((
            1u32..,
            any::<u32>(),
            proptest::collection::vec(locn(), 0..3),
        )),
    )
        .prop_map(
            |(sector, pv_uuid, device_size, data_areas, metadata_areas, ext)| PvLabel {
                sector,
                pv_uuid,
                device_size,
                data_areas,
                metadata_areas,
                extension: ext.map(|(version, flags, bootloader_areas)| PvExtension {
                    version,
                    flags,
                    bootloader_areas,
                }),
            },
        )
}

fn header_strategy() -> impl Strategy<Value = MdaHeader> {
    (
        4096u64..1 << 40,
        1024u64..1 << 30,
        any::<u32>(),
        any::<u32>(),
    )
        .prop_flat_map(|(start, size, c0, c1)| {
            (
                512..size,
                1..=size - 512,
                512..size,
                1..=size - 512,
                0u32..2,
            )
                .prop_map(move |(o0, s0, o1, s1, flags)| MdaHeader {
                    start,
                    size,
                    committed: RawLocn {
                        offset: o0,
                        size: s0,
                        checksum: c0,
                        flags,
                    },
                    precommitted: RawLocn {
                        offset: o1,
                        size: s1,
                        checksum: c1,
                        flags: 0,
                    },
                })
        })
}

fn base_text() -> String {
    [
        "vg0 {",
        "id = \"XseGQb-cZp1-HaXg-UE10-5eAu-ZYvk-ia6SlK\"",
        "seqno = 6",
        "format = \"lvm2\"",
        "status = [\"RESIZEABLE\", \"READ\", \"WRITE\"]",
        "flags = []",
        "extent_size = 8192",
        "max_lv = 0",
        "max_pv = 0",
        "metadata_copies = 0",
        "physical_volumes {",
        "pv0 {",
        "id = \"qHyWJE-eM33-gWwN-6i1v-2doY-DAf8-vcqWna\"",
        "device = \"/dev/loop0\"",
        "status = [\"ALLOCATABLE\"]",
        "flags = []",
        "dev_size = 131072",
        "pe_start = 2048",
        "pe_count = 15",
        "}",
        "}",
        "logical_volumes {",
        "data {",
        "id = \"Kh4ATO-3Xsz-sn1r-Hqgc-rnKA-TL78-41wftI\"",
        "status = [\"READ\", \"WRITE\", \"VISIBLE\"]",
        "flags = []",
        "creation_time = 1796208360",
        "creation_host = \"vm\"",
        "segment_count = 1",
        "segment1 {",
        "start_extent = 0",
        "extent_count = 2",
        "type = \"striped\"",
        "stripe_count = 1",
        "stripes = [\"pv0\", 0]",
        "}",
        "}",
        "}",
        "}",
        "contents = \"Text Format Volume Group\"",
        "version = 1",
        "description = \"x\"",
        "creation_host = \"vm\"",
        "creation_time = 1796208360",
    ]
    .join("\n")
}

/// A config tree described as plain nested data, built into a [`text::Tree`] for the test.
#[derive(Debug, Clone)]
enum N {
    Val(String, V),
    Sec(String, Vec<N>),
}

#[derive(Debug, Clone)]
enum V {
    Int(i64),
    Str(String),
    Bare(String),
    Arr(Vec<V>),
}

fn build_value(b: &mut text::Builder<'_>, v: &V) -> text::Value {
    match v {
        V::Int(i) => text::Value::Int(*i),
        V::Str(s) => text::Value::Str(b.text(s)),
        V::Bare(s) => text::Value::Bare(b.text(s)),
        V::Arr(items) => {
            let items: Vec<text::Value> = items.iter().map(|x| build_value(b, x)).collect();
            b.array(items)
        }
    }
}

fn build_nodes(b: &mut text::Builder<'_>, nodes: &[N]) {
    for n in nodes {
        match n {
            N::Val(k, v) => {
                let v = build_value(b, v);
                let k = b.text(k);
                b.value(k, v);
            }
            N::Sec(k, children) => {
                b.open();
                build_nodes(b, children);
                let k = b.text(k);
                b.close(k);
            }
        }
    }
}

fn scalar() -> impl Strategy<Value = V> {
    prop_oneof![
        any::<i64>().prop_map(V::Int),
        "[ -~]{0,16}".prop_map(V::Str),
        "[a-z][a-z_]{0,8}".prop_map(V::Bare),
    ]
}

fn value() -> impl Strategy<Value = V> {
    prop_oneof![
        scalar(),
        proptest::collection::vec(scalar(), 0..5).prop_map(V::Arr)
    ]
}

fn tree_strategy() -> impl Strategy<Value = Vec<N>> {
    // Any printable key: odd ones must come back quoted.
    let key = "[ -~]{0,10}";
    let leaf = (key, value()).prop_map(|(k, v)| N::Val(k, v));
    let node = leaf.prop_recursive(4, 32, 6, move |inner| {
        prop_oneof![
            (key, value()).prop_map(|(k, v)| N::Val(k, v)),
            (key, proptest::collection::vec(inner, 0..6)).prop_map(|(k, s)| N::Sec(k, s)),
        ]
    });
    proptest::collection::vec(node, 0..8)
}

proptest! {
    #[test]
    fn label_round_trip_and_flip(l in label_strategy(), flip in 0usize..512, bit in 0u8..8) {
        let bytes = label::encode(&l).expect("fits");
        let back = label::decode(&bytes, l.sector).expect("decodes");
        prop_assert_eq!(&back, &l);
        prop_assert_eq!(label::encode(&back).expect("fits"), bytes);
        let mut buf = vec![0u8; label::LABEL_SCAN_SIZE];
        let at = l.sector as usize * 512;
        buf[at..at + 512].copy_from_slice(&bytes);
        buf[at + flip] ^= 1 << bit;
        prop_assert!(label::scan(&buf).label.is_none(), "flipped byte {} went unnoticed", flip);
    }

    #[test]
    fn mda_header_round_trip_and_flip(h in header_strategy(), flip in 0usize..512, bit in 0u8..8) {
        let bytes = mda::encode(&h);
        let back = mda::decode(&bytes, h.start, h.size).expect("decodes");
        prop_assert_eq!(&back, &h);
        let mut bad = bytes;
        bad[flip] ^= 1 << bit;
        prop_assert!(mda::decode(&bad, h.start, h.size).is_err());
    }

    #[test]
    fn text_flip_is_detected(seed in 0usize..10_000, bit in 0u8..8) {
        let mut bytes = base_text().into_bytes();
        bytes.push(0);
        let slot = RawLocn { offset: 512, size: bytes.len() as u64, checksum: crc::calc(&bytes), flags: 0 };
        prop_assert!(mda::check_text(&bytes, &slot, 0).is_ok());
        let i = seed % bytes.len();
        bytes[i] ^= 1 << bit;
        prop_assert!(mda::check_text(&bytes, &slot, 0).is_err());
    }

    #[test]
    fn generic_tree_round_trip(nodes in tree_strategy()) {
        let mut b = text::Builder::default();
        build_nodes(&mut b, &nodes);
        let tree = b.finish();
        for style in [Style::Raw, Style::File] {
            let printed = text::print_tree(&tree, style);
            let back = text::parse(&printed).expect("printed text parses");
            prop_assert_eq!(&back, &tree);
        }
    }

    #[test]
    fn model_round_trip(
        tags in proptest::collection::vec("[A-Za-z0-9._+/=!:&#-]{1,12}", 0..4),
        names in proptest::collection::hash_set("[a-z][A-Za-z0-9._+-]{0,20}", 1..6),
    ) {
        let mut vg = Vg::from_text(&base_text()).expect("base").vg;
        vg.tags = tags;
        let template = vg.lvs[0].clone();
        vg.lvs.clear();
        for (i, n) in names.iter().enumerate() {
            let mut lv = (*template).clone();
            lv.name = n.clone();
            lv.id = Uuid::random();
            lv.tags = vg.tags.clone();
            if let SegKind::Striped(s) = &mut lv.segments[0].kind {
                s.areas = vec![Area::Pv { pv: 0, pe: i as u32 * 2 }];
            }
            vg.lvs.push(std::sync::Arc::new(lv));
        }
        for style in [Style::Raw, Style::File] {
            let text = vg.to_text(style, "proptest");
            let back = Vg::from_text(&text).expect("re-parses").vg;
            prop_assert_eq!(&back, &vg);
        }
    }
}
