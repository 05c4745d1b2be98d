//! Valid graphs, mutated field by field, then executed on the host engine with exact-size
//! buffers behind canaries (see `ragged_fuzz::mutate`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    ragged_fuzz::mutate::run(data);
});
