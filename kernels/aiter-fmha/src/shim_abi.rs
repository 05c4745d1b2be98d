//! Rust mirror of `kernels/aiter-fmha/shim/ragged_aiter_shim.h`, the C contract of the AITER shim.
//!
//! The layout is checked against the header itself: a unit test compiles a C program that
//! includes the header and prints `sizeof`/`offsetof` of every field, and compares them with
//! `offset_of!` here. Anything that changes one side without the other fails that test.

use std::ffi::c_void;

/// `RAGGED_AITER_SHIM_ABI_VERSION`.
pub const SHIM_ABI_VERSION: u32 = 3;

/// `RAGGED_AITER_DTYPE_FP16`.
pub const DTYPE_FP16: i32 = 0;
/// `RAGGED_AITER_DTYPE_BF16`.
pub const DTYPE_BF16: i32 = 1;
/// `RAGGED_AITER_DTYPE_FP8BF16`.
pub const DTYPE_FP8BF16: i32 = 2;

/// `RAGGED_AITER_QSCALE_NONE`.
pub const QSCALE_NONE: i32 = 0;
/// `RAGGED_AITER_QSCALE_PERTENSOR`.
pub const QSCALE_PERTENSOR: i32 = 1;

/// `RAGGED_AITER_MASK_NONE`.
pub const MASK_NONE: i32 = 0;
/// `RAGGED_AITER_MASK_TOP_LEFT`.
pub const MASK_TOP_LEFT: i32 = 1;
/// `RAGGED_AITER_MASK_BOTTOM_RIGHT`.
pub const MASK_BOTTOM_RIGHT: i32 = 2;

/// `RAGGED_AITER_OK`.
pub const STATUS_OK: i32 = 0;
/// `RAGGED_AITER_UNSUPPORTED`.
pub const STATUS_UNSUPPORTED: i32 = 1;
/// `RAGGED_AITER_BAD_ARGS`.
pub const STATUS_BAD_ARGS: i32 = 2;
/// `RAGGED_AITER_EXCEPTION`.
pub const STATUS_EXCEPTION: i32 = 3;
/// `RAGGED_AITER_KERNEL_FILE_MISSING`.
pub const STATUS_KERNEL_FILE_MISSING: i32 = 4;

/// The name of a shim status, for error messages.
pub fn status_name(status: i32) -> &'static str {
    match status {
        STATUS_OK => "RAGGED_AITER_OK",
        STATUS_UNSUPPORTED => "RAGGED_AITER_UNSUPPORTED",
        STATUS_BAD_ARGS => "RAGGED_AITER_BAD_ARGS",
        STATUS_EXCEPTION => "RAGGED_AITER_EXCEPTION",
        STATUS_KERNEL_FILE_MISSING => "RAGGED_AITER_KERNEL_FILE_MISSING",
        _ => "unknown status",
    }
}

/// `ragged_aiter_fwd_args`: field for field, in header order. Field meanings are in the header.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RaggedAiterFwdArgs {
    pub struct_size: u32,
    pub data_type: i32,

    pub q_ptr: *const c_void,
    pub k_ptr: *const c_void,
    pub v_ptr: *const c_void,
    pub o_ptr: *mut c_void,
    pub lse_ptr: *mut c_void,

    pub seqstart_q_ptr: *const i32,
    pub seqstart_k_ptr: *const i32,
    pub cu_seqlen_q_ptr: *const i32,
    pub cu_seqlen_k_ptr: *const i32,
    pub stream: *mut c_void,

    pub batch: i32,
    pub max_seqlen_q: i32,
    pub seqlen_q: i32,
    pub seqlen_k: i32,
    pub hdim_q: i32,
    pub hdim_v: i32,
    pub nhead_q: i32,
    pub nhead_k: i32,

    pub stride_q: i32,
    pub stride_k: i32,
    pub stride_v: i32,
    pub stride_o: i32,
    pub nhead_stride_q: i32,
    pub nhead_stride_k: i32,
    pub nhead_stride_v: i32,
    pub nhead_stride_o: i32,
    pub nhead_stride_lse: i32,

    pub mask_type: i32,
    pub window_size_left: i32,
    pub window_size_right: i32,
    pub scale_s: f32,

    pub has_lse: i32,
    pub use_asm_v3: i32,
    pub v3_api_check: i32,
    pub how_v3_bf16_cvt: i32,

    pub qscale_type: i32,
    pub q_descale_ptr: *const f32,
    pub k_descale_ptr: *const f32,
    pub v_descale_ptr: *const f32,
}

