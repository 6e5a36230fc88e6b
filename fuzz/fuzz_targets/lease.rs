//! Fuzz target: lvmeta::fuzzing::lease.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| lvmeta::fuzzing::lease(data));
