// Holds a Rust transcription of the engine-plugin ABI to the project's C header,
// plugin/include/hipdnn_engine_plugin.h.
//
// Shared by every crate that transcribes the ABI (the plugin, host-shim, the fixture plugin):
// each includes this file with `include!` and lists what its own types measure. The C compiler,
// not Rust, then decides: every fact becomes a `_Static_assert` in a translation unit that
// includes the header, so a size, offset or enum value that drifts from the header fails the
// compile with the fact spelled out.
//
// The including module defines `HEADER_DIR_FROM_MANIFEST`: the header's folder relative to the
// including crate's manifest (`include!` expands `env!("CARGO_MANIFEST_DIR")` in that crate).

/// One thing Rust measured, as the C expression that must equal it.
pub struct Fact {
    c_expression: String,
    rust_value: i64,
}

fn fact(c_expression: String, rust_value: impl TryInto<i64>) -> Fact {
    Fact {
        c_expression,
        rust_value: rust_value.try_into().unwrap_or(i64::MIN),
    }
}

/// `sizeof(c_type)`.
pub fn size_of(c_type: &str, rust: usize) -> Fact {
    fact(format!("sizeof({c_type})"), rust)
}

/// `_Alignof(c_type)`.
pub fn align_of(c_type: &str, rust: usize) -> Fact {
    fact(format!("_Alignof({c_type})"), rust)
}

/// `offsetof(c_type, field)`.
pub fn offset_of(c_type: &str, field: &str, rust: usize) -> Fact {
    fact(format!("offsetof({c_type}, {field})"), rust)
}

/// An enumerator or macro of the header.
pub fn value(c_name: &str, rust: impl TryInto<i64>) -> Fact {
    fact(c_name.to_owned(), rust)
}

/// Compiles `facts` against the header; `Err` carries the compiler's account of each mismatch.
pub fn check_against_header(unit: &str, facts: &[Fact]) -> Result<(), String> {
    let include = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(HEADER_DIR_FROM_MANIFEST)
        .join("hipdnn_engine_plugin.h");
    let mut source = format!("#include <stddef.h>\n#include \"{}\"\n", include.display());
    for f in facts {
        let spelled = format!("{} == {}", f.c_expression, f.rust_value);
        source.push_str(&format!(
            "_Static_assert((long long)({}) == {}LL, \"header and Rust disagree: {} (Rust)\");\n",
            f.c_expression,
            f.rust_value,
            spelled.replace('\\', "\\\\").replace('"', "\\\"")
        ));
    }
    let dir = std::env::temp_dir().join(format!("abi-layout-{}-{unit}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let file = dir.join("layout.c");
    std::fs::write(&file, source).map_err(|e| format!("{}: {e}", file.display()))?;
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let output = std::process::Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-fsyntax-only"])
        .arg(&file)
        .output()
        .map_err(|e| format!("running the C compiler {cc} (set CC if it is not on PATH): {e}"))?;
    let _ = std::fs::remove_dir_all(&dir);
    if output.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&output.stderr).into_owned())
    }
}

/// [`check_against_header`], as a test assertion.
pub fn assert_matches_header(unit: &str, facts: &[Fact]) {
    if let Err(compiler) = check_against_header(unit, facts) {
        panic!("{unit}: the Rust ABI types disagree with hipdnn_engine_plugin.h:\n{compiler}");
    }
}
