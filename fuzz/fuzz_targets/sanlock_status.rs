//! Fuzz target: lvmeta::fuzzing::sanlock_status.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| lvmeta::fuzzing::sanlock_status(data));
