//! No code. Every workspace member depends on this crate so that a per-crate command
//! (`cargo test -p ragged-plugin`) resolves the same dependency features as `cargo test
//! --workspace` and reuses its build; `Cargo.toml` lists the features and says why.
