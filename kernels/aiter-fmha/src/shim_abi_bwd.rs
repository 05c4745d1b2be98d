//! Rust mirror of `kernels/aiter-fmha/shim/ragged_aiter_shim_bwd.h`, the C contract of the AITER shim's
//! backward entry (`ragged_aiter_mha_bwd`), versioned apart from the forward's.
//!
//! Checked against the header as the forward's mirror is: a unit test compiles a C program that
//! includes the header and prints `sizeof`/`offsetof` of every field.

use std::ffi::c_void;

/// `RAGGED_AITER_SHIM_BWD_ABI_VERSION`.
pub const SHIM_BWD_ABI_VERSION: u32 = 2;

/// `RAGGED_AITER_LIBRARY_MISSING`: libmha_bwd.so absent, or without `aiter::mha_bwd`.
pub const STATUS_LIBRARY_MISSING: i32 = 5;

/// `RAGGED_AITER_WORKSPACE_TOO_SMALL`: AITER asked for more scratch than the engine reserved.
pub const STATUS_WORKSPACE_TOO_SMALL: i32 = 6;

/// The constant's name for a backward status: the forward's names plus the backward's own.
pub fn bwd_status_name(status: i32) -> &'static str {
    match status {
        STATUS_LIBRARY_MISSING => "RAGGED_AITER_LIBRARY_MISSING",
        STATUS_WORKSPACE_TOO_SMALL => "RAGGED_AITER_WORKSPACE_TOO_SMALL",
        other => super::shim_abi::status_name(other),
    }
}

/// `ragged_aiter_bwd_args`: field for field, in header order. Field meanings are in the header.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RaggedAiterBwdArgs {
    pub struct_size: u32,
    pub data_type: i32,
    pub q_ptr: *const c_void,
    pub k_ptr: *const c_void,
    pub v_ptr: *const c_void,
    pub o_ptr: *const c_void,
    pub do_ptr: *const c_void,
    pub lse_ptr: *const c_void,
    pub d_ptr: *mut c_void,
    pub dq_ptr: *mut c_void,
    pub dk_ptr: *mut c_void,
    pub dv_ptr: *mut c_void,
    pub seqstart_q_ptr: *const i32,
    pub seqstart_k_ptr: *const i32,
    pub cu_seqlen_q_ptr: *const i32,
    pub cu_seqlen_k_ptr: *const i32,
    pub stream: *mut c_void,
    pub batch: i32,
    pub max_seqlen_q: i32,
    pub max_seqlen_k: i32,
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
    pub stride_do: i32,
    pub stride_dq: i32,
    pub stride_dk: i32,
    pub stride_dv: i32,
    pub nhead_stride_q: i32,
    pub nhead_stride_k: i32,
    pub nhead_stride_v: i32,
    pub nhead_stride_o: i32,
    pub nhead_stride_do: i32,
    pub nhead_stride_dq: i32,
    pub nhead_stride_dk: i32,
    pub nhead_stride_dv: i32,
    pub nhead_stride_lsed: i32,
    pub mask_type: i32,
    pub window_size_left: i32,
    pub window_size_right: i32,
    pub scale: f32,
    pub use_asm_v3: i32,
    pub v3_atomic_fp32: i32,
    pub v3_bf16_cvt: i32,
    pub is_deterministic: i32,
    pub aiter_workspace_ptr: *mut c_void,
    pub aiter_workspace_bytes: u64,
}

/// Every field's name and Rust offset, in header order; the layout test walks this list.
pub fn field_offsets() -> Vec<(&'static str, usize)> {
    macro_rules! offsets {
        ($($f:ident),* $(,)?) => {
            vec![$((stringify!($f), std::mem::offset_of!(RaggedAiterBwdArgs, $f))),*]
        };
    }
    offsets!(
        struct_size,
        data_type,
        q_ptr,
        k_ptr,
        v_ptr,
        o_ptr,
        do_ptr,
        lse_ptr,
        d_ptr,
        dq_ptr,
        dk_ptr,
        dv_ptr,
        seqstart_q_ptr,
        seqstart_k_ptr,
        cu_seqlen_q_ptr,
        cu_seqlen_k_ptr,
        stream,
        batch,
        max_seqlen_q,
        max_seqlen_k,
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
        stride_do,
        stride_dq,
        stride_dk,
        stride_dv,
        nhead_stride_q,
        nhead_stride_k,
        nhead_stride_v,
        nhead_stride_o,
        nhead_stride_do,
        nhead_stride_dq,
        nhead_stride_dk,
        nhead_stride_dv,
        nhead_stride_lsed,
        mask_type,
        window_size_left,
        window_size_right,
        scale,
        use_asm_v3,
        v3_atomic_fp32,
        v3_bf16_cvt,
        is_deterministic,
        aiter_workspace_ptr,
        aiter_workspace_bytes,
    )
}

/// The header text, embedded for the layout test.
pub const HEADER: &str = include_str!("../shim/ragged_aiter_shim_bwd.h");

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shim_abi::tests::{assert_layout_matches, c_layout_report, report_values};

    #[test]
    fn header_and_rust_struct_agree_field_by_field() {
        // Both headers: the backward's includes the forward's for the shared constants.
        let report = c_layout_report(
            "bwd-layout",
            &[
                ("ragged_aiter_shim.h", super::super::shim_abi::HEADER),
                ("ragged_aiter_shim_bwd.h", HEADER),
            ],
            "ragged_aiter_shim_bwd.h",
            "ragged_aiter_bwd_args",
            &field_offsets(),
            &[
                "RAGGED_AITER_SHIM_BWD_ABI_VERSION",
                "RAGGED_AITER_LIBRARY_MISSING",
                "RAGGED_AITER_WORKSPACE_TOO_SMALL",
            ],
        );
        let c = report_values(&report);
        // No padding anywhere: every byte belongs to a listed field.
        assert_layout_matches::<RaggedAiterBwdArgs>(&c, &field_offsets(), 0);
        assert_eq!(
            c["RAGGED_AITER_SHIM_BWD_ABI_VERSION"],
            [SHIM_BWD_ABI_VERSION as usize]
        );
        assert_eq!(
            c["RAGGED_AITER_LIBRARY_MISSING"],
            [STATUS_LIBRARY_MISSING as usize]
        );
        assert_eq!(
            c["RAGGED_AITER_WORKSPACE_TOO_SMALL"],
            [STATUS_WORKSPACE_TOO_SMALL as usize]
        );
    }

    #[test]
    fn layout_is_the_hand_counted_280_bytes_on_lp64() {
        // 2 × 4 + 15 pointers × 8 = 128 (offset of `batch`), then 34 four-byte fields to 264,
        // where the workspace pointer and its u64 size follow without padding.
        assert_eq!(std::mem::size_of::<RaggedAiterBwdArgs>(), 280);
        assert_eq!(std::mem::offset_of!(RaggedAiterBwdArgs, batch), 128);
        assert_eq!(
            std::mem::offset_of!(RaggedAiterBwdArgs, is_deterministic),
            260
        );
        assert_eq!(
            std::mem::offset_of!(RaggedAiterBwdArgs, aiter_workspace_ptr),
            264
        );
        assert_eq!(
            std::mem::offset_of!(RaggedAiterBwdArgs, aiter_workspace_bytes),
            272
        );
    }
}
