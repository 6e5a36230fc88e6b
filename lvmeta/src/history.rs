//! Older copies of a VG's metadata still present in a metadata area's circular buffer (lvm2
//! never erases them; `pvck --dump metadata_all` shows them). Each copy starts at a 512-byte
//! boundary with the VG name and ends at a NUL, possibly wrapping back to offset 512; copies
//! partly overwritten by newer ones no longer parse and are skipped.

use crate::commit::io_err;
use crate::dev::BlockDevice;
use crate::mda::{MdaHeader, MDA_HEADER_SIZE};
use crate::model::Vg;
use crate::Error;

/// Every copy of VG `name` that still parses in the area `h` of `dev`, in area order.
pub fn copies(dev: &dyn BlockDevice, h: &MdaHeader, name: &str) -> Result<Vec<Vg>, Error> {
    // The header was validated against the pv_header, itself bounded by the device size.
    let mut area = vec![0u8; h.size as usize];
    dev.read_at(h.start, &mut area)
        .map_err(io_err(dev, h.start))?;
    Ok(find(&area, name))
}

/// The copies of VG `name` in the bytes of a whole area (header included).
pub fn find(area: &[u8], name: &str) -> Vec<Vg> {
    let start = MDA_HEADER_SIZE as usize;
    let mut out = Vec::new();
    if area.len() <= start {
        return out;
    }
    let prefix = format!("{name} {{");
    for off in (start..area.len()).step_by(MDA_HEADER_SIZE as usize) {
        if !area[off..].starts_with(prefix.as_bytes()) {
            continue;
        }
        let text = match memchr::memchr(0, &area[off..]) {
            Some(n) => area[off..off + n].to_vec(),
            None => {
                // Wrapped: the rest continues at 512.
                let Some(n) = memchr::memchr(0, &area[start..off]) else {
                    continue;
                };
                let mut t = area[off..].to_vec();
                t.extend_from_slice(&area[start..start + n]);
                t
            }
        };
        let Ok(text) = std::str::from_utf8(&text) else {
            continue;
        };
        if let Ok(imported) = Vg::from_text(text) {
            out.push(imported.vg);
        }
    }
    out
}
