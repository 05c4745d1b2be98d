//! The AITER shim (`libragged_aiter_shim.so`), loaded at run time with `libloading`.
//!
//! The shim is built on a ROCm machine by `kernels/aiter-fmha/shim/build_shim.sh` and installed next to
//! the plugin; `$RAGGED_SDPA_AITER_SHIM` names another file. Loading checks the ABI version
//! before anything else, so a shim built from another header revision is refused with both
//! numbers instead of being called with a struct it misreads.

use std::ffi::{CStr, c_char};
use std::path::{Path, PathBuf};

use libloading::Library;

use super::error::AiterError;
use super::shim_abi::{
    RaggedAiterFwdArgs, SHIM_ABI_VERSION, STATUS_OK, STATUS_UNSUPPORTED, status_name,
};
use super::shim_abi_bwd::{RaggedAiterBwdArgs, SHIM_BWD_ABI_VERSION};
use ragged_gpu_runtime::library;

/// Environment variable naming the shim file explicitly.
pub const SHIM_ENV: &str = "RAGGED_SDPA_AITER_SHIM";
/// The shim's file name when it sits next to the plugin.
pub const SHIM_FILE_NAME: &str = "libragged_aiter_shim.so";

type AbiVersion = unsafe extern "C" fn() -> u32;
type GpuTargets = unsafe extern "C" fn() -> *const c_char;
type MhaFwd = unsafe extern "C" fn(*const RaggedAiterFwdArgs) -> i32;
type Preflight = unsafe extern "C" fn(*const RaggedAiterFwdArgs, *mut c_char, u32) -> i32;
type LastError = unsafe extern "C" fn() -> *const c_char;
type BwdAvailable = unsafe extern "C" fn(*mut c_char, u32) -> i32;
type MhaBwd = unsafe extern "C" fn(*const RaggedAiterBwdArgs) -> i32;

/// Where to look for the shim, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShimSearch {
    /// The value of `$RAGGED_SDPA_AITER_SHIM`, if set.
    pub env_override: Option<PathBuf>,
    /// The directory holding the plugin library, if known.
    pub plugin_dir: Option<PathBuf>,
}

impl ShimSearch {
    /// Reads `$RAGGED_SDPA_AITER_SHIM`; `plugin_dir` comes from the plugin (it knows its path).
    pub fn from_env(plugin_dir: Option<&Path>) -> Self {
        Self {
            env_override: std::env::var_os(SHIM_ENV).map(PathBuf::from),
            plugin_dir: plugin_dir.map(Path::to_path_buf),
        }
    }

    /// Candidate files: the override alone when set (an explicit choice must not silently fall
    /// back to another file), else the file next to the plugin.
    pub fn candidates(&self) -> Vec<PathBuf> {
        match (&self.env_override, &self.plugin_dir) {
            (Some(file), _) => vec![file.clone()],
            (None, Some(dir)) => vec![dir.join(SHIM_FILE_NAME)],
            (None, None) => Vec::new(),
        }
    }

    /// What was searched, for the "not found" log line.
    pub fn describe(&self) -> String {
        match (&self.env_override, &self.plugin_dir) {
            (Some(file), _) => format!("${SHIM_ENV}={}", file.display()),
            (None, Some(dir)) => {
                format!("${SHIM_ENV} unset; {}", dir.join(SHIM_FILE_NAME).display())
            }
            (None, None) => format!("${SHIM_ENV} unset and the plugin directory is unknown"),
        }
    }
}

/// A loaded, version-checked shim.
pub struct ShimLibrary {
    /// `ragged_aiter_mha_bwd` with the library it found, or why the backward cannot run.
    backward: Result<(MhaBwd, String), String>,
    mha_fwd: MhaFwd,
    preflight: Preflight,
    last_error: LastError,
    gpu_targets: String,
    path: PathBuf,
    _lib: Library,
}

fn c_string(ptr: *const c_char) -> String {
    if ptr.is_null() {
        return String::new();
    }
    // SAFETY: the shim contract returns NUL-terminated strings valid until its next call on
    // this thread; the text is copied out at once.
    unsafe { CStr::from_ptr(ptr) }
        .to_string_lossy()
        .into_owned()
}

