//! Fuzz target: lvmeta::fuzzing::words.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| lvmeta::fuzzing::words(data));
