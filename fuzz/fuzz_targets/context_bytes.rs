//! The override and serialized-context entry points, from raw and near-valid bytes (see
//! `ragged_fuzz::context`).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    ragged_fuzz::context::run(data);
});
