//! Engine ids (plugin-abi.md §7): FNV-1a-64 of the engine name, as hipDNN's `engineNameToId`
//! computes them. One implementation for the plugin, which derives its ids from its names (never
//! choosing them), and for the shim, which recomputes the hash of every name a plugin reports at
//! load; it is checked here against the spec's worked values, not against either user.

const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
const PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a-64 over the name's bytes, reinterpreted as `int64_t`; the empty name maps to 0
/// (upstream's special case, not the offset basis). `const` so engine tables can be statics.
pub const fn engine_name_to_id(name: &str) -> i64 {
    let bytes = name.as_bytes();
    if bytes.is_empty() {
        return 0;
    }
    let mut hash = OFFSET_BASIS;
    let mut i = 0;
    while i < bytes.len() {
        hash ^= bytes[i] as u64;
        hash = hash.wrapping_mul(PRIME);
        i += 1;
    }
    hash as i64
}

#[cfg(test)]
mod tests {
    use super::engine_name_to_id;

    #[test]
    fn matches_the_worked_values_of_plugin_abi_7() {
        assert_eq!(engine_name_to_id("a"), -5808556873153909620);
        assert_eq!(engine_name_to_id("a") as u64, 0xaf63dc4c8601ec8c);
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
        assert_eq!(
            engine_name_to_id("RAGGED_SDPA_CUDA_FMHA_NONDETERMINISTIC"),
            -703742951178686843
        );
    }

    #[test]
    fn empty_name_is_zero() {
        assert_eq!(engine_name_to_id(""), 0);
    }
}
