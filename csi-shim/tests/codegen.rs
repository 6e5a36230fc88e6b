//! The generated CSI code in `src/gen/csi.v1.rs` must be what protox + tonic-build make of the
//! pinned `proto/csi.proto` today. Regenerate with `CSI_REGEN=1 cargo test -p csi-shim --test
//! codegen`.

use std::path::Path;

#[test]
fn generated_code_matches_the_pinned_proto() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let fds = protox::compile(["csi.proto"], [root.join("proto")]).expect("csi.proto compiles");
    let out = tempfile::tempdir().expect("temp dir");
    tonic_build::configure()
        .build_client(true)
        .build_server(true)
        .out_dir(out.path())
        .compile_fds(fds)
        .expect("tonic-build generates");
    let fresh = std::fs::read_to_string(out.path().join("csi.v1.rs")).expect("generated file");
    let committed_path = root.join("src/gen/csi.v1.rs");
    if std::env::var_os("CSI_REGEN").is_some() {
        std::fs::write(&committed_path, &fresh).expect("write generated code");
    }
    let committed = std::fs::read_to_string(&committed_path).unwrap_or_default();
    assert!(
        committed == fresh,
        "src/gen/csi.v1.rs is out of date with proto/csi.proto: run CSI_REGEN=1 cargo test -p csi-shim --test codegen"
    );
}
