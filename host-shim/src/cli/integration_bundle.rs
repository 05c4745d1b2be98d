//! Upstream hipDNN's integration-test bundle tree (`dnn-providers/integration-tests/`, its
//! `docs/file-formats.md`): discovery of single-graph bundles and template sweeps, `${case.*}`
//! expansion, tensor patches and the metadata sidecar, each case turned into a graph plus the
//! inputs it pins.
//!
//! - Single-graph bundle: any `NAME.json` except `graph.template.json`, `sweep.json` and
//!   companions whose last dotted segment is `meta` or `support`, outside sweep roots; its
//!   metadata is `NAME.meta.json` beside it.
//! - Sweep: a directory holding both `graph.template.json` and `sweep.json`; one case per
//!   `cases[]` entry, metadata inline.
//!
//! Metadata must be an object with `format_version` 1 (upstream's rule); what the shim reads from
//! it is in `bundle_inputs`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

/// A case's `values.tensors[]` entries: (uid, the entry).
type PerTensor = Vec<(i64, Map<String, Value>)>;

const TEMPLATE: &str = "graph.template.json";
const SWEEP: &str = "sweep.json";

/// One registered case: its name (path below the root, `#id` for sweep cases) and what loading
/// it gave.
#[derive(Debug)]
pub struct Case {
    pub name: String,
    pub loaded: Result<Loaded, String>,
}

/// A case ready to run: the expanded graph document and its metadata object.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub graph: Value,
    pub metadata: Map<String, Value>,
    /// `Unused sweep value` notes, as upstream warns.
    pub warnings: Vec<String>,
}

/// Every case under `root`, in path order.
pub fn discover(root: &Path) -> Result<Vec<Case>, String> {
    let mut cases = Vec::new();
    walk(root, root, &mut cases)?;
    Ok(cases)
}

fn name_of(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .to_string_lossy()
        .replace('\\', "/")
}

fn sorted_entries(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let mut entries = std::fs::read_dir(dir)
        .map_err(|e| format!("reading directory '{}': {e}", dir.display()))?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("reading directory '{}': {e}", dir.display()))?;
    entries.sort();
    Ok(entries)
}

fn walk(root: &Path, dir: &Path, cases: &mut Vec<Case>) -> Result<(), String> {
    if dir.join(TEMPLATE).is_file() && dir.join(SWEEP).is_file() {
        sweep_cases(&name_of(root, dir), dir, cases);
        return Ok(());
    }
    for path in sorted_entries(dir)? {
        if path.is_dir() {
            walk(root, &path, cases)?;
        } else if is_single_graph(&path) {
            let name = name_of(root, &path.with_extension(""));
            cases.push(Case {
                name,
                loaded: load_single(&path),
            });
        }
    }
    Ok(())
}

fn is_single_graph(path: &Path) -> bool {
    let Some(file) = path.file_name().and_then(|f| f.to_str()) else {
        return false;
    };
    let Some(stem) = file.strip_suffix(".json") else {
        return false;
    };
    let last_segment = stem.rsplit('.').next().unwrap_or(stem);
    file != TEMPLATE && file != SWEEP && last_segment != "meta" && last_segment != "support"
}

fn read_json(path: &Path) -> Result<Value, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("reading '{}': {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("'{}' is not JSON: {e}", path.display()))
}

fn metadata(value: &Value, whence: &str) -> Result<Map<String, Value>, String> {
    let Value::Object(map) = value else {
        return Err(format!("{whence} is not a JSON object"));
    };
    match map.get("format_version").and_then(Value::as_i64) {
        Some(1) => Ok(map.clone()),
        Some(v) => Err(format!("{whence} has format_version {v}; 1 is supported")),
        None => Err(format!("{whence} lacks an integer format_version")),
    }
}

fn load_single(path: &Path) -> Result<Loaded, String> {
    let graph = read_json(path)?;
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let meta_path = path.with_file_name(format!("{stem}.meta.json"));
    if !meta_path.is_file() {
        return Err(format!("no metadata sidecar '{}'", meta_path.display()));
    }
    let metadata = metadata(&read_json(&meta_path)?, &meta_path.display().to_string())?;
    Ok(Loaded {
        graph,
        metadata,
        warnings: Vec::new(),
    })
}

