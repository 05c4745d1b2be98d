//! Raw bytes into every entry point that takes a graph: whatever the bytes, the answer is a
//! status with a message, never INTERNAL_ERROR, a panic or a memory error.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    ragged_fuzz::every_graph_entry_point(data);
});
