//! cargo-fuzz entry point: see `cyberos_fuzz::frame` for the oracle.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cyberos_fuzz::frame::run(data));
