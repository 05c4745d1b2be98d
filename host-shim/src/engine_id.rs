//! Engine ids (plugin-abi.md §7): FNV-1a-64 of the engine name. The host recomputes the hash of
//! every name a plugin reports, so this is the verifier's own copy, checked against the worked
//! values of the spec rather than against any plugin.

/// `engineNameToId`: empty name ⇒ 0; otherwise FNV-1a-64 over the bytes, reinterpreted as `i64`.
pub fn engine_name_to_id(name: &str) -> i64 {
    if name.is_empty() {
        return 0;
    }
    let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    hash as i64
}

/// The backend's rendering of an id in log lines, and the fallback name of an unnamed engine.
pub fn hex_id(id: i64) -> String {
    format!("0x{:016x}", id as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worked_values_of_plugin_abi_7() {
        assert_eq!(engine_name_to_id("a"), -5808556873153909620);
        assert_eq!(hex_id(engine_name_to_id("a")), "0xaf63dc4c8601ec8c");
        assert_eq!(
            engine_name_to_id("RAGGED_SDPA_HOST_REFERENCE"),
            8202884889727546333
        );
        assert_eq!(
            engine_name_to_id("RAGGED_SDPA_CUDA_FMHA"),
            -8390111541657994951
        );
        assert_eq!(
            engine_name_to_id("RAGGED_SDPA_AITER_FMHA"),
            -7892907548674631411
        );
        assert_eq!(engine_name_to_id(""), 0);
    }
}