impl ShimLibrary {
    /// Loads the first candidate of `search` and checks its ABI version.
    pub fn load(search: &ShimSearch) -> Result<Self, AiterError> {
        const LIB: &str = "AITER shim (libragged_aiter_shim)";
        let candidates = search.candidates();
        if candidates.is_empty() {
            return Err(AiterError::LibraryNotFound {
                library: LIB,
                tried: search.describe(),
                last_error: String::from("nothing to try"),
            });
        }
        let (lib, path) = open_first(LIB, &candidates)?;
        // SAFETY: the aliases transcribe the prototypes in kernels/aiter-fmha/shim/ragged_aiter_shim.h.
        // The version comes first: an older shim lacks the preflight, and must be refused with
        // both version numbers rather than a missing-symbol error.
        let abi_version =
            unsafe { resolve::<AbiVersion>(&lib, LIB, &path, "ragged_aiter_shim_abi_version")? };
        // SAFETY: takes no arguments and returns a constant.
        let found = unsafe { abi_version() };
        if found != SHIM_ABI_VERSION {
            return Err(AiterError::ShimAbiMismatch {
                path,
                found,
                expected: SHIM_ABI_VERSION,
            });
        }
        // SAFETY: as above; resolved only once the version says these prototypes apply.
        let (gpu_targets, mha_fwd, preflight, last_error) = unsafe {
            (
                resolve::<GpuTargets>(&lib, LIB, &path, "ragged_aiter_shim_gpu_targets")?,
                resolve::<MhaFwd>(&lib, LIB, &path, "ragged_aiter_mha_fwd")?,
                resolve::<Preflight>(&lib, LIB, &path, "ragged_aiter_mha_fwd_preflight")?,
                resolve::<LastError>(&lib, LIB, &path, "ragged_aiter_shim_last_error")?,
            )
        };
        // SAFETY: takes no arguments and returns a static string.
        let gpu_targets = c_string(unsafe { gpu_targets() });
        // SAFETY: looked up by the header's names and prototypes; see `load_backward`.
        let backward = unsafe { load_backward(&lib, &path, last_error) };
        Ok(Self {
            backward,
            mha_fwd,
            preflight,
            last_error,
            gpu_targets,
            path,
            _lib: lib,
        })
    }

    /// The file that was loaded.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The GPU targets the shim was built for (`gfx942;gfx950`).
    pub fn gpu_targets(&self) -> &str {
        &self.gpu_targets
    }

    /// Whether the backward can run: `Ok(path of libmha_bwd.so)`, or the reason it cannot (an
    /// older shim without the entry, another backward ABI, libmha_bwd.so or its `aiter::mha_bwd`
    /// absent).
    pub fn backward_available(&self) -> Result<&str, &str> {
        match &self.backward {
            Ok((_, path)) => Ok(path),
            Err(reason) => Err(reason),
        }
    }

    /// Calls `ragged_aiter_mha_bwd`: enqueues AITER's backward on `args.stream`.
    ///
    /// # Safety
    /// Every pointer in `args` must be device memory of the sizes `ragged_aiter_shim_bwd.h`
    /// documents, valid until `args.stream` reaches the last kernel.
    pub unsafe fn mha_bwd(&self, args: &RaggedAiterBwdArgs) -> Result<(), AiterError> {
        let (mha_bwd, _) = self.backward.as_ref().map_err(|reason| AiterError::Shim {
            status: super::shim_abi_bwd::STATUS_LIBRARY_MISSING,
            meaning: "RAGGED_AITER_LIBRARY_MISSING",
            message: reason.clone(),
        })?;
        // SAFETY: `args` is a live, fully initialised struct of the header's layout (held by the
        // layout test); the caller guarantees the pointers.
        let status = unsafe { mha_bwd(args) };
        if status == STATUS_OK {
            return Ok(());
        }
        Err(AiterError::Shim {
            status,
            meaning: super::shim_abi_bwd::bwd_status_name(status),
            message: self.last_error(),
        })
    }

    fn last_error(&self) -> String {
        // SAFETY: takes no arguments; returns this thread's message.
        c_string(unsafe { (self.last_error)() })
    }

