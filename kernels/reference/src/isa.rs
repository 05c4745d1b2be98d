//! Which instruction set the reference's tile loops run on, chosen once per process.
//!
//! The tiles are written over fixed-size arrays (`crate::gemm`) and compiled twice: for AVX2 +
//! FMA and for the baseline target. The process takes AVX2 + FMA where the CPU reports both;
//! `RAGGED_SDPA_CPU_ISA=baseline` forces the baseline build (to measure a machine without them),
//! and any other value is ignored. The benchmark prints the choice beside every figure.
//!
//! An AVX-512 build of the same 16 × 4 micro-kernel (one 16-wide register per lane, with one or
//! two accumulator sets) measured 3–6 % slower than AVX2 + FMA on the Zen 4 dev machine, whose
//! 512-bit FMAs are double-pumped; a 512-bit path needs a wider register tile to pay.

use std::fmt;
use std::sync::OnceLock;

/// Environment variable that caps the instruction set.
pub const ISA_ENV: &str = "RAGGED_SDPA_CPU_ISA";

/// The instruction sets the tiles are compiled for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    Baseline,
    Avx2Fma,
}

impl fmt::Display for Isa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Isa::Baseline => "baseline",
            Isa::Avx2Fma => "avx2+fma",
        })
    }
}

/// The instruction set this process's tiles run on.
pub fn isa() -> Isa {
    static ISA: OnceLock<Isa> = OnceLock::new();
    *ISA.get_or_init(|| choose(detected(), std::env::var(ISA_ENV).ok().as_deref()))
}

/// What the CPU runs, capped by `cap` (the variable's value) where it names a narrower set.
fn choose(detected: Isa, cap: Option<&str>) -> Isa {
    match cap {
        Some("baseline") => Isa::Baseline,
        _ => detected,
    }
}

fn detected() -> Isa {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            return Isa::Avx2Fma;
        }
    }
    Isa::Baseline
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variable_only_narrows_what_the_cpu_runs() {
        assert_eq!(choose(Isa::Avx2Fma, None), Isa::Avx2Fma);
        assert_eq!(choose(Isa::Avx2Fma, Some("baseline")), Isa::Baseline);
        assert_eq!(choose(Isa::Baseline, Some("avx2")), Isa::Baseline);
        assert_eq!(choose(Isa::Avx2Fma, Some("avx512")), Isa::Avx2Fma);
    }
}
