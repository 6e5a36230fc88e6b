//! lvmlockd's sanlock layout, as pure functions over the VG metadata: the lockspace on the
//! hidden `lvmlock` LV, the GL and VG leases at 65 and 66 alignment units, LV leases at their
//! `lock_args` offsets, all mapped through `lvmlock`'s segments to a PV and a byte offset (no
//! device-mapper needed), and the value block lvmlockd keeps in the VG lease.

use crate::model::{Area, SegKind, Vg};

use super::{LockspaceSpec, ResourceSpec};

/// Prefix of lvmlockd's lockspace names.
pub const LOCKSPACE_PREFIX: &str = "lvm_";
/// The global lock's resource name (enabled).
pub const GL_NAME: &str = "GLLK";
/// The global lock's resource name in VGs other than the one that holds it.
pub const GL_DISABLED: &str = "_GLLK_disabled";
/// The VG lock's resource name.
pub const VG_NAME: &str = "VGLK";
/// The name lvmlockd writes into free LV lease slots.
pub const UNUSED_NAME: &str = "#unused";
/// Alignment units before the GL lease.
const GL_SLOT: u64 = 65;
/// Alignment units before the VG lease.
const VG_SLOT: u64 = 66;
/// Alignment units before the first LV lease.
pub const FIRST_LV_SLOT: u64 = 67;
/// Lease alignment of a VG on 512-byte sectors (lvmlockd's default), in bytes.
pub const LEASE_ALIGN: u64 = 1 << 20;

/// Sector size and lease alignment of a lockspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// 512 or 4096.
    pub sector: u32,
    /// 1 MiB with 512-byte sectors, 8 MiB with 4096.
    pub align: u64,
}

impl Geometry {
    /// lvmlockd's choice for a device with `sector`-byte sectors.
    pub fn for_sector(sector: u32) -> Self {
        if sector > 512 {
            Self {
                sector: 4096,
                align: 8 << 20,
            }
        } else {
            Self {
                sector: 512,
                align: 1 << 20,
            }
        }
    }
}

/// The value block of the VG (and GL) lease: `u16 version 0x0101, u16 flags, u32 r_version`,
/// little-endian; lvmlockd stores the VG's seqno in `r_version`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Lvb {
    /// 0x0101 when written by lvmlockd or lvmeta; 0 when never written.
    pub version: u16,
    /// Bit 0: the VG was removed.
    pub flags: u16,
    /// The VG's seqno.
    pub r_version: u32,
}

/// lvmlockd's value block version.
pub const LVB_VERSION: u16 = 0x0101;
/// `flags` bit: the VG was removed.
pub const LVB_REMOVED: u16 = 1;

impl Lvb {
    /// The value block announcing `seqno`.
    pub fn for_seqno(seqno: u32) -> Self {
        Self {
            version: LVB_VERSION,
            flags: 0,
            r_version: seqno,
        }
    }

    /// The 8 bytes sanlock stores.
    pub fn encode(&self) -> [u8; 8] {
        let mut b = [0u8; 8];
        b[0..2].copy_from_slice(&self.version.to_le_bytes());
        b[2..4].copy_from_slice(&self.flags.to_le_bytes());
        b[4..8].copy_from_slice(&self.r_version.to_le_bytes());
        b
    }

    /// Reads the 8 bytes sanlock returns.
    pub fn decode(b: &[u8; 8]) -> Self {
        Self {
            version: u16::from_le_bytes([b[0], b[1]]),
            flags: u16::from_le_bytes([b[2], b[3]]),
            r_version: u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
        }
    }
}

/// lvmlockd's lockspace name for VG `vg`.
pub fn lockspace_name(vg: &str) -> String {
    format!("{LOCKSPACE_PREFIX}{vg}")
}

/// Where byte `offset` of LV `lv` lies: the PV index and the absolute byte offset on it
/// (linear and striped-with-one-stripe segments; `None` past the end or on other layouts).
pub fn lv_byte(vg: &Vg, lv: &str, offset: u64) -> Option<(usize, u64)> {
    let lv = vg.lv(lv)?;
    let ext = vg.extent_bytes();
    let le = offset / ext;
    let seg = lv.segments.iter().find(|s| {
        u64::from(s.start_extent) <= le
            && le < u64::from(s.start_extent) + u64::from(s.extent_count)
    })?;
    let SegKind::Striped(st) = &seg.kind else {
        return None;
    };
    let [Area::Pv { pv, pe }] = st.areas.as_slice() else {
        return None;
    };
    let pv_data = vg.pvs.get(*pv)?.data_start().0;
    let within = offset - u64::from(seg.start_extent) * ext;
    Some((*pv, pv_data + u64::from(*pe) * ext + within))
}

/// The lockspace of a shared VG; `paths[i]` is the device of the VG's PV `i`.
pub fn lockspace(
    vg: &Vg,
    paths: &[Option<String>],
    host_id: u64,
    geometry: Geometry,
) -> Option<LockspaceSpec> {
    let (pv, offset) = lv_byte(vg, "lvmlock", 0)?;
    Some(LockspaceSpec {
        name: lockspace_name(&vg.name),
        host_id,
        path: paths.get(pv)?.clone()?,
        offset,
        geometry,
    })
}

