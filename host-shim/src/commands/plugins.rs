//! `hipdnn-shim plugins`: what hipDNN would load from the search path, and why anything was not.

use std::path::PathBuf;

use hipdnn_shim::abi::symbols;
use hipdnn_shim::engine_id::hex_id;

use crate::host;

pub fn run(plugin_dir: Option<PathBuf>) -> bool {
    let (path, mut manager) = host::load_plugins(plugin_dir);
    println!("search path: {}", path.display());
    for p in &manager.plugins {
        println!("plugin {} ({})", p.name, p.plugin.path().display());
        println!("  version: {}", p.version);
        match &p.api_version_text {
            Some(text) => println!("  API version: \"{text}\" (parsed {})", p.api_version),
            None => println!(
                "  API version: {} (no {} symbol)",
                p.api_version,
                symbols::GET_API_VERSION
            ),
        }
        println!(
            "  override entry point: {}",
            if p.plugin.engine().has_execute_with_overrides {
                "exported"
            } else {
                "absent (override-enabled graphs are skipped)"
            }
        );
        for e in &p.engines {
            println!(
                "  engine {} {}{}",
                hex_id(e.id),
                e.name,
                if e.admitted {
                    ""
                } else {
                    "  [dropped at load]"
                }
            );
        }
    }
    for r in &manager.rejected {
        println!(
            "rejected {}\n  {}",
            r.path.display(),
            r.reason.replace('\n', "\n  ")
        );
    }
    if manager.plugins.is_empty() && manager.rejected.is_empty() {
        println!("no plugin files found");
    }
    host::flush_log(&mut manager.log);
    !manager.plugins.is_empty()
}