/// Every field's name and Rust offset, in header order; the layout test walks this list.
pub fn field_offsets() -> Vec<(&'static str, usize)> {
    macro_rules! offsets {
        ($($f:ident),* $(,)?) => {
            vec![$((stringify!($f), std::mem::offset_of!(RaggedAiterFwdArgs, $f))),*]
        };
    }
    offsets!(
        struct_size,
        data_type,
        q_ptr,
        k_ptr,
        v_ptr,
        o_ptr,
        lse_ptr,
        seqstart_q_ptr,
        seqstart_k_ptr,
        cu_seqlen_q_ptr,
        cu_seqlen_k_ptr,
        stream,
        batch,
        max_seqlen_q,
        seqlen_q,
        seqlen_k,
        hdim_q,
        hdim_v,
        nhead_q,
        nhead_k,
        stride_q,
        stride_k,
        stride_v,
        stride_o,
        nhead_stride_q,
        nhead_stride_k,
        nhead_stride_v,
        nhead_stride_o,
        nhead_stride_lse,
        mask_type,
        window_size_left,
        window_size_right,
        scale_s,
        has_lse,
        use_asm_v3,
        v3_api_check,
        how_v3_bf16_cvt,
        qscale_type,
        q_descale_ptr,
        k_descale_ptr,
        v_descale_ptr,
    )
}

