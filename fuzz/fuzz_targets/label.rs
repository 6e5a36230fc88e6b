//! Fuzz target: lvmeta::fuzzing::label.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| lvmeta::fuzzing::label(data));
