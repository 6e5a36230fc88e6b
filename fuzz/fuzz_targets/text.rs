//! Fuzz target: lvmeta::fuzzing::text.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| lvmeta::fuzzing::text(data));
