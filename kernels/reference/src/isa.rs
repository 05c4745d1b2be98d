//! Which instruction set the reference's tile loops run on, chosen once per process.
//!
//! The tiles are written over fixed-size arrays (`crate::gemm`) and compiled three times: for
//! AVX-512 (F, BW, VL) with 2 × 2 register blocks (`gemm::Wide`), for AVX2 + FMA with 8 × 12
//! blocks (`gemm::Split`), and for the baseline target. bf16 passes run on bf16 tiles
//! (`crate::tiles`: `sdpa::tile_bf16`, `sdpa_backward::bf16_tiles`) where the CPU multiplies bf16
//! natively: on AMX-BF16 tiles where the kernel grants them, else on AVX-512 BF16 dot products;
//! everything else runs on the AVX-512 build. The process takes the widest set the CPU reports;
//! `RAGGED_SDPA_CPU_ISA` caps it (`avx512bf16`, `avx512`, `avx2` or `baseline`, to measure a
//! machine without the wider sets on one that has them), and any other value is ignored. The
//! benchmark prints the choice beside every figure.

use std::fmt;

use ragged_core::dtype::DataType;
use std::sync::OnceLock;

/// Environment variable that caps the instruction set.
pub const ISA_ENV: &str = "RAGGED_SDPA_CPU_ISA";

/// The instruction sets the tiles are compiled for, narrowest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Isa {
    Baseline,
    Avx2Fma,
    Avx512,
    /// AVX-512 with its BF16 dot product (`vdpbf16ps`).
    Avx512Bf16,
    /// AVX-512, its BF16 instructions and AMX-BF16 tiles.
    Amx,
}

impl Isa {
    fn name(self) -> &'static str {
        match self {
            Isa::Baseline => "baseline",
            Isa::Avx2Fma => "avx2",
            Isa::Avx512 => "avx512",
            Isa::Avx512Bf16 => "avx512bf16",
            Isa::Amx => "amx",
        }
    }
}

impl fmt::Display for Isa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Isa::Baseline => "baseline",
            Isa::Avx2Fma => "avx2+fma",
            Isa::Avx512 => "avx512f/bw/vl",
            Isa::Avx512Bf16 => "avx512-bf16",
            Isa::Amx => "amx-bf16+avx512",
        })
    }
}

/// The instruction set this process's tiles run on.
pub fn isa() -> Isa {
    static ISA: OnceLock<Isa> = OnceLock::new();
    *ISA.get_or_init(|| choose(detected(), std::env::var(ISA_ENV).ok().as_deref()))
}

/// The instruction set a pass over `dtype` runs on, forward or backward: bf16 tiles serve bf16;
/// every other element type of such a machine runs the AVX-512 build.
pub fn isa_for(dtype: DataType) -> Isa {
    match isa() {
        Isa::Amx | Isa::Avx512Bf16 if dtype != DataType::BF16 => Isa::Avx512,
        isa => isa,
    }
}

/// The unit bf16 passes multiply on (the forward's `sdpa::tile_bf16` and the backward's
/// `sdpa_backward::bf16_tiles`, through `crate::tiles`), where the process may use one and the
/// instruction-set cap allows it; `None`: they run on the f32 tiles.
pub(crate) fn bf16_tiles() -> Option<Bf16Tiles> {
    match isa() {
        Isa::Amx => Some(Bf16Tiles::Amx),
        Isa::Avx512Bf16 => Some(Bf16Tiles::Dot),
        _ => None,
    }
}

/// The two `crate::tiles::TileUnit`s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bf16Tiles {
    /// AMX tile registers (`crate::amx`).
    Amx,
    /// AVX-512 BF16 dot products on tiles in memory (`crate::bf16_dot`).
    Dot,
}

/// Whether the AVX-512 build (F, BW, VL, AVX2, FMA) runs here, alone or beside bf16 tiles.
pub(crate) fn has_avx512() -> bool {
    isa() >= Isa::Avx512
}

/// What the CPU runs, capped by `cap` (the variable's value) where it names a narrower set.
fn choose(detected: Isa, cap: Option<&str>) -> Isa {
    let named = [
        Isa::Baseline,
        Isa::Avx2Fma,
        Isa::Avx512,
        Isa::Avx512Bf16,
        Isa::Amx,
    ]
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
        // The tile paths convert to bf16 with AVX-512 BF16, which every AMX-BF16 CPU has.
        let bf16 = std::is_x86_feature_detected!("avx512bf16");
        if avx2 && avx512 && bf16 && crate::amx::available() {
            return Isa::Amx;
        }
        if avx2 && avx512 && bf16 && crate::bf16_dot::available() {
            return Isa::Avx512Bf16;
        }
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
        assert_eq!(choose(Isa::Amx, Some("avx512")), Isa::Avx512);
        assert_eq!(choose(Isa::Amx, Some("amx")), Isa::Amx);
        assert_eq!(choose(Isa::Amx, Some("avx512bf16")), Isa::Avx512Bf16);
        assert_eq!(choose(Isa::Avx512Bf16, Some("avx512")), Isa::Avx512);
        assert_eq!(choose(Isa::Avx512Bf16, Some("amx")), Isa::Avx512Bf16);
        assert_eq!(choose(Isa::Avx512, Some("avx512bf16")), Isa::Avx512);
        assert_eq!(choose(Isa::Avx512, Some("amx")), Isa::Avx512);
        assert_eq!(choose(Isa::Avx512, Some("avx2")), Isa::Avx2Fma);
        assert_eq!(choose(Isa::Avx512, Some("baseline")), Isa::Baseline);
        assert_eq!(choose(Isa::Avx2Fma, Some("baseline")), Isa::Baseline);
        assert_eq!(choose(Isa::Baseline, Some("avx2")), Isa::Baseline);
        assert_eq!(choose(Isa::Avx2Fma, Some("avx512")), Isa::Avx2Fma);
        assert_eq!(choose(Isa::Avx2Fma, Some("sse")), Isa::Avx2Fma);
    }
}
