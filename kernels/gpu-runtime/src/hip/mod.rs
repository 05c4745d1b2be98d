//! The HIP runtime and hipRTC, loaded at run time (no link-time ROCm), in three layers as
//! cudarc does for CUDA: [`sys`] (the raw function tables, every symbol optional), [`result`]
//! (checked calls returning [`HipError`]) and [`safe`] (owned runtime, modules, allocations,
//! hipRTC, copies). Whether HIP is usable in this process is decided once, in
//! [`crate::probe`].
//!
//! Architecture detection reads `gcnArchName` from `hipDeviceProp_tR0600`. HIP has no
//! name-only query for it (`hipDeviceGetAttribute` has no string attribute, and the
//! compute-capability pair does not tell gfx942 from gfx940), so the engine calls
//! `hipGetDevicePropertiesR0600` into an over-sized buffer and reads the name at its offset in
//! the R0600 layout (1160), after checking `hipRuntimeGetVersion() ≥ 6.0`. The offset is held
//! against a field-by-field transcription of the header in this module's tests.

pub mod result;
pub mod safe;
pub mod sys;

use std::path::{Path, PathBuf};

pub use result::HipError;
pub use safe::{HipAllocation, HipFunction, HipModule, HipRuntime, Hiprtc};

use crate::library::rocm_candidates;

/// Sonames tried for the HIP runtime, newest ABI first. HIP 5 (Debian's `libamdhip64-5`) is
/// listed so that the process verdict can say "too old" instead of "absent".
pub const HIP_LIBRARY_NAMES: [&str; 4] = [
    "libamdhip64.so.7",
    "libamdhip64.so.6",
    "libamdhip64.so.5",
    "libamdhip64.so",
];
/// Sonames tried for hipRTC, newest ABI first.
pub const HIPRTC_LIBRARY_NAMES: [&str; 4] = [
    "libhiprtc.so.7",
    "libhiprtc.so.6",
    "libhiprtc.so.5",
    "libhiprtc.so",
];
/// A path here replaces the HIP runtime search (tests, unusual installs).
pub const HIP_RUNTIME_ENV: &str = "RAGGED_SDPA_HIP_RUNTIME";

/// `sizeof(hipDeviceProp_tR0600)` on LP64 (ROCm 6.0 and later).
pub const DEVICE_PROP_R0600_SIZE: usize = 1472;
/// `offsetof(hipDeviceProp_tR0600, gcnArchName)`.
pub const GCN_ARCH_NAME_OFFSET: usize = 1160;
/// `gcnArchName` is `char[256]`.
pub const GCN_ARCH_NAME_LEN: usize = 256;
/// First `HIP_VERSION` (major·10⁷ + minor·10⁵ + patch) with the R0600 layout.
pub const MIN_HIP_VERSION: i32 = 60_000_000;

/// Where the HIP runtime is looked for: `$RAGGED_SDPA_HIP_RUNTIME` alone when set, else ROCm's
/// sonames and directories.
pub fn hip_candidates() -> Vec<PathBuf> {
    match std::env::var_os(HIP_RUNTIME_ENV) {
        Some(path) if !path.is_empty() => vec![PathBuf::from(path)],
        _ => rocm_candidates(&HIP_LIBRARY_NAMES),
    }
}

/// Where hipRTC is looked for.
pub fn hiprtc_candidates() -> Vec<PathBuf> {
    rocm_candidates(&HIPRTC_LIBRARY_NAMES)
}

/// `HIP_VERSION` → "6.2.41133".
pub fn format_hip_version(version: i32) -> String {
    format!(
        "{}.{}.{}",
        version / 10_000_000,
        (version / 100_000) % 100,
        version % 100_000
    )
}

/// Reads `gcnArchName` out of a `hipDeviceProp_tR0600` image.
pub fn arch_from_props(props: &[u8], device: i32) -> Result<String, HipError> {
    let field = props
        .get(GCN_ARCH_NAME_OFFSET..GCN_ARCH_NAME_OFFSET + GCN_ARCH_NAME_LEN)
        .unwrap_or(&[]);
    let name = field
        .iter()
        .position(|&b| b == 0)
        .map(|end| &field[..end])
        .filter(|n| n.starts_with(b"gfx") && n.iter().all(|b| b.is_ascii_graphic()));
    match name {
        Some(n) => Ok(String::from_utf8_lossy(n).into_owned()),
        None => Err(HipError::BadArchName {
            device,
            first_bytes: field.iter().take(16).copied().collect(),
        }),
    }
}

/// Source of the test stand-in for `libamdhip64` (one device, device memory in a side table);
/// the plugin's integration tests compile the same file.
pub const FAKE_HIP_SOURCE: &str = include_str!("fake_amdhip64.c");

