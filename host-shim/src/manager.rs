//! The backend's engine-plugin manager: the per-file load sequence of plugin-abi.md §8.2 in its
//! order, with every failure isolated to its file and logged in the backend's words, followed by
//! per-engine admission (name/hash rule, first plugin keeps a contested id).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use crate::abi::{PLUGIN_TYPE_ENGINE, symbols};
use crate::api_version::ApiVersion;
use crate::engine_id::{engine_name_to_id, hex_id};
use crate::host_error::HostError;
use crate::log::{Log, plugin_log_callback};
use crate::plugin::{OpenedLibrary, Plugin};

/// One engine a plugin declared, and whether the host admitted it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Engine {
    pub id: i64,
    /// The name from `GetEngineName`, or the hex rendering of the id.
    pub name: String,
    /// False when dropped at load (name/hash mismatch, `GetEngineName` failure, or an id an
    /// earlier plugin already provides).
    pub admitted: bool,
}

/// A plugin that passed load steps 2–9.
pub struct LoadedPlugin {
    pub plugin: Plugin,
    pub name: String,
    pub version: String,
    /// The string `GetApiVersion` returned; `None` when the symbol is absent.
    pub api_version_text: Option<String>,
    pub api_version: ApiVersion,
    pub engines: Vec<Engine>,
}

impl LoadedPlugin {
    pub fn admitted_engines(&self) -> impl Iterator<Item = &Engine> {
        self.engines.iter().filter(|e| e.admitted)
    }
}

/// A file that failed the load sequence, with the wrapped message the backend logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub path: PathBuf,
    pub reason: String,
}

#[derive(Default)]
pub struct PluginManager {
    pub plugins: Vec<LoadedPlugin>,
    pub rejected: Vec<Rejection>,
    pub log: Log,
    loaded_paths: HashSet<PathBuf>,
}

impl PluginManager {
    pub fn new() -> PluginManager {
        PluginManager::default()
    }

    /// Loads every file in order; a failure never stops the others.
    pub fn load_files<I>(&mut self, files: I)
    where
        I: IntoIterator<Item = PathBuf>,
    {
        for file in files {
            self.load_file(&file);
        }
    }

    /// Discovery plus loading from one search path (a directory or a file).
    pub fn load_search_path(&mut self, search_path: &Path) {
        let files = crate::discovery::discover_plugin_files(search_path, &mut self.log);
        self.load_files(files);
    }

    pub fn load_file(&mut self, path: &Path) {
        self.log.info(format!(
            "Attempting to load plugin from [{}]",
            path.display()
        ));
        let key = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
        if self.loaded_paths.contains(&key) {
            return;
        }
        match self.load_steps(path) {
            Ok(mut loaded) => {
                self.log
                    .info(format!("Plugin loaded successfully: {}", path.display()));
                self.log.info(format!(
                    "Plugin info: name={}, version={}, type=HIPDNN_PLUGIN_TYPE_ENGINE({})",
                    loaded.name, loaded.version, PLUGIN_TYPE_ENGINE
                ));
                self.admit_engines(&mut loaded);
                self.loaded_paths.insert(key);
                self.plugins.push(loaded);
            }
            Err(e) => {
                let reason = format!("Error loading plugin from [{}]: {e}", path.display());
                self.log.error(reason.clone());
                self.rejected.push(Rejection {
                    path: path.to_path_buf(),
                    reason,
                });
            }
        }
        self.log.absorb_plugin_messages();
    }

