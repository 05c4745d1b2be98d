//! Empty: it exists so that the `[build-dependencies]` entry, which unifies proc-macro-side
//! features, is part of the build (see Cargo.toml).
fn main() {}
