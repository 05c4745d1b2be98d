//! Engine admission at load (plugin-abi.md §5.8, §8.2 step 11) with staged fixture copies: the
//! first plugin keeps a contested engine id, and a name that does not hash to its id costs the
//! engine its place; neither affects the rest of the load.

mod common;

use std::path::{Path, PathBuf};

use hipdnn_shim::manager::PluginManager;
use ragged_conformance::suites::gating::FixtureArtifacts;

fn stage(dir: &Path, file: &str, engine_name: Option<&str>) -> PathBuf {
    let fixtures =
        FixtureArtifacts::locate(&common::profile_dir()).unwrap_or_else(|e| panic!("{e}"));
    let target = dir.join(file);
    std::fs::copy(&fixtures.main, &target).unwrap_or_else(|e| panic!("{e}"));
    if let Some(name) = engine_name {
        std::fs::write(dir.join(format!("{file}.engine-name")), name)
            .unwrap_or_else(|e| panic!("{e}"));
    }
    target
}

fn errors(manager: &PluginManager) -> Vec<String> {
    manager
        .log
        .records()
        .iter()
        .filter(|r| r.severity == hipdnn_shim::log::Severity::Error)
        .map(|r| r.message.clone())
        .collect()
}

#[test]
fn the_first_plugin_to_declare_an_engine_keeps_it() {
    let dir = common::scratch("admission-duplicate");
    stage(&dir, "liba.so", None);
    stage(&dir, "libb.so", None);
    let mut manager = PluginManager::new();
    manager.load_search_path(&dir);
    assert_eq!(manager.plugins.len(), 2, "both plugins load");
    assert!(manager.plugins[0].engines[0].admitted);
    assert!(!manager.plugins[1].engines[0].admitted);
    let errors = errors(&manager);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(
        errors[0],
        "Plugin 'fixture:libb' declares engine 0x74a2da6f321750cf, which plugin 'fixture:liba' \
         already provides. The first plugin to declare an engine keeps it; dropping the duplicate."
    );
}

#[test]
fn a_name_that_does_not_hash_to_its_id_drops_the_engine() {
    let dir = common::scratch("admission-hash");
    let path = stage(&dir, "libliar.so", Some("RAGGED_SDPA_HOST_REFERENCE"));
    let mut manager = PluginManager::new();
    manager.load_file(&path);
    assert_eq!(manager.plugins.len(), 1, "the plugin itself still loads");
    assert!(!manager.plugins[0].engines[0].admitted);
    let errors = errors(&manager);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].starts_with("Plugin 'fixture:libliar' reports engine name 'RAGGED_SDPA_HOST_REFERENCE' for engine 0x"),
        "{errors:?}"
    );
    assert!(
        errors[0]
            .contains("but that name is the name of engine 0x71d68058b1a133dd (no loaded plugin)"),
        "{errors:?}"
    );
}
