//! Fuzz target: csi_shim::fuzzing::nbd (an NBD client's bytes against the server).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| csi_shim::fuzzing::nbd(data));
