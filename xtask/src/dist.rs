//! `cargo xtask dist` (not built yet).

use std::path::Path;

pub(crate) fn run(_root: &Path, _args: &[String]) -> Result<(), String> {
    Err("not implemented yet".into())
}
