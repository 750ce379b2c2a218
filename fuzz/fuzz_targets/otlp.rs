#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| strobe_fuzz::otlp(data));
