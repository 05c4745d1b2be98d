//! Project automation, run as `cargo xtask <command>`.
//!
//! Each command lives in its own module; this file only dispatches, so that
//! the codegen, layout and demo owners never edit the same file.

mod codegen;
mod demo;
mod dist;

use std::path::PathBuf;
use std::process::ExitCode;

/// The workspace root: xtask always runs from the checkout it was built in.
fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one level below the workspace root")
        .to_path_buf()
}

/// The commands, for `--help` and for a call that names none or an unknown one.
const USAGE: &str = "usage: cargo xtask <command>\n\n\
     commands:\n  \
     codegen [--check]   regenerate schema/src/generated from schema/fbs with flatc 25.12.19\n  \
     dist [--release]    lay out lib/hipdnn_plugins/engines/ with the plugin\n  \
     demo                the main job: a ragged SDPA graph through hipdnn-shim on the host engine\n  \
     help, --help, -h    print this text";

/// Asked-for usage goes to stdout with success; usage after a wrong call goes to stderr with
/// status 2, so a script can tell the two apart.
fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((cmd, rest)) = args.split_first() else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let result = match cmd.as_str() {
        "help" | "--help" | "-h" => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        "codegen" => codegen::run(&workspace_root(), rest),
        "dist" => dist::run(&workspace_root(), rest),
        "demo" => demo::run(&workspace_root(), rest),
        other => {
            eprintln!("xtask: unknown command '{other}'\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("xtask {cmd}: {msg}");
            ExitCode::FAILURE
        }
    }
}
