//! lvm2's device-mapper names of LVs and their layers. Pure.

/// lvm2's device-mapper name of LV `lv` of VG `vg`: both names with every `-` doubled,
/// joined by one `-` (so the name splits back unambiguously).
pub fn dm_name(vg: &str, lv: &str) -> String {
    format!("{}-{}", vg.replace('-', "--"), lv.replace('-', "--"))
}

/// lvm2's device-mapper name of layer `layer` of an LV (`tpool` of a thin pool):
/// [`dm_name`] then `-` and the layer.
pub fn dm_layer_name(vg: &str, lv: &str, layer: &str) -> String {
    format!("{}-{}", dm_name(vg, lv), layer.replace('-', "--"))
}
