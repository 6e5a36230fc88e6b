//! Fuzz target: lvmeta::fuzzing::device.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| lvmeta::fuzzing::device(data));
