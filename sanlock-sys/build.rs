//! Finds libsanlock_client (and, with the `direct` feature, libsanlock) through pkg-config.

fn main() {
    let probe = |lib: &str, metadata: bool| match pkg_config::Config::new()
        .cargo_metadata(metadata)
        .probe(lib)
    {
        Ok(found) => found,
        Err(e) => panic!(
            "sanlock-sys: pkg-config cannot find {lib}: {e}\n\
             Install the sanlock development files and pkg-config \
             (Debian: apt-get install libsanlock-dev pkg-config)."
        ),
    };
    probe("libsanlock_client", true);
    if std::env::var_os("CARGO_FEATURE_DIRECT").is_some() {
        // libsanlock.pc also names libaio, libblkid, ... for static links; the shared library
        // carries those dependencies itself, so only libsanlock is linked.
        let found = probe("libsanlock", false);
        for dir in &found.link_paths {
            println!("cargo:rustc-link-search=native={}", dir.display());
        }
        println!("cargo:rustc-link-lib=sanlock");
    }
}
