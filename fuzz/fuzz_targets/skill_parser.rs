//! cargo-fuzz entry point: see `cyberos_fuzz::skill_parser` for the oracle.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| cyberos_fuzz::skill_parser::run(data));
