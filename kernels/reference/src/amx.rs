//! Intel AMX tiles for bf16 products: detection, the per-thread tile configuration, and safe
//! wrappers over the four instructions the bf16 passes use (`tilezero`, `tileloadd`,
//! `tilestored`, `tdpbf16ps`), as a `crate::tiles::TileUnit`.
//!
//! Every tile is configured as 16 rows of 64 bytes (`crate::tiles` describes the operands). C
//! tiles are tmm0–3, A tiles tmm4 and tmm7, B tiles tmm5 and tmm6, so a loop can load the next A
//! or B while the previous product still reads the other one.
//!
//! Rust has no stable AMX intrinsics; the instructions are written as inline assembly, which the
//! assembler accepts without a target feature. The wrappers check every row a load or store
//! touches against the slice it is given, so callers hold no `unsafe`.

use std::arch::asm;
use std::marker::PhantomData;
use std::sync::OnceLock;

use crate::tiles::{A, B, Bf16Bits, C, ROW_BYTES, ROWS, TileUnit, check_rows};

/// Whether this process may use AMX bf16 tiles: the CPU reports AMX-TILE and AMX-BF16 and the
/// kernel granted the tile data state (Linux asks each process to request it).
pub(crate) fn available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(detect)
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn detect() -> bool {
    // CPUID leaf 7 subleaf 0, EDX bit 22 = AMX-BF16, bit 24 = AMX-TILE.
    let leaf7 = std::arch::x86_64::__cpuid_count(7, 0);
    let cpu = leaf7.edx & (1 << 22) != 0 && leaf7.edx & (1 << 24) != 0;
    if !cpu {
        return false;
    }
    const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
    const XFEATURE_XTILEDATA: libc::c_long = 18;
    // SAFETY: arch_prctl(ARCH_REQ_XCOMP_PERM, feature) only asks the kernel for permission to
    // use an extended state component; it reads and writes no memory of this process.
    let granted = unsafe {
        libc::syscall(
            libc::SYS_arch_prctl,
            ARCH_REQ_XCOMP_PERM,
            XFEATURE_XTILEDATA,
        )
    };
    granted == 0
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn detect() -> bool {
    false
}

/// The tile registers of the calling thread, configured; released when dropped. Not `Send`:
/// the configuration belongs to the thread that loaded it.
pub(crate) struct AmxTiles {
    _thread_bound: PhantomData<*const ()>,
}

#[repr(C, align(64))]
struct Config([u8; 64]);

/// One instruction on the tile `$tile` names: `$before` + register + `$after`, with the
/// operands in `$args` (each followed by a comma).
macro_rules! tile_op {
    ($before:literal, $after:literal, $tile:ident { $($variant:ident => $name:literal),* } $args:tt) => {
        match $tile {
            $( $variant => tile_asm!($before, $name, $after, $args), )*
        }
    };
}

macro_rules! tile_asm {
    ($before:literal, $name:literal, $after:literal, ($($args:tt)*)) => {
        asm!(concat!($before, $name, $after), $($args)* options(nostack))
    };
}

impl TileUnit for AmxTiles {
    /// Configures every tile as 16 rows of 64 bytes. Callers check [`available`] first.
    fn configure() -> AmxTiles {
        assert!(available(), "AMX tiles used without permission");
        let mut config = Config([0; 64]);
        config.0[0] = 1; // palette 1
        for tile in 0..8 {
            config.0[16 + 2 * tile] = ROW_BYTES as u8; // colsb, little-endian u16
            config.0[48 + tile] = ROWS as u8;
        }
        // SAFETY: `available()` confirmed AMX and the permission; the 64-byte, 64-aligned
        // configuration is palette 1 with eight tiles of 16 rows × 64 bytes, within its limits.
        unsafe { asm!("ldtilecfg [{0}]", in(reg) config.0.as_ptr(), options(nostack)) };
        AmxTiles {
            _thread_bound: PhantomData,
        }
    }

    fn zero(&mut self, c: C) {
        use C::*;
        // SAFETY: tiles are configured (`configure`); tilezero touches no memory.
        unsafe {
            tile_op!("tilezero ", "", c { T0 => "tmm0", T1 => "tmm1", T2 => "tmm2", T3 => "tmm3" } ())
        }
    }

    /// C ← 16 rows of 16 f32 from `data[offset + r·stride ..]`.
    fn load_c(&mut self, c: C, data: &[f32], offset: usize, stride: usize) {
        check_rows(data.len(), 4, offset, stride, ROW_BYTES);
        let (base, stride) = (data[offset..].as_ptr(), stride * 4);
        use C::*;
        // SAFETY: `check_rows` showed all 16 rows of 64 bytes lie inside `data`.
        unsafe {
            tile_op!("tileloadd ", ", [{0} + {1}*1]",
                c { T0 => "tmm0", T1 => "tmm1", T2 => "tmm2", T3 => "tmm3" }
                (in(reg) base, in(reg) stride,))
        }
    }

    /// 16 rows of 16 f32 of C → `data[offset + r·stride ..]`.
    fn store_c(&mut self, c: C, data: &mut [f32], offset: usize, stride: usize) {
        check_rows(data.len(), 4, offset, stride, ROW_BYTES);
        let (base, stride) = (data[offset..].as_mut_ptr(), stride * 4);
        use C::*;
        // SAFETY: `check_rows` showed all 16 rows of 64 bytes lie inside `data`, which this
        // call borrows mutably.
        unsafe {
            tile_op!("tilestored [{0} + {1}*1], ", "",
                c { T0 => "tmm0", T1 => "tmm1", T2 => "tmm2", T3 => "tmm3" }
                (in(reg) base, in(reg) stride,))
        }
    }

    /// A ← 16 rows of 32 bf16 from `data[offset + r·stride ..]`: bf16 bits (`u16`) or pairs of
    /// them (`u32`, the even column in the low half).
    fn load_a<T: Bf16Bits>(&mut self, a: A, data: &[T], offset: usize, stride: usize) {
        let size = std::mem::size_of::<T>();
        check_rows(data.len(), size, offset, stride, ROW_BYTES);
        let (base, stride) = (data[offset..].as_ptr(), stride * size);
        use A::*;
        // SAFETY: `check_rows` showed all 16 rows of 64 bytes lie inside `data`.
        unsafe {
            tile_op!("tileloadd ", ", [{0} + {1}*1]", a { T4 => "tmm4", T7 => "tmm7" }
                (in(reg) base, in(reg) stride,))
        }
    }

    /// B ← 16 rows of 16 bf16 pairs (each pair one `u32`) from `data[offset + r·stride ..]`.
    fn load_b(&mut self, b: B, data: &[u32], offset: usize, stride: usize) {
        check_rows(data.len(), 4, offset, stride, ROW_BYTES);
        let (base, stride) = (data[offset..].as_ptr(), stride * 4);
        use B::*;
        // SAFETY: `check_rows` showed all 16 rows of 64 bytes lie inside `data`.
        unsafe {
            tile_op!("tileloadd ", ", [{0} + {1}*1]", b { T5 => "tmm5", T6 => "tmm6" }
                (in(reg) base, in(reg) stride,))
        }
    }

    /// C += A · B in f32 (bf16 products, accumulated with round-to-nearest-even; denormal
    /// inputs and results flush to zero).
    fn dot(&mut self, c: C, a: A, b: B) {
        macro_rules! dot {
            ($($c:ident $a:ident $b:ident => $text:literal),*) => {
                match (c, a, b) {
                    // SAFETY: tiles are configured (`configure`); the product touches no memory.
                    $( (C::$c, A::$a, B::$b) => unsafe { asm!($text, options(nostack)) }, )*
                }
            };
        }
        dot!(
            T0 T4 T5 => "tdpbf16ps tmm0, tmm4, tmm5", T0 T4 T6 => "tdpbf16ps tmm0, tmm4, tmm6",
            T0 T7 T5 => "tdpbf16ps tmm0, tmm7, tmm5", T0 T7 T6 => "tdpbf16ps tmm0, tmm7, tmm6",
            T1 T4 T5 => "tdpbf16ps tmm1, tmm4, tmm5", T1 T4 T6 => "tdpbf16ps tmm1, tmm4, tmm6",
            T1 T7 T5 => "tdpbf16ps tmm1, tmm7, tmm5", T1 T7 T6 => "tdpbf16ps tmm1, tmm7, tmm6",
            T2 T4 T5 => "tdpbf16ps tmm2, tmm4, tmm5", T2 T4 T6 => "tdpbf16ps tmm2, tmm4, tmm6",
            T2 T7 T5 => "tdpbf16ps tmm2, tmm7, tmm5", T2 T7 T6 => "tdpbf16ps tmm2, tmm7, tmm6",
            T3 T4 T5 => "tdpbf16ps tmm3, tmm4, tmm5", T3 T4 T6 => "tdpbf16ps tmm3, tmm4, tmm6",
            T3 T7 T5 => "tdpbf16ps tmm3, tmm7, tmm5", T3 T7 T6 => "tdpbf16ps tmm3, tmm7, tmm6"
        );
    }
}

impl Drop for AmxTiles {
    fn drop(&mut self) {
        // SAFETY: releases this thread's tile configuration; touches no memory.
        unsafe { asm!("tilerelease", options(nostack)) };
    }
}
