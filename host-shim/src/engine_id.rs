//! Engine ids (plugin-abi.md §7): FNV-1a-64 of the engine name. The host recomputes the hash of
//! every name a plugin reports; the hash is the schema crate's, which is checked against the
//! spec's worked values there (not against any plugin).

pub use ragged_schema::engine_id::engine_name_to_id;

/// The backend's rendering of an id in log lines, and the fallback name of an unnamed engine.
pub fn hex_id(id: i64) -> String {
    format!("0x{:016x}", id as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_id_renders_the_unsigned_id_in_sixteen_digits() {
        assert_eq!(hex_id(-5808556873153909620), "0xaf63dc4c8601ec8c");
        assert_eq!(hex_id(0), "0x0000000000000000");
    }
}
