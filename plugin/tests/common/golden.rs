//! The golden wire fixtures (copied from shared/testdata/wire) and the tolerance check of
//! ragged-sdpa.md §8 against their float64 oracle.

#![allow(dead_code)]

use std::path::PathBuf;

/// NaN-payload bf16 written into O before execute; unwritten positions must keep it.
pub const BF16_SENTINEL: u16 = 0x7FD1;

pub fn golden_file(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name)
}

pub fn npy<T: npyz::Deserialize>(name: &str) -> Vec<T> {
    let bytes = std::fs::read(golden_file(name)).expect("golden .npy exists");
    npyz::NpyFile::new(&bytes[..])
        .and_then(|f| f.into_vec::<T>())
        .unwrap_or_else(|e| panic!("{name}: {e}"))
}

pub fn bf16_to_f64(bits: u16) -> f64 {
    f64::from(f32::from_bits(u32::from(bits) << 16))
}

/// ragged-sdpa.md §8: `|x − ref| ≤ atol + rtol·|ref|`, −∞ exact, NaN oracle = never written.
pub fn check_against_oracle(name: &str, got: &[f64], sentinel: &[bool], oracle: &[f64], tol: f64) {
    assert_eq!(got.len(), oracle.len(), "{name} length");
    for (i, ((&x, &r), &untouched)) in got.iter().zip(oracle).zip(sentinel).enumerate() {
        if r.is_nan() {
            assert!(
                untouched,
                "{name}[{i}] written but the oracle says it must not be"
            );
        } else if r.is_infinite() {
            assert_eq!(x, r, "{name}[{i}]");
        } else {
            assert!(
                (x - r).abs() <= tol + tol * r.abs(),
                "{name}[{i}] = {x}, oracle {r}"
            );
        }
    }
}