/// A sweep whose files cannot be read is one failed case named after the sweep.
fn sweep_cases(name: &str, dir: &Path, cases: &mut Vec<Case>) {
    let parsed = read_json(&dir.join(TEMPLATE)).and_then(|t| Ok((t, read_json(&dir.join(SWEEP))?)));
    let (template, sweep) = match parsed {
        Ok(p) => p,
        Err(e) => {
            cases.push(Case {
                name: name.to_owned(),
                loaded: Err(e),
            });
            return;
        }
    };
    let entries = match sweep.get("cases") {
        Some(Value::Array(entries)) => entries,
        _ => {
            cases.push(Case {
                name: name.to_owned(),
                loaded: Err(format!("{name}/{SWEEP} has no cases array")),
            });
            return;
        }
    };
    let mut seen = BTreeSet::new();
    for (index, entry) in entries.iter().enumerate() {
        let id = entry.get("id").and_then(Value::as_str).unwrap_or_default();
        let case_name = if id.is_empty() {
            format!("{name}#{index}")
        } else {
            format!("{name}#{id}")
        };
        let loaded = if id.is_empty() {
            Err(format!("cases[{index}] has no non-empty string id"))
        } else if !seen.insert(id.to_owned()) {
            Err(format!("case id '{id}' appears twice"))
        } else {
            expand_case(&template, entry)
        };
        cases.push(Case {
            name: case_name,
            loaded,
        });
    }
}

fn expand_case(template: &Value, entry: &Value) -> Result<Loaded, String> {
    let metadata = metadata(
        entry.get("metadata").unwrap_or(&Value::Null),
        "the case's metadata",
    )?;
    let empty = Map::new();
    let values = match entry.get("values") {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(v)) => v,
        Some(_) => return Err("values is not an object".into()),
    };
    let per_tensor = per_tensor_values(template, values)?;
    let mut used = BTreeSet::new();
    let mut graph = substitute(template, values, &per_tensor, None, &mut used)?;
    if let Some(patches) = entry.get("tensor_patches") {
        apply_patches(&mut graph, patches)?;
    }
    let warnings = leaf_paths(values)
        .into_iter()
        .filter(|leaf| {
            !used
                .iter()
                .any(|u| leaf == u || leaf.starts_with(&format!("{u}.")))
        })
        .map(|leaf| format!("Unused sweep value '{leaf}'"))
        .collect();
    Ok(Loaded {
        graph,
        metadata,
        warnings,
    })
}

/// `values.tensors[]` by uid; each uid must name a template tensor, once.
fn per_tensor_values(template: &Value, values: &Map<String, Value>) -> Result<PerTensor, String> {
    let template_uids: Vec<i64> = template
        .get("tensors")
        .and_then(Value::as_array)
        .map(|ts| {
            ts.iter()
                .filter_map(|t| t.get("uid").and_then(Value::as_i64))
                .collect()
        })
        .unwrap_or_default();
    let mut out = PerTensor::new();
    let Some(entries) = values.get("tensors") else {
        return Ok(out);
    };
    let Value::Array(entries) = entries else {
        return Err("values.tensors is not an array".into());
    };
    for (i, e) in entries.iter().enumerate() {
        let (Some(uid), Value::Object(map)) = (e.get("uid").and_then(Value::as_i64), e) else {
            return Err(format!(
                "values.tensors[{i}] is not an object with an integer uid"
            ));
        };
        if !template_uids.contains(&uid) {
            return Err(format!(
                "values.tensors[{i}]: uid {uid} is not a template tensor"
            ));
        }
        if out.iter().any(|(u, _)| *u == uid) {
            return Err(format!("values.tensors[{i}]: uid {uid} appears twice"));
        }
        out.push((uid, map.clone()));
    }
    Ok(out)
}

fn lookup<'v>(values: &'v Map<String, Value>, path: &str) -> Option<&'v Value> {
    let mut parts = path.split('.');
    let mut current = values.get(parts.next()?)?;
    for part in parts {
        current = current.as_object()?.get(part)?;
    }
    Some(current)
}

/// Per-tensor names that must not fall back to the case-wide values (upstream's rule).
const TENSOR_ONLY: [&str; 3] = ["dims", "strides", "data_type"];