    /// Calls `ragged_aiter_mha_fwd_preflight`: `Ok(path)` names the kernel AITER would run
    /// (`asm <kernel> from <file>` or `ck`); `Err((status, message))` is why none would run,
    /// including the case where AITER would abort the process on an unreadable `.co` file.
    pub fn preflight(&self, args: &RaggedAiterFwdArgs) -> Result<String, (i32, String)> {
        let mut choice = [0 as c_char; 512];
        let size = u32::try_from(choice.len()).unwrap_or(0);
        // SAFETY: `args` is a live struct of the header's layout; the preflight reads no pointer
        // in it (header contract) and writes at most `size` bytes, NUL included, into `choice`.
        let status = unsafe { (self.preflight)(args, choice.as_mut_ptr(), size) };
        if status == STATUS_OK {
            Ok(c_string(choice.as_ptr()))
        } else {
            Err((status, self.last_error()))
        }
    }

    /// Calls `ragged_aiter_mha_fwd`; with `args.v3_api_check == 1` this only asks AITER
    /// whether asm would run (the answer is `Ok(true)`/`Ok(false)`), otherwise it enqueues the
    /// forward and `Ok(true)` means "enqueued".
    ///
    /// # Safety
    /// Unless `args.v3_api_check == 1`, every pointer in `args` must be device memory of the
    /// sizes the header documents, valid until `args.stream` reaches the kernel.
    pub unsafe fn mha_fwd(&self, args: &RaggedAiterFwdArgs) -> Result<bool, AiterError> {
        // SAFETY: `args` is a live, fully initialised struct of the header's layout (held by the
        // layout test); the caller guarantees the pointers.
        let status = unsafe { (self.mha_fwd)(args) };
        match status {
            STATUS_OK => Ok(true),
            STATUS_UNSUPPORTED if args.v3_api_check != 0 => Ok(false),
            _ => Err(AiterError::Shim {
                status,
                meaning: status_name(status),
                message: self.last_error(),
            }),
        }
    }
}

/// The shim's optional backward entry: detected by symbol, so a shim built before it still serves
/// the forward. Asks the shim once whether it finds `aiter::mha_bwd` in libmha_bwd.so.
///
/// # Safety
/// `lib` is the loaded shim and `last_error` its `ragged_aiter_shim_last_error`.
unsafe fn load_backward(
    lib: &Library,
    path: &Path,
    last_error: LastError,
) -> Result<(MhaBwd, String), String> {
    const LIB: &str = "AITER shim (libragged_aiter_shim)";
    let lacks = |symbol: &str| {
        format!(
            "the AITER shim at {} has no backward entry ({symbol} absent: built before \
             ragged_aiter_shim_bwd.h; rebuild it with kernels/aiter-fmha/shim/build_shim.sh)",
            path.display()
        )
    };
    // SAFETY: `uint32_t (void)` in ragged_aiter_shim_bwd.h.
    let version =
        unsafe { resolve::<AbiVersion>(lib, LIB, path, "ragged_aiter_shim_bwd_abi_version") }
            .map_err(|_| lacks("ragged_aiter_shim_bwd_abi_version"))?;
    // SAFETY: takes no arguments and returns a constant.
    let found = unsafe { version() };
    if found != SHIM_BWD_ABI_VERSION {
        return Err(format!(
            "the AITER shim at {} reports backward ABI version {found}, this plugin needs \
             {SHIM_BWD_ABI_VERSION}",
            path.display()
        ));
    }
    // SAFETY: the prototypes of ragged_aiter_shim_bwd.h, whose version was just checked.
    let (available, mha_bwd) = unsafe {
        (
            resolve::<BwdAvailable>(lib, LIB, path, "ragged_aiter_mha_bwd_available")
                .map_err(|_| lacks("ragged_aiter_mha_bwd_available"))?,
            resolve::<MhaBwd>(lib, LIB, path, "ragged_aiter_mha_bwd")
                .map_err(|_| lacks("ragged_aiter_mha_bwd"))?,
        )
    };
    let mut where_ = [0 as c_char; 512];
    let size = u32::try_from(where_.len()).unwrap_or(0);
    // SAFETY: writes at most `size` bytes, NUL included, into `where_`; launches nothing.
    let status = unsafe { available(where_.as_mut_ptr(), size) };
    if status == STATUS_OK {
        Ok((mha_bwd, c_string(where_.as_ptr())))
    } else {
        // SAFETY: takes no arguments; returns this thread's message.
        Err(c_string(unsafe { last_error() }))
    }
}

/// Opens the first loadable shim candidate.
fn open_first(
    library: &'static str,
    candidates: &[PathBuf],
) -> Result<(libloading::Library, PathBuf), AiterError> {
    library::open_first(candidates).map_err(|e| AiterError::LibraryNotFound {
        library,
        tried: e.tried,
        last_error: e.last_error,
    })
}

