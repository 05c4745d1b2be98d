//! Issue 38's CLI findings, each held by the exit status and the words a user reads: where the
//! shim looks for plugins without `HIPDNN_PLUGIN_DIR` (and every place it names when it finds
//! none), relative plugin paths, `--cuda` without a device, a missing `--inputs` folder, a
//! `.npy` of the right element count in the wrong shape, and files that hold no graph.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{plugin, scratch, shim};

const PLUGIN_FILE: &str = "libhipdnn_provider_ragged_sdpa.so";

fn examples(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples")
        .join(file)
}

fn golden(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(rel)
}

/// A copy of the built `hipdnn-shim` at `dir/hipdnn-shim`: the shim resolves its default places
/// against its own folder, so a copy in a scratch folder searches only what the test lays out.
/// (A symlink would not do: the executable's path is the link's target.)
fn shim_copy(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let copy = dir.join("hipdnn-shim");
    std::fs::copy(env!("CARGO_BIN_EXE_hipdnn-shim"), &copy)
        .unwrap_or_else(|e| panic!("copying hipdnn-shim to {}: {e}", copy.display()));
    copy
}

/// Links the built plugin at `at` (its parent folders created).
fn link_plugin(at: &Path) {
    if let Some(parent) = at.parent() {
        std::fs::create_dir_all(parent).unwrap_or_else(|e| panic!("{}: {e}", parent.display()));
    }
    std::os::unix::fs::symlink(plugin(), at)
        .unwrap_or_else(|e| panic!("linking the plugin at {}: {e}", at.display()));
}

/// Runs `exe` as a user would, with neither HIPDNN_PLUGIN_DIR nor log settings from the caller.
///
/// A freshly copied executable can be "busy" for a moment: a process another test thread forks
/// while the copy's file is open for writing inherits that descriptor until it execs. Retried.
fn run_exe(
    exe: &Path,
    args: &[&str],
    cwd: &Path,
    env: &[(&str, &str)],
) -> (Output, String, String) {
    const TEXT_FILE_BUSY: i32 = 26; // ETXTBSY
    let mut attempts = 0;
    let out = loop {
        let result = Command::new(exe)
            .args(args)
            .current_dir(cwd)
            .env_remove("HIPDNN_PLUGIN_DIR")
            .env_remove("HIPDNN_LOG_LEVEL")
            .env_remove("HIPDNN_LOG_FILE")
            .envs(env.iter().copied())
            .output();
        match result {
            Err(e) if e.raw_os_error() == Some(TEXT_FILE_BUSY) && attempts < 100 => {
                attempts += 1;
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            other => break other.unwrap_or_else(|e| panic!("running {}: {e}", exe.display())),
        }
    };
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out, stdout, stderr)
}

/// The listing line of the place numbered `n` (1-based) in `plugins` output.
fn place_line(stdout: &str, n: usize) -> &str {
    let prefix = format!("  {n}. ");
    stdout
        .lines()
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no place {n} in:\n{stdout}"))
}

#[test]
fn help_states_the_search_order_and_how_relative_plugin_paths_resolve() {
    let (out, stdout, stderr) = shim(&["--help"], &plugin());
    assert!(out.status.success(), "{stderr}");
    for rule in [
        "1. --plugin-dir PATH, else HIPDNN_PLUGIN_DIR=PATH, and nothing else",
        "A relative PATH resolves against the folder of this executable,\n     not the current \
         directory",
        "hipdnn_plugins/engines/              hipDNN's default",
        "libhipdnn_provider_ragged_sdpa.so    the plugin cargo built beside this executable",
        "../../lib/hipdnn_plugins/engines/    the layout `cargo xtask dist` writes",
        "HIPDNN_RAGGED_SDPA_HOST_ENGINE is set to 1 unless the environment sets it",
    ] {
        assert!(stdout.contains(rule), "{rule}:\n{stdout}");
    }
}