/// Replaces every string value of exactly the form `${case.PATH}`; inside an object with an
/// integer `uid` the tensor's own entry is looked up first.
fn substitute(
    v: &Value,
    values: &Map<String, Value>,
    per_tensor: &[(i64, Map<String, Value>)],
    tensor: Option<i64>,
    used: &mut BTreeSet<String>,
) -> Result<Value, String> {
    match v {
        Value::String(s) => {
            let Some(path) = s.strip_prefix("${case.").and_then(|p| p.strip_suffix('}')) else {
                return Ok(v.clone());
            };
            if let Some(uid) = tensor {
                let own = per_tensor.iter().find(|(u, _)| *u == uid).map(|(_, m)| m);
                if let Some(found) = own.and_then(|m| lookup(m, path)) {
                    used.insert(format!("tensors.{uid}.{path}"));
                    return Ok(found.clone());
                }
                if TENSOR_ONLY.contains(&path) {
                    return Err(format!(
                        "placeholder {s} of tensor uid {uid} must come from its values.tensors entry"
                    ));
                }
            }
            let found =
                lookup(values, path).ok_or_else(|| format!("placeholder {s} has no value"))?;
            used.insert(path.to_owned());
            Ok(found.clone())
        }
        Value::Array(items) => items
            .iter()
            .map(|i| substitute(i, values, per_tensor, tensor, used))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array),
        Value::Object(map) => {
            let scope = map.get("uid").and_then(Value::as_i64).or(tensor);
            map.iter()
                .map(|(k, x)| Ok((k.clone(), substitute(x, values, per_tensor, scope, used)?)))
                .collect::<Result<Map<_, _>, String>>()
                .map(Value::Object)
        }
        other => Ok(other.clone()),
    }
}

/// Dotted paths of every leaf of the case values; per-tensor entries as `tensors.UID.KEY`.
fn leaf_paths(values: &Map<String, Value>) -> Vec<String> {
    fn walk(prefix: &str, v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(m) if !m.is_empty() => {
                for (k, x) in m {
                    walk(&format!("{prefix}.{k}"), x, out);
                }
            }
            _ => out.push(prefix.to_owned()),
        }
    }
    let mut out = Vec::new();
    for (key, v) in values {
        if key == "tensors" {
            for e in v.as_array().into_iter().flatten() {
                let uid = e.get("uid").and_then(Value::as_i64).unwrap_or_default();
                for (k, x) in e
                    .as_object()
                    .into_iter()
                    .flatten()
                    .filter(|(k, _)| *k != "uid")
                {
                    walk(&format!("tensors.{uid}.{k}"), x, &mut out);
                }
            }
        } else {
            walk(key, v, &mut out);
        }
    }
    out
}