/// Compiles a test stand-in's C `source` into the shared library `dir/<out_name>` with the
/// system C compiler (`CC`, else `cc`), `-I dir` and `defines`: the one build of every fake
/// the tests load (this module's HIP runtime, the AITER fixtures, the plugin's staging tests).
/// For tests, so it panics when the compiler fails.
pub fn compile_fake_library(dir: &Path, out_name: &str, source: &str, defines: &[&str]) -> PathBuf {
    std::fs::create_dir_all(dir).expect("create fake dir");
    // One source file per library: two fakes may be compiled at once by parallel tests.
    let src = dir.join(format!("{out_name}.c"));
    std::fs::write(&src, source).expect("write fake source");
    let out = dir.join(out_name);
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let status = std::process::Command::new(&cc)
        .args([
            "-std=c11",
            "-D_GNU_SOURCE",
            "-shared",
            "-fPIC",
            "-Wall",
            "-Werror",
            "-I",
        ])
        .arg(dir)
        .args(defines)
        .arg(&src)
        .arg("-o")
        .arg(&out)
        .status()
        .expect("run the C compiler (set CC if `cc` is not on PATH)");
    assert!(status.success(), "{cc} failed on the fake {out_name}");
    out
}

/// [`FAKE_HIP_SOURCE`] compiled once per test process, with `defines`, into `LIB`.
fn fake_hip_once(
    lib: &'static std::sync::OnceLock<PathBuf>,
    file: &str,
    defines: &[&str],
) -> &'static Path {
    lib.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("ragged-fake-hip-{}", std::process::id()));
        compile_fake_library(&dir, file, FAKE_HIP_SOURCE, defines)
    })
}

/// The fake HIP runtime.
pub fn fake_hip_library() -> &'static Path {
    static LIB: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    fake_hip_once(&LIB, "libamdhip64.so.6", &[])
}