/// The header text, embedded so that tests (and a future ABI dump) need no path lookup.
pub const HEADER: &str = include_str!("../shim/ragged_aiter_shim.h");

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::process::Command;

    /// A fresh directory under the system temp dir for one test's C files.
    pub(crate) fn scratch_dir(tag: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "ragged-aiter-{tag}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&dir).expect("create scratch dir");
        dir
    }

    /// Writes `headers` (name, text) next to a `main.c` that includes `include` and prints the
    /// size and alignment of `type_name`, the offset and size of each of `fields`, and the value
    /// of each of `constants`; compiles it with the system C compiler and returns what it prints.
    pub(crate) fn c_layout_report(
        tag: &str,
        headers: &[(&str, &str)],
        include: &str,
        type_name: &str,
        fields: &[(&str, usize)],
        constants: &[&str],
    ) -> String {
        let dir = scratch_dir(tag);
        for (name, text) in headers {
            std::fs::write(dir.join(name), text).expect("write header");
        }
        let mut program = format!(
            "#include <stddef.h>\n#include <stdio.h>\n#include \"{include}\"\nint main(void) {{\n"
        );
        program.push_str(&format!(
            "  printf(\"sizeof %zu\\n\", sizeof({type_name}));\n  printf(\"alignof %zu\\n\", _Alignof({type_name}));\n"
        ));
        for (name, _) in fields {
            program.push_str(&format!(
                "  printf(\"{name} %zu %zu\\n\", offsetof({type_name}, {name}), sizeof((({type_name}*)0)->{name}));\n"
            ));
        }
        for constant in constants {
            program.push_str(&format!(
                "  printf(\"{constant} %lld\\n\", (long long){constant});\n"
            ));
        }
        program.push_str("  return 0;\n}\n");
        std::fs::write(dir.join("main.c"), program).expect("write main.c");
        let exe = dir.join("layout");
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
        let status = Command::new(&cc)
            .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-o"])
            .arg(&exe)
            .arg(dir.join("main.c"))
            .status()
            .expect("run the C compiler (set CC if `cc` is not on PATH)");
        assert!(status.success(), "{cc} failed to compile the layout probe");
        let out = Command::new(&exe).output().expect("run layout probe");
        std::fs::remove_dir_all(&dir).ok();
        String::from_utf8(out.stdout).expect("utf-8 report")
    }

    /// The report's lines as `key → numbers`.
    pub(crate) fn report_values(report: &str) -> HashMap<&str, Vec<usize>> {
        report
            .lines()
            .filter_map(|l| {
                let mut parts = l.split_whitespace();
                let key = parts.next()?;
                Some((key, parts.filter_map(|p| p.parse().ok()).collect()))
            })
            .collect()
    }

    /// Checks a report against the Rust struct `T` and its `fields`: size, alignment, every
    /// offset; the listed fields' sizes add up to `size_of::<T>() - tail_padding`.
    pub(crate) fn assert_layout_matches<T>(
        c: &HashMap<&str, Vec<usize>>,
        fields: &[(&str, usize)],
        tail_padding: usize,
    ) {
        assert_eq!(c["sizeof"], [std::mem::size_of::<T>()]);
        assert_eq!(c["alignof"], [std::mem::align_of::<T>()]);
        for (name, offset) in fields {
            let seen = c
                .get(name)
                .unwrap_or_else(|| panic!("{name} missing in C report"));
            assert_eq!(seen[0], *offset, "offset of {name}");
        }
        let sizes: usize = fields.iter().map(|(n, _)| c[n][1]).sum();
        assert_eq!(
            sizes,
            std::mem::size_of::<T>() - tail_padding,
            "every byte but the tail padding belongs to a listed field"
        );
    }

    /// The forward header's report.
    fn fwd_layout_report() -> String {
        c_layout_report(
            "layout",
            &[("ragged_aiter_shim.h", HEADER)],
            "ragged_aiter_shim.h",
            "ragged_aiter_fwd_args",
            &field_offsets(),
            &[
                "RAGGED_AITER_SHIM_ABI_VERSION",
                "RAGGED_AITER_DTYPE_FP16",
                "RAGGED_AITER_DTYPE_BF16",
                "RAGGED_AITER_DTYPE_FP8BF16",
                "RAGGED_AITER_QSCALE_NONE",
                "RAGGED_AITER_QSCALE_PERTENSOR",
                "RAGGED_AITER_MASK_NONE",
                "RAGGED_AITER_MASK_TOP_LEFT",
                "RAGGED_AITER_MASK_BOTTOM_RIGHT",
                "RAGGED_AITER_OK",
                "RAGGED_AITER_UNSUPPORTED",
                "RAGGED_AITER_BAD_ARGS",
                "RAGGED_AITER_EXCEPTION",
                "RAGGED_AITER_KERNEL_FILE_MISSING",
            ],
        )
    }

    #[test]
    fn header_and_rust_struct_agree_field_by_field() {
        let report = fwd_layout_report();
        // No padding anywhere: ABI 3's qscale_type fills what was ABI 2's tail padding.
        assert_layout_matches::<RaggedAiterFwdArgs>(&report_values(&report), &field_offsets(), 0);
    }

    #[test]
    fn header_constants_match_rust_constants() {
        let report = fwd_layout_report();
        let value = |name: &str| -> i64 {
            report
                .lines()
                .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
                .unwrap_or_else(|| panic!("{name} missing in C report"))
        };
        assert_eq!(
            value("RAGGED_AITER_SHIM_ABI_VERSION"),
            i64::from(SHIM_ABI_VERSION)
        );
        assert_eq!(value("RAGGED_AITER_DTYPE_FP16"), i64::from(DTYPE_FP16));
        assert_eq!(value("RAGGED_AITER_DTYPE_BF16"), i64::from(DTYPE_BF16));
        assert_eq!(
            value("RAGGED_AITER_DTYPE_FP8BF16"),
            i64::from(DTYPE_FP8BF16)
        );
        assert_eq!(value("RAGGED_AITER_QSCALE_NONE"), i64::from(QSCALE_NONE));
        assert_eq!(
            value("RAGGED_AITER_QSCALE_PERTENSOR"),
            i64::from(QSCALE_PERTENSOR)
        );
        assert_eq!(value("RAGGED_AITER_MASK_NONE"), i64::from(MASK_NONE));
        assert_eq!(
            value("RAGGED_AITER_MASK_TOP_LEFT"),
            i64::from(MASK_TOP_LEFT)
        );
        assert_eq!(
            value("RAGGED_AITER_MASK_BOTTOM_RIGHT"),
            i64::from(MASK_BOTTOM_RIGHT)
        );
        assert_eq!(value("RAGGED_AITER_OK"), i64::from(STATUS_OK));
        assert_eq!(
            value("RAGGED_AITER_UNSUPPORTED"),
            i64::from(STATUS_UNSUPPORTED)
        );
        assert_eq!(value("RAGGED_AITER_BAD_ARGS"), i64::from(STATUS_BAD_ARGS));
        assert_eq!(value("RAGGED_AITER_EXCEPTION"), i64::from(STATUS_EXCEPTION));
        assert_eq!(
            value("RAGGED_AITER_KERNEL_FILE_MISSING"),
            i64::from(STATUS_KERNEL_FILE_MISSING)
        );
    }

    #[test]
    fn layout_is_the_documented_216_bytes_on_lp64() {
        // Hand count: 2 × 4 + 10 pointers × 8 + 25 × 4 = 188 (ABI 2), then qscale_type at 188
        // and three pointers from 192: ABI 2's fields keep their offsets.
        assert_eq!(std::mem::size_of::<RaggedAiterFwdArgs>(), 216);
        assert_eq!(std::mem::offset_of!(RaggedAiterFwdArgs, batch), 88);
        assert_eq!(
            std::mem::offset_of!(RaggedAiterFwdArgs, how_v3_bf16_cvt),
            184
        );
        assert_eq!(std::mem::offset_of!(RaggedAiterFwdArgs, qscale_type), 188);
        assert_eq!(std::mem::offset_of!(RaggedAiterFwdArgs, q_descale_ptr), 192);
        assert_eq!(std::mem::offset_of!(RaggedAiterFwdArgs, v_descale_ptr), 208);
    }
}