/// `tensor_patches`: per uid, `set` upserts keys, then `remove` erases them.
fn apply_patches(graph: &mut Value, patches: &Value) -> Result<(), String> {
    let Value::Array(patches) = patches else {
        return Err("tensor_patches is not an array".into());
    };
    for (i, p) in patches.iter().enumerate() {
        let uid = p
            .get("uid")
            .and_then(Value::as_i64)
            .ok_or_else(|| format!("tensor_patches[{i}] has no integer uid"))?;
        let tensor = graph
            .get_mut("tensors")
            .and_then(Value::as_array_mut)
            .and_then(|ts| {
                ts.iter_mut()
                    .find(|t| t.get("uid").and_then(Value::as_i64) == Some(uid))
            })
            .and_then(Value::as_object_mut)
            .ok_or_else(|| format!("tensor_patches[{i}]: uid {uid} is not in the graph"))?;
        if let Some(set) = p.get("set") {
            let set = set
                .as_object()
                .ok_or_else(|| format!("tensor_patches[{i}].set is not an object"))?;
            for (k, v) in set {
                tensor.insert(k.clone(), v.clone());
            }
        }
        if let Some(remove) = p.get("remove") {
            let keys = remove
                .as_array()
                .ok_or_else(|| format!("tensor_patches[{i}].remove is not an array"))?;
            for k in keys {
                let k = k
                    .as_str()
                    .ok_or_else(|| format!("tensor_patches[{i}].remove holds a non-string"))?;
                tensor.remove(k);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn case(entry: Value) -> Result<Loaded, String> {
        let template = json!({
            "io_data_type": "${case.io_data_type}",
            "nodes": [{"attributes": {"right_bound": "${case.attributes.right_bound}"}}],
            "tensors": [
                {"uid": 0, "name": "Q", "dims": "${case.dims}", "strides": "${case.strides}",
                 "data_type": "${case.data_type}", "ragged_offset_multiplier": "${case.multiplier}"},
                {"uid": 1, "name": "K", "dims": [1], "strides": [1], "data_type": "float"}
            ]
        });
        expand_case(&template, &entry)
    }

    fn meta() -> Value {
        json!({"format_version": 1, "generator": "test"})
    }

    #[test]
    fn placeholders_resolve_per_tensor_first_then_case_wide() {
        let loaded = case(json!({
            "id": "a",
            "values": {
                "io_data_type": "half",
                "multiplier": 32,
                "attributes": {"right_bound": 0},
                "tensors": [{"uid": 0, "dims": [2], "strides": [1], "data_type": "half", "multiplier": 8}]
            },
            "metadata": meta()
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        let g = &loaded.graph;
        assert_eq!(g["io_data_type"], json!("half"));
        assert_eq!(g["tensors"][0]["dims"], json!([2]));
        assert_eq!(g["tensors"][0]["ragged_offset_multiplier"], json!(8));
        assert_eq!(g["nodes"][0]["attributes"]["right_bound"], json!(0));
        assert_eq!(
            loaded.warnings,
            vec!["Unused sweep value 'multiplier'".to_owned()]
        );
    }

    #[test]
    fn tensor_only_names_do_not_fall_back_and_missing_values_fail_the_case() {
        let error = case(json!({
            "id": "b",
            "values": {"io_data_type": "half", "dims": [2], "strides": [1], "data_type": "half",
                       "multiplier": 1, "attributes": {"right_bound": 0}},
            "metadata": meta()
        }))
        .err();
        assert_eq!(
            error.as_deref(),
            Some(
                "placeholder ${case.dims} of tensor uid 0 must come from its values.tensors entry"
            )
        );
        let error = case(json!({
            "id": "c",
            "values": {"io_data_type": "half", "attributes": {"right_bound": 0},
                       "tensors": [{"uid": 0, "dims": [2], "strides": [1], "data_type": "half"}]},
            "metadata": meta()
        }))
        .err();
        assert_eq!(
            error.as_deref(),
            Some("placeholder ${case.multiplier} has no value")
        );
    }

    #[test]
    fn metadata_is_required_with_format_version_one() {
        let no_meta = case(json!({"id": "d", "values": {}})).err();
        assert_eq!(
            no_meta.as_deref(),
            Some("the case's metadata is not a JSON object")
        );
        let v2 = case(json!({"id": "d", "metadata": {"format_version": 2}})).err();
        assert_eq!(
            v2.as_deref(),
            Some("the case's metadata has format_version 2; 1 is supported")
        );
    }

    #[test]
    fn per_tensor_values_must_name_template_tensors_once() {
        let unknown = case(json!({"id": "e", "metadata": meta(),
            "values": {"tensors": [{"uid": 7, "dims": [1]}]}}))
        .err();
        assert_eq!(
            unknown.as_deref(),
            Some("values.tensors[0]: uid 7 is not a template tensor")
        );
    }

    #[test]
    fn tensor_patches_set_then_remove() {
        let mut graph =
            json!({"tensors": [{"uid": 4, "value": 1.0, "value_type": "Float32Value"}]});
        apply_patches(
            &mut graph,
            &json!([{"uid": 4, "set": {"is_runtime_pass_by_value": true}, "remove": ["value", "value_type"]}]),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            graph,
            json!({"tensors": [{"uid": 4, "is_runtime_pass_by_value": true}]})
        );
        let missing = apply_patches(&mut graph, &json!([{"uid": 5, "set": {}}])).err();
        assert_eq!(
            missing.as_deref(),
            Some("tensor_patches[0]: uid 5 is not in the graph")
        );
    }

    #[test]
    fn companions_and_sweep_files_are_not_graphs() {
        for (file, graph) in [
            ("Small.json", true),
            ("resnet50.v2.json", true),
            ("Small.meta.json", false),
            ("Small.support.json", false),
            ("graph.template.json", false),
            ("sweep.json", false),
            ("notes.txt", false),
        ] {
            assert_eq!(is_single_graph(Path::new(file)), graph, "{file}");
        }
    }
}