/// The fake without the copy path's functions (`-DFAKE_HIP_NO_COPIES`).
pub fn fake_hip_library_without_copies() -> &'static Path {
    static LIB: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    fake_hip_once(&LIB, "libamdhip64-nocopy.so.6", &["-DFAKE_HIP_NO_COPIES"])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `hipDeviceProp_tR0600` transcribed field by field from ROCm's hip_runtime_api.h
    /// (projects/hip/include/hip/hip_runtime_api.h in ROCm/rocm-systems); runs of fields with
    /// one type are written as arrays, which changes no offset. Only used to hold the two
    /// constants above against the header.
    #[repr(C)]
    #[allow(dead_code)]
    struct DevicePropR0600 {
        name: [u8; 256],
        uuid: [u8; 16],
        luid: [u8; 8],
        luid_device_node_mask: u32,
        total_global_mem: usize,
        shared_mem_per_block: usize,
        regs_per_block: i32,
        warp_size: i32,
        mem_pitch: usize,
        max_threads_per_block: i32,
        max_threads_dim: [i32; 3],
        max_grid_size: [i32; 3],
        clock_rate: i32,
        total_const_mem: usize,
        major: i32,
        minor: i32,
        texture_alignment: usize,
        texture_pitch_alignment: usize,
        // deviceOverlap … maxTexture1DLinear (9 ints)
        ints_a: [i32; 9],
        max_texture_2d: [i32; 2],
        max_texture_2d_mipmap: [i32; 2],
        max_texture_2d_linear: [i32; 3],
        max_texture_2d_gather: [i32; 2],
        max_texture_3d: [i32; 3],
        max_texture_3d_alt: [i32; 3],
        max_texture_cubemap: i32,
        max_texture_1d_layered: [i32; 2],
        max_texture_2d_layered: [i32; 3],
        max_texture_cubemap_layered: [i32; 2],
        max_surface_1d: i32,
        max_surface_2d: [i32; 2],
        max_surface_3d: [i32; 3],
        max_surface_1d_layered: [i32; 2],
        max_surface_2d_layered: [i32; 3],
        max_surface_cubemap: i32,
        max_surface_cubemap_layered: [i32; 2],
        surface_alignment: usize,
        // concurrentKernels … localL1CacheSupported (16 ints)
        ints_b: [i32; 16],
        shared_mem_per_multiprocessor: usize,
        // regsPerMultiprocessor … cooperativeMultiDeviceLaunch (12 ints)
        ints_c: [i32; 12],
        shared_mem_per_block_optin: usize,
        // pageableMemoryAccessUsesHostPageTables … accessPolicyMaxWindowSize (4 ints)
        ints_d: [i32; 4],
        reserved_shared_mem_per_block: usize,
        // hostRegisterSupported … unifiedFunctionPointers (13 ints / unsigned ints)
        ints_e: [i32; 13],
        reserved: [i32; 63],
        hip_reserved: [i32; 32],
        gcn_arch_name: [u8; 256],
        max_shared_memory_per_multi_processor: usize,
        clock_instruction_rate: i32,
        arch: u32,
        hdp_mem_flush_cntl: *mut u32,
        hdp_reg_flush_cntl: *mut u32,
        // cooperativeMultiDeviceUnmatchedFunc … asicRevision (6 ints)
        ints_f: [i32; 6],
    }

    #[test]
    fn gcn_arch_name_offset_matches_the_header_transcription() {
        assert_eq!(
            std::mem::offset_of!(DevicePropR0600, gcn_arch_name),
            GCN_ARCH_NAME_OFFSET
        );
        assert_eq!(
            std::mem::size_of::<DevicePropR0600>(),
            DEVICE_PROP_R0600_SIZE
        );
    }

    fn props_with_name(name: &[u8]) -> Vec<u8> {
        let mut props = vec![0xAAu8; DEVICE_PROP_R0600_SIZE];
        props[GCN_ARCH_NAME_OFFSET..GCN_ARCH_NAME_OFFSET + GCN_ARCH_NAME_LEN].fill(0);
        props[GCN_ARCH_NAME_OFFSET..GCN_ARCH_NAME_OFFSET + name.len()].copy_from_slice(name);
        props
    }

    #[test]
    fn arch_is_read_at_the_r0600_offset_with_target_features() {
        let arch =
            arch_from_props(&props_with_name(b"gfx942:sramecc+:xnack-"), 0).expect("valid name");
        assert_eq!(arch, "gfx942:sramecc+:xnack-");
    }

    #[test]
    fn garbage_at_the_offset_is_an_error_naming_the_device() {
        let err = arch_from_props(&props_with_name(b"MI300X"), 3).expect_err("not a gfx name");
        assert!(err.to_string().contains("device 3"), "{err}");
        let mut unterminated = props_with_name(b"");
        unterminated[GCN_ARCH_NAME_OFFSET..GCN_ARCH_NAME_OFFSET + GCN_ARCH_NAME_LEN].fill(b'g');
        assert!(arch_from_props(&unterminated, 0).is_err());
        assert!(arch_from_props(&[0u8; 100], 0).is_err(), "short buffer");
    }

    #[test]
    fn default_candidates_try_sonames_then_rocm_dirs() {
        let c = rocm_candidates(&HIP_LIBRARY_NAMES);
        assert_eq!(c[0], PathBuf::from("libamdhip64.so.7"));
        assert_eq!(c[2], PathBuf::from("libamdhip64.so.5"));
        assert!(c.contains(&PathBuf::from("/opt/rocm/lib/libamdhip64.so.6")));
    }

    #[test]
    fn versions_read_like_rocm_releases() {
        assert_eq!(format_hip_version(60_241_133), "6.2.41133");
        assert_eq!(format_hip_version(50_222_000), "5.2.22000");
    }

    #[test]
    fn missing_hip_runtime_names_every_candidate() {
        let tried = vec![
            PathBuf::from("/nonexistent/libamdhip64.so.7"),
            PathBuf::from("libamdhip64-not-here.so"),
        ];
        let err = HipRuntime::load_from(&tried).err().expect("cannot load");
        let text = err.to_string();
        assert!(
            text.starts_with("HIP runtime (libamdhip64) not found"),
            "{text}"
        );
        assert!(
            text.contains("/nonexistent/libamdhip64.so.7, libamdhip64-not-here.so"),
            "{text}"
        );
        let err = Hiprtc::load_from(&tried[..1]).err().expect("cannot load");
        assert!(
            err.to_string().starts_with("hipRTC (libhiprtc) not found"),
            "{err}"
        );
    }

    #[test]
    fn a_library_without_hip_symbols_loads_and_each_call_names_its_symbol() {
        // libc loads everywhere and has no HIP symbol: the table loads with every entry absent,
        // and the checked layer refuses each call by name instead of panicking.
        let sys = sys::HipSys::load(&[PathBuf::from("libc.so.6")]).expect("libc loads");
        assert!(sys.init.function.is_none());
        let text = result::device_count(&sys)
            .expect_err("no hipInit")
            .to_string();
        assert!(text.contains("lacks symbol `hipInit`"), "{text}");
        let text = result::pointer_attributes(&sys, 0x1000)
            .expect_err("no hipPointerGetAttributes")
            .to_string();
        assert!(text.contains("`hipPointerGetAttributes`"), "{text}");
        let err = HipRuntime::load_from(&[PathBuf::from("libc.so.6")])
            .err()
            .expect("libc is not HIP");
        assert!(err.to_string().contains("`hipRuntimeGetVersion`"), "{err}");
    }
}
