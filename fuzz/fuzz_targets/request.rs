//! Fuzz target: csi_shim::fuzzing::request.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| csi_shim::fuzzing::request(data));