/// The lease named `name` at byte `lv_offset` of `lvmlock`.
pub fn lease_at(
    vg: &Vg,
    paths: &[Option<String>],
    name: &str,
    lv_offset: u64,
    geometry: Geometry,
) -> Option<ResourceSpec> {
    let (pv, offset) = lv_byte(vg, "lvmlock", lv_offset)?;
    Some(ResourceSpec {
        lockspace: lockspace_name(&vg.name),
        name: name.to_owned(),
        path: paths.get(pv)?.clone()?,
        offset,
        geometry,
    })
}

/// The VG lease.
pub fn vg_lease(vg: &Vg, paths: &[Option<String>], g: Geometry) -> Option<ResourceSpec> {
    lease_at(vg, paths, VG_NAME, VG_SLOT * g.align, g)
}

/// The global lease, under `name` (`GLLK`, or `_GLLK_disabled` where another VG holds it).
pub fn gl_lease(
    vg: &Vg,
    paths: &[Option<String>],
    name: &str,
    g: Geometry,
) -> Option<ResourceSpec> {
    lease_at(vg, paths, name, GL_SLOT * g.align, g)
}

/// The byte offset in `lvmlock` of the lease an LV's `lock_args` names (`1.0.0:<offset>`,
/// lvmlockd's sanlock format).
pub fn lease_offset(lock_args: &str) -> Option<u64> {
    lock_args.strip_prefix("1.0.0:")?.parse().ok()
}

/// The lease of LV `lv` (named by its dashed uuid) at its `lock_args` offset.
pub fn lv_lease(vg: &Vg, paths: &[Option<String>], lv: &str, g: Geometry) -> Option<ResourceSpec> {
    let l = vg.lv(lv)?;
    let offset = lease_offset(l.lock_args.as_deref()?)?;
    lease_at(vg, paths, &l.id.to_string(), offset, g)
}

/// Every LV lease slot of `lvmlock`, free or not (what `vgcreate --shared` fills with
/// `#unused`).
pub fn lv_slots(vg: &Vg, paths: &[Option<String>], g: Geometry) -> Vec<ResourceSpec> {
    let size = vg.bytes_of(vg.lv("lvmlock").map_or(0, |l| l.extents())).0;
    (FIRST_LV_SLOT..)
        .map(|k| k * g.align)
        .take_while(|o| o + g.align <= size)
        .filter_map(|o| lease_at(vg, paths, UNUSED_NAME, o, g))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::edit::{self, NewPv, SharedVg, Stamp, VgSpec};

    fn shared_vg() -> Vg {
        let pv = NewPv {
            id: crate::uuid::Uuid::random(),
            device: "/dev/a".into(),
            dev_size: crate::units::Bytes(1 << 30),
            pe_start: crate::units::Bytes(1 << 20),
            tail: crate::units::Bytes(0),
            bootloader: None,
        };
        let spec = VgSpec {
            shared: Some(SharedVg {
                lock_lv_size: crate::units::Bytes(256 << 20),
            }),
            ..crate::testing::vg_spec()
        };
        let stamp = Stamp {
            time: 1,
            host: "h".into(),
        };
        let vg = edit::vg::create(&spec, &[pv], &stamp).expect("vg");
        edit::lv::create(
            vg,
            &edit::EditCtx::default(),
            &edit::LvSpec::linear("a", 1, stamp),
        )
        .expect("lv")
        .0
    }

    #[test]
    fn lvmlockd_offsets() {
        let vg = shared_vg();
        let paths = vec![Some("/dev/a".to_owned())];
        let g = Geometry::for_sector(512);
        let ls = lockspace(&vg, &paths, 3, g).expect("lockspace");
        assert_eq!((ls.name.as_str(), ls.offset), ("lvm_vg", 1 << 20));
        // Measured with lvmlockd 2.03.16: VG lease at 66 MiB of lvmlock, first LV
        // lease at 67 MiB ("1.0.0:70254592").
        assert_eq!(
            vg_lease(&vg, &paths, g).expect("vg").offset,
            (1 << 20) + (66 << 20)
        );
        let lv = lv_lease(&vg, &paths, "a", g).expect("lv");
        assert_eq!(lv.offset, (1 << 20) + 70_254_592);
        assert_eq!(lv.name, vg.lv("a").expect("a").id.to_string());
        assert_eq!(lv_slots(&vg, &paths, g).len(), 189);
        assert_eq!(Geometry::for_sector(4096).align, 8 << 20);
    }

    #[test]
    fn lvb_bytes() {
        let b = Lvb::for_seqno(0x0102_0304);
        assert_eq!(b.encode(), [0x01, 0x01, 0, 0, 4, 3, 2, 1]);
        assert_eq!(Lvb::decode(&b.encode()), b);
    }
}
