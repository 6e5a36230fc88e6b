//! Fuzz target: lvmeta::fuzzing::blank.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| lvmeta::fuzzing::blank(data));
