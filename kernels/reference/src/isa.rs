//! Which instruction set the reference's tile loops run on, chosen once per process.
//!
//! The tiles are written over fixed-size arrays (`crate::gemm`) and compiled three times: for
//! AVX-512 (F, BW, VL) with 2 × 2 register blocks ([`crate::gemm::Wide`]), for AVX2 + FMA with
//! 1 × 1 blocks, and for the baseline target. The process takes the widest set the CPU reports;
//! `RAGGED_SDPA_CPU_ISA` caps it (`avx2` or `baseline`, to measure a machine without the wider
//! sets on one that has them), and any other value is ignored. The benchmark prints the choice
//! beside every figure.

use std::fmt;
use std::sync::OnceLock;

/// Environment variable that caps the instruction set.
pub const ISA_ENV: &str = "RAGGED_SDPA_CPU_ISA";

/// The instruction sets the tiles are compiled for, narrowest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Isa {
    Baseline,
    Avx2Fma,
    Avx512,
}

impl Isa {
    fn name(self) -> &'static str {
        match self {
            Isa::Baseline => "baseline",
            Isa::Avx2Fma => "avx2",
            Isa::Avx512 => "avx512",
        }
    }
}

impl fmt::Display for Isa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Isa::Baseline => "baseline",
            Isa::Avx2Fma => "avx2+fma",
            Isa::Avx512 => "avx512f/bw/vl",
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
    let named = [Isa::Baseline, Isa::Avx2Fma, Isa::Avx512]
        .into_iter()
        .find(|isa| Some(isa.name()) == cap);
    match named {
        Some(cap) => detected.min(cap),
        None => detected,
    }
}

fn detected() -> Isa {
    #[cfg(target_arch = "x86_64")]
    {
        let avx2 = std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma");
        let avx512 = std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx512bw")
            && std::is_x86_feature_detected!("avx512vl");
        if avx2 && avx512 {
            return Isa::Avx512;
        }
        if avx2 {
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
        assert_eq!(choose(Isa::Avx512, None), Isa::Avx512);
        assert_eq!(choose(Isa::Avx512, Some("avx2")), Isa::Avx2Fma);
        assert_eq!(choose(Isa::Avx512, Some("baseline")), Isa::Baseline);
        assert_eq!(choose(Isa::Avx2Fma, Some("baseline")), Isa::Baseline);
        assert_eq!(choose(Isa::Baseline, Some("avx2")), Isa::Baseline);
        assert_eq!(choose(Isa::Avx2Fma, Some("avx512")), Isa::Avx2Fma);
        assert_eq!(choose(Isa::Avx2Fma, Some("sse")), Isa::Avx2Fma);
    }
}
