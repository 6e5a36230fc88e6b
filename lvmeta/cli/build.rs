//! Links the `lvmeta` command as a position-dependent executable: README, "Why the `lvmeta`
//! command is linked without PIE". `LVMETA_CLI_PIE=1` keeps the default PIE.

fn main() {
    println!("cargo:rerun-if-env-changed=LVMETA_CLI_PIE");
    if std::env::var_os("LVMETA_CLI_PIE").is_none() {
        // The objects stay position-independent; the linker resolves their addresses once,
        // so the loader has no relocations to apply at each start.
        println!("cargo:rustc-link-arg-bin=lvmeta=-no-pie");
    }
}