    /// Steps 2 and 4–9.
    fn load_steps(&mut self, path: &Path) -> Result<LoadedPlugin, HostError> {
        let (opened, missing) = OpenedLibrary::open(path)?;
        for symbol in missing.0 {
            self.log.info(match symbol {
                symbols::GET_API_VERSION => "Plugin does not support returning plugin API version",
                symbols::SET_LOGGING_CALLBACK => "Plugin does not support logging callback",
                _ => "Plugin does not support log level synchronization",
            });
        }
        let base = *opened.base();
        let calls = crate::plugin::BaseCalls::from_api(&base);

        let plugin_type = calls.plugin_type()?;
        if plugin_type != PLUGIN_TYPE_ENGINE {
            return Err(HostError::WrongPluginType(plugin_type));
        }
        let plugin = opened.resolve_engine()?;

        let name = calls.name()?;
        let version = calls.version()?;
        let plugin_type = calls.plugin_type()?;
        if plugin_type != PLUGIN_TYPE_ENGINE {
            return Err(HostError::PluginTypeMismatch(plugin_type));
        }

        calls.set_logging_callback(plugin_log_callback);

        let (api_version_text, api_version) = match calls.api_version() {
            None => (None, ApiVersion::baseline()),
            Some(text) => {
                let text = text?;
                let parsed =
                    ApiVersion::parse(&text).ok_or_else(|| HostError::UnparseableApiVersion {
                        name: name.clone(),
                        version: text.clone(),
                    })?;
                (Some(text), parsed)
            }
        };
        match api_version.major {
            1 => {}
            0 => self.log.info(format!(
                "Accepting legacy major-0 plugin '{name}' (apiVersion={api_version}) under transitional shim; \
                 it ranks below the 1.0.0 baseline, so every graph skips it"
            )),
            major => {
                return Err(HostError::MajorVersionMismatch {
                    name,
                    major,
                    expected: ApiVersion::host().to_string(),
                });
            }
        }

        let count = plugin.engine_count()?;
        if count == 0 {
            return Err(HostError::NoEngines);
        }
        let mut ids = plugin.engine_ids(count)?;
        ids.sort_unstable();
        if let Some(pair) = ids.windows(2).find(|w| w[0] == w[1]) {
            return Err(HostError::DuplicateEngineIds(hex_id(pair[0])));
        }

        Ok(LoadedPlugin {
            plugin,
            name,
            version,
            api_version_text,
            api_version,
            engines: ids
                .into_iter()
                .map(|id| Engine {
                    id,
                    name: hex_id(id),
                    admitted: true,
                })
                .collect(),
        })
    }

    /// Step 11: `GetEngineName` and its hash rule, then cross-plugin uniqueness.
    fn admit_engines(&mut self, loaded: &mut LoadedPlugin) {
        let holders: HashMap<i64, String> = self
            .plugins
            .iter()
            .flat_map(|p| p.admitted_engines().map(|e| (e.id, p.name.clone())))
            .collect();
        for engine in &mut loaded.engines {
            match loaded.plugin.engine_name(engine.id) {
                None | Some(Ok(None)) => {}
                Some(Ok(Some(name))) => {
                    let hashed = engine_name_to_id(&name);
                    if hashed != engine.id {
                        let holder = holders.get(&hashed).map_or_else(
                            || "no loaded plugin".to_owned(),
                            |p| format!("plugin '{p}'"),
                        );
                        self.log.error(format!(
                            "Plugin '{}' reports engine name '{name}' for engine {}, but that name is the name of engine {} ({holder}). \
                             An engine ID must equal the hash of its name; dropping the engine.",
                            loaded.name,
                            hex_id(engine.id),
                            hex_id(hashed)
                        ));
                        engine.admitted = false;
                        continue;
                    }
                    engine.name = name;
                }
                Some(Err(e)) => {
                    self.log
                        .error(format!("{e}; dropping engine {}", hex_id(engine.id)));
                    engine.admitted = false;
                    continue;
                }
            }
            if let Some(holder) = holders.get(&engine.id) {
                self.log.error(format!(
                    "Plugin '{}' declares engine {}, which plugin '{holder}' already provides. \
                     The first plugin to declare an engine keeps it; dropping the duplicate.",
                    loaded.name,
                    hex_id(engine.id)
                ));
                engine.admitted = false;
            }
        }
    }

    /// The plugin providing `engine_id`, if admitted.
    pub fn engine_owner(&self, engine_id: i64) -> Option<(&LoadedPlugin, &Engine)> {
        self.plugins.iter().find_map(|p| {
            p.admitted_engines()
                .find(|e| e.id == engine_id)
                .map(|e| (p, e))
        })
    }
}
