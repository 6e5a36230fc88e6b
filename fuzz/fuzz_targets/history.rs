//! Fuzz target: lvmeta::fuzzing::history.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| lvmeta::fuzzing::history(data));