/// Resolves one shim symbol.
///
/// # Safety
/// `T` must be the exact C signature of `symbol`.
unsafe fn resolve<T: Copy>(
    lib: &libloading::Library,
    library: &'static str,
    path: &Path,
    symbol: &'static str,
) -> Result<T, AiterError> {
    // SAFETY: forwarded contract.
    unsafe { library::symbol::<T>(lib, symbol) }.map_err(|source| AiterError::MissingSymbol {
        library,
        path: path.to_path_buf(),
        symbol,
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::applicability::{GpuArch, check_applicability};
    use crate::fixtures::{self, base_problem, fake_rocm, operand};
    use crate::mapping::{DeviceBuffers, shim_args};

    #[test]
    fn an_explicit_override_is_the_only_candidate() {
        let s = ShimSearch {
            env_override: Some(PathBuf::from("/opt/x/libshim.so")),
            plugin_dir: Some(PathBuf::from("/plugins")),
        };
        assert_eq!(s.candidates(), [PathBuf::from("/opt/x/libshim.so")]);
        assert_eq!(s.describe(), "$RAGGED_SDPA_AITER_SHIM=/opt/x/libshim.so");
        let s = ShimSearch {
            env_override: None,
            plugin_dir: Some(PathBuf::from("/plugins")),
        };
        assert_eq!(
            s.candidates(),
            [PathBuf::from("/plugins/libragged_aiter_shim.so")]
        );
        let none = ShimSearch {
            env_override: None,
            plugin_dir: None,
        };
        let err = ShimLibrary::load(&none).err().expect("nothing to load");
        assert!(
            err.to_string().contains("plugin directory is unknown"),
            "{err}"
        );
    }

    #[test]
    fn the_shim_reads_the_struct_as_rust_wrote_it() {
        let shim = ShimLibrary::load(&ShimSearch {
            env_override: Some(fake_rocm().shim.clone()),
            plugin_dir: None,
        })
        .expect("fake shim");
        assert_eq!(shim.gpu_targets(), "gfx942;gfx950");
        let mut p = base_problem();
        p.q = operand(1, 4, 64, 10);
        p.k = operand(2, 2, 64, 11);
        p.v = operand(3, 2, 64, 11);
        p.o = operand(4, 4, 64, 10);
        let plan = check_applicability(&p, &GpuArch::new("gfx950"), "gfx950").expect("taken");
        let buffers = DeviceBuffers {
            seq_len_q: 0,
            seq_len_kv: 0,
            lse: 0,
            lse_offsets: 0,
            workspace: 0,
            ..fixtures::buffers()
        };
        let mut args = shim_args(&p, &plan, &buffers, 0x30000, 0x99);
        args.v3_api_check = 1;
        // SAFETY: check mode; the fake reads fields only.
        let asm = unsafe { shim.mha_fwd(&args) }.expect("check answers");
        assert!(!asm, "the fake says asm runs only hdim 128");
        // SAFETY: test-only: `fake_shim_last_args` is `const char* (void)` in the fake.
        let text = unsafe {
            let lib = Library::new(&fake_rocm().shim).expect("fake");
            let f = lib
                .get::<unsafe extern "C" fn() -> *const c_char>(b"fake_shim_last_args\0")
                .expect("symbol");
            c_string(f())
        };
        assert_eq!(
            text,
            "dtype=1 batch=2 max_seqlen_q=8 seqlen_q=16 seqlen_k=32 hdim=64/64 nhead=4/2 \
             stride=256/128/128/256 nhead_stride=64/64/64/64/0 mask=0,-1,-1 scale=0.125 lse=0 asm=1 check=1 \
             q=0x1000 o=0x4000 lse_ptr=(nil) seqstart=0x30000/0x30100 cu=(nil)/(nil) stream=0x99 \
             cvt=0 qscale=0 descale=(nil)/(nil)/(nil)"
        );
        args.struct_size = 100;
        // SAFETY: the fake rejects the size before reading anything else.
        let err = unsafe { shim.mha_fwd(&args) }.expect_err("size mismatch");
        assert_eq!(
            err.to_string(),
            "AITER shim returned status 2 (RAGGED_AITER_BAD_ARGS): struct_size 100 != 216"
        );
    }
}
