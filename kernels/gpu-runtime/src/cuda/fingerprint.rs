//! Stable 128-bit fingerprints for the NVRTC disk cache.
//!
//! `std::hash` makes no promise that its output stays the same between Rust releases, and a disk
//! cache outlives the binary that wrote it, so the cache keys use FNV-1a (128-bit), a published
//! function whose value never changes. It is not collision-resistant against an adversary; the
//! cache directory belongs to the user, and each entry also stores its full key and a payload
//! checksum, so an accidental clash or a torn write is detected and recompiled.

/// FNV-1a over 128 bits, fed field by field.
#[derive(Debug, Clone, Copy)]
pub struct Fingerprint(u128);

const OFFSET_BASIS: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
const PRIME: u128 = 0x0000_0000_0100_0000_0000_0000_0000_013b;

impl Default for Fingerprint {
    fn default() -> Self {
        Self(OFFSET_BASIS)
    }
}

impl Fingerprint {
    /// Mixes raw bytes in, exactly as the FNV-1a reference does.
    pub fn bytes(mut self, data: &[u8]) -> Self {
        for &byte in data {
            self.0 ^= u128::from(byte);
            self.0 = self.0.wrapping_mul(PRIME);
        }
        self
    }

    /// Mixes a field in with its length first, so that ("ab", "c") and ("a", "bc") differ.
    pub fn field(self, data: &[u8]) -> Self {
        self.bytes(&(data.len() as u64).to_le_bytes()).bytes(data)
    }

    /// The fingerprint so far.
    pub fn finish(self) -> u128 {
        self.0
    }
}

/// Fingerprint of one byte string (checksums of cache payloads).
pub fn fingerprint(data: &[u8]) -> u128 {
    Fingerprint::default().bytes(data).finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Test vectors from the FNV reference (draft-eastlake-fnv, FNV-1a 128-bit).
    #[test]
    fn matches_published_fnv1a_128_vectors() {
        assert_eq!(fingerprint(b""), 0x6c62272e07bb014262b821756295c58d);
        assert_eq!(fingerprint(b"a"), 0xd228cb696f1a8caf78912b704e4a8964);
        assert_eq!(fingerprint(b"foobar"), 0x343e1662793c64bf6f0d3597ba446f18);
    }

    #[test]
    fn fields_are_length_delimited() {
        let ab_c = Fingerprint::default().field(b"ab").field(b"c").finish();
        let a_bc = Fingerprint::default().field(b"a").field(b"bc").finish();
        assert_ne!(ab_c, a_bc);
    }
}
