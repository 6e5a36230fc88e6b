//! Fuzz target: lvmeta::fuzzing::mda.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| lvmeta::fuzzing::mda(data));