#[test]
fn the_plugin_cargo_built_beside_the_shim_is_found_without_hipdnn_plugin_dir() {
    let root = scratch("default-profile");
    let profile = root.join("target/release");
    let exe = shim_copy(&profile);
    link_plugin(&profile.join(PLUGIN_FILE));
    let (out, stdout, stderr) = run_exe(&exe, &["plugins"], &root, &[]);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let profile = profile.canonicalize().unwrap_or_else(|e| panic!("{e}"));
    assert!(
        stdout.contains(&format!(
            "relative paths resolve against {}, this executable's folder",
            profile.display()
        )),
        "{stdout}"
    );
    assert!(
        place_line(&stdout, 1).ends_with("(hipDNN's default): nothing there"),
        "{stdout}"
    );
    assert!(
        place_line(&stdout, 2)
            .ends_with("(the plugin cargo built beside this executable): 1 plugin file(s), used"),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "search path: {}",
            profile.join(PLUGIN_FILE).display()
        )),
        "{stdout}"
    );
    assert!(stdout.contains("RAGGED_SDPA_HOST_REFERENCE"), "{stdout}");

    // `run` says where its plugins came from, then runs and verifies.
    let graph = examples("ragged_sdpa_bf16.json");
    let out_dir = root.join("out");
    let (out, stdout, stderr) = run_exe(
        &exe,
        &[
            "run",
            &graph.to_string_lossy(),
            "--verify",
            "--out",
            &out_dir.to_string_lossy(),
        ],
        &root,
        &[],
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stderr.contains(&format!(
            "plugins from {} (the plugin cargo built beside this executable)",
            profile.join(PLUGIN_FILE).display()
        )),
        "{stderr}"
    );
    assert!(stdout.trim_end().ends_with("PASS"), "{stdout}");
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn hipdnns_default_comes_first_and_the_dist_layout_is_found_from_target() {
    let root = scratch("default-order");
    let profile = root.join("target/debug");
    let exe = shim_copy(&profile);
    link_plugin(&root.join("lib/hipdnn_plugins/engines").join(PLUGIN_FILE));
    let (out, stdout, stderr) = run_exe(&exe, &["plugins"], &root, &[]);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        place_line(&stdout, 2)
            .ends_with("(the plugin cargo built beside this executable): nothing there"),
        "{stdout}"
    );
    assert!(
        place_line(&stdout, 3)
            .ends_with("(the layout `cargo xtask dist` writes): 1 plugin file(s), used"),
        "{stdout}"
    );

    // hipDNN's own default beats both; the later place is reported, not loaded.
    link_plugin(&profile.join("hipdnn_plugins/engines").join(PLUGIN_FILE));
    let (out, stdout, stderr) = run_exe(&exe, &["plugins"], &root, &[]);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        place_line(&stdout, 1).ends_with("(hipDNN's default): 1 plugin file(s), used"),
        "{stdout}"
    );
    assert!(
        place_line(&stdout, 3).ends_with(
            "(the layout `cargo xtask dist` writes): 1 plugin file(s), not used: an earlier \
             place comes first"
        ),
        "{stdout}"
    );
    assert_eq!(
        stdout
            .matches("\nplugin hipdnn_provider_ragged_sdpa ")
            .count(),
        1,
        "{stdout}"
    );
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn without_any_plugin_every_place_searched_is_listed_with_what_to_do() {
    let root = scratch("no-plugin");
    let profile = root.join("target/debug");
    let exe = shim_copy(&profile);
    let (out, stdout, stderr) = run_exe(&exe, &["plugins"], &root, &[]);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    for n in 1..=3 {
        assert!(
            place_line(&stdout, n).ends_with(": nothing there"),
            "{stdout}"
        );
    }
    assert!(
        stderr.contains("hipdnn-shim: no engine plugin loaded"),
        "{stderr}"
    );
    // The shim lives in target/debug: the dev-profile command fills that folder.
    assert!(
        stderr.contains("`cargo build -p ragged-plugin`") && stderr.contains("`cargo xtask dist`"),
        "{stderr}"
    );

    // A command that runs graphs fails before dispatch, naming every place in its error.
    let graph = examples("ragged_sdpa_bf16.json");
    let (out, stdout, stderr) = run_exe(
        &exe,
        &["run", &graph.to_string_lossy(), "--verify"],
        &root,
        &[],
    );
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(!stdout.contains("PASS"), "{stdout}");
    assert!(
        stderr.contains("hipdnn-shim: no engine plugin loaded\nplugin search, in order"),
        "{stderr}"
    );
    for place in [
        "hipdnn_plugins/engines (hipDNN's default): nothing there",
        "libhipdnn_provider_ragged_sdpa.so (the plugin cargo built beside this executable): nothing there",
        "lib/hipdnn_plugins/engines (the layout `cargo xtask dist` writes): nothing there",
    ] {
        assert!(stderr.contains(place), "{place}:\n{stderr}");
    }
    assert!(
        !stderr.contains("HIPDNN_RAGGED_SDPA_HOST_ENGINE"),
        "{stderr}"
    );

    // bundle too: no plugin is a failure, not a run of declined cases.
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/bundles");
    let (out, stdout, stderr) = run_exe(&exe, &["bundle", &corpus.to_string_lossy()], &root, &[]);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(!stdout.contains(" declined"), "{stdout}");
    assert!(
        stderr.contains("hipdnn-shim: no engine plugin loaded"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn a_relative_plugin_path_resolves_against_the_executables_folder_and_says_so() {
    let root = scratch("relative");
    let exe = shim_copy(&root.join("bin"));
    link_plugin(&root.join("plugins").join(PLUGIN_FILE));
    let relative = format!("plugins/{PLUGIN_FILE}");
    let bin = root
        .join("bin")
        .canonicalize()
        .unwrap_or_else(|e| panic!("{e}"));
    let from_cwd = root
        .canonicalize()
        .unwrap_or_else(|e| panic!("{e}"))
        .join(&relative);

    // From the scratch root, `plugins/…` names the plugin only relative to the current directory.
    for (args, env) in [
        (vec!["--plugin-dir", relative.as_str(), "plugins"], vec![]),
        (
            vec!["plugins"],
            vec![("HIPDNN_PLUGIN_DIR", relative.as_str())],
        ),
    ] {
        let (out, stdout, stderr) = run_exe(&exe, &args, &root, &env);
        assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
        assert!(
            place_line(&stdout, 1).starts_with(&format!("  1. {}", bin.join(&relative).display())),
            "{stdout}"
        );
        assert!(
            place_line(&stdout, 1).contains("relative: resolved against this executable's folder"),
            "{stdout}"
        );
        assert!(
            stderr.contains(&format!(
                "'{relative}' exists relative to the current directory, but relative plugin paths \
                 resolve against this executable's folder (as hipDNN's against its backend \
                 library's): pass {}",
                from_cwd.display()
            )),
            "{stderr}"
        );
    }

    // Relative to the executable's folder, the same plugin loads.
    let (out, stdout, stderr) = run_exe(
        &exe,
        &[
            "--plugin-dir",
            &format!("../plugins/{PLUGIN_FILE}"),
            "plugins",
        ],
        &root,
        &[],
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn run_cuda_without_a_usable_device_fails_with_the_reason() {
    let reason = match hipdnn_shim::harness::cuda_device() {
        Ok(_) => {
            eprintln!(
                "test run_cuda_without_a_usable_device_fails_with_the_reason: skipped: a CUDA \
                 device is present"
            );
            return;
        }
        Err(reason) => reason.to_string(),
    };
    let out_dir = scratch("cuda-no-device");
    for graph in ["ragged_sdpa_bf16.json", "ragged_sdpa_backward_bf16.json"] {
        let (out, stdout, stderr) = shim(
            &[
                "run",
                &examples(graph).to_string_lossy(),
                "--cuda",
                "--verify",
                "--out",
                &out_dir.to_string_lossy(),
            ],
            &plugin(),
        );
        assert_eq!(out.status.code(), Some(1), "{graph}: {stdout}\n{stderr}");
        assert!(
            stderr.contains(&format!(
                "hipdnn-shim: --cuda: no usable CUDA device: {reason}"
            )),
            "{graph}: {stderr}"
        );
        assert!(!stdout.contains("PASS"), "{graph}: {stdout}");
        assert!(
            !stderr.contains("RAGGED_SDPA_HOST_REFERENCE"),
            "{graph}: {stderr}"
        );
    }
    let _ = std::fs::remove_dir_all(&out_dir);
}

#[test]
fn a_missing_inputs_folder_is_an_error_naming_it() {
    let missing = scratch("inputs-missing").join("no-such-folder");
    let (out, stdout, stderr) = shim(
        &[
            "run",
            &examples("ragged_sdpa_bf16.json").to_string_lossy(),
            "--inputs",
            &missing.to_string_lossy(),
            "--verify",
        ],
        &plugin(),
    );
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stderr.contains(&format!(
            "hipdnn-shim: --inputs '{}': no such directory",
            missing.display()
        )),
        "{stderr}"
    );
    assert!(!stdout.contains("PASS"), "{stdout}");

    // A file where a folder belongs is named too.
    let file = golden("graph.json");
    let (out, _, stderr) = shim(
        &[
            "run",
            &file.to_string_lossy(),
            "--inputs",
            &file.to_string_lossy(),
        ],
        &plugin(),
    );
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("--inputs '{}': not a directory", file.display())),
        "{stderr}"
    );
}

/// The golden inputs with Q's `.npy` header claiming `(10, 16)` instead of `(5, 2, 16)`: the same
/// 160 elements, another shape.
fn inputs_with_reshaped_q() -> PathBuf {
    let dir = scratch("npy-shape");
    for entry in std::fs::read_dir(golden("inputs")).unwrap_or_else(|e| panic!("{e}")) {
        let path = entry.unwrap_or_else(|e| panic!("{e}")).path();
        let name = path.file_name().unwrap_or_default();
        std::fs::copy(&path, dir.join(name)).unwrap_or_else(|e| panic!("{e}"));
    }
    let q = dir.join("1.npy");
    let bytes = std::fs::read(&q).unwrap_or_else(|e| panic!("{e}"));
    let (from, to) = ("'shape': (5, 2, 16), }", "'shape': (10, 16), }  ");
    let at = bytes
        .windows(from.len())
        .position(|w| w == from.as_bytes())
        .unwrap_or_else(|| panic!("golden 1.npy's header does not hold {from}"));
    let mut patched = bytes.clone();
    patched[at..at + from.len()].copy_from_slice(to.as_bytes());
    std::fs::write(&q, patched).unwrap_or_else(|e| panic!("{e}"));
    dir
}

#[test]
fn an_npy_of_the_right_count_in_the_wrong_shape_names_the_tensor_and_both_shapes() {
    let inputs = inputs_with_reshaped_q();
    let (out, stdout, stderr) = shim(
        &[
            "run",
            &golden("graph.json").to_string_lossy(),
            "--inputs",
            &inputs.to_string_lossy(),
            "--verify",
        ],
        &plugin(),
    );
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stderr.contains(&format!(
            "hipdnn-shim: input '{}' for tensor uid 1 'q': array shape (10, 16) does not match \
             the tensor, which takes (5, 2, 16) ([tokens, H, D]) or the flat buffer (160,)",
            inputs.join("1.npy").display()
        )),
        "{stderr}"
    );
    assert!(!stdout.contains("PASS"), "{stdout}");
    let _ = std::fs::remove_dir_all(&inputs);
}

#[test]
fn files_that_hold_no_graph_say_so_in_words() {
    let dir = scratch("not-a-graph");
    let empty = dir.join("empty.json");
    std::fs::write(&empty, b"").unwrap_or_else(|e| panic!("{e}"));
    let expectations = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/expectations.json");
    let readme = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/README.md");
    let cases = [
        (&empty, "the file is empty"),
        (
            &expectations,
            "it is JSON, but not a hipDNN graph (no \"tensors\" or \"nodes\" at the top level)",
        ),
        (
            &readme,
            "it is not JSON (it does not start with '{') and not a FlatBuffers graph (bare Graph \
             or HDGP container) either: ",
        ),
    ];
    for (file, reason) in cases {
        for command in ["run", "inspect", "bench"] {
            let (out, stdout, stderr) = shim(&[command, &file.to_string_lossy()], &plugin());
            assert_eq!(out.status.code(), Some(1), "{command}: {stdout}\n{stderr}");
            assert!(
                stderr.contains(&format!(
                    "hipdnn-shim: '{}' is not a graph file: {reason}",
                    file.display()
                )),
                "{command} {}: {stderr}",
                file.display()
            );
            assert!(!stderr.contains("out of bounds"), "{stderr}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
