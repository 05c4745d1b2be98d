//! `hipdnn-shim plugins`: what hipDNN would load from the search path, and why anything was not.

use std::path::PathBuf;

use hipdnn_shim::abi::symbols;
use hipdnn_shim::engine_id::hex_id;

use crate::host;

/// Prints where the shim looked and what it loaded; `false` when no plugin loaded, after the
/// report of every place searched and what to do.
pub fn run(plugin_dir: Option<PathBuf>) -> bool {
    let (search, mut manager) = host::load_plugins(plugin_dir);
    println!("{}", search.listing());
    if let Some(place) = search.chosen.map(|c| &search.places[c]) {
        println!("search path: {}", place.path.display());
    }
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
    host::flush_log(&mut manager.log);
    if manager.plugins.is_empty() {
        // The places and rejections are printed above; the error adds what to do.
        eprintln!("hipdnn-shim: no engine plugin loaded{}", search.advice());
        return false;
    }
    true
}
