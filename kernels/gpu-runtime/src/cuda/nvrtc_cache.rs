//! Run-time compilation of the CUDA kernels with NVRTC, cached in memory and on disk.
//!
//! Compiling the FMHA source takes seconds, far too long for a plan or the first execute, so the
//! image is kept per process (a map keyed like the files) and across processes on disk. The key
//! covers everything that changes the machine code: the source text, the target architecture,
//! every option, and the NVRTC version. Entries are written to a temporary file and renamed into
//! place, so concurrent processes never see half a file; an entry that fails its checks (wrong
//! magic, key, length or checksum) is recompiled and replaced, never trusted and never fatal. Disk
//! problems (read-only home, full disk) only cost the compile time: they are reported in
//! [`ImageOrigin`], not as errors.

use std::collections::HashMap;
use std::ffi::{CStr, CString, c_char};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use cudarc::nvrtc::sys as nvrtc;
use parking_lot::Mutex;

use super::error::GpuError;
use super::fingerprint::{Fingerprint, fingerprint};
use super::runtime::CompileTarget;

/// A `.cu` file embedded in the binary.
#[derive(Debug, Clone, Copy)]
pub struct KernelSource {
    /// File name, used in NVRTC's diagnostics and in errors.
    pub name: &'static str,
    /// The source text.
    pub text: &'static str,
}

/// Where an image came from; tests and logs use it to see that the cache works.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageOrigin {
    /// Compiled or loaded earlier by this process.
    Memory,
    /// Read from a valid disk entry.
    Disk,
    /// Compiled now. `disk_note` says why the disk did not help or could not be updated, if so.
    Compiled {
        /// `None` when the entry was simply absent and has now been written.
        disk_note: Option<String>,
    },
}

/// A compiled image ready for `cuModuleLoadData`.
#[derive(Debug, Clone)]
pub struct CompiledImage {
    /// The cache key (also the file name stem).
    pub key: u128,
    /// Cubin bytes, or PTX text including its terminating NUL.
    pub bytes: Arc<[u8]>,
    /// Where it came from.
    pub origin: ImageOrigin,
}

/// Lets NVRTC run its optimisation passes on as many threads as the host has (`0`): a first execute
/// compiles a whole program and waits for it (NVRTC 12.9 on two cores: the backward program 45 ->
/// 29 s, the forward 31 -> 20 s). The forward program's CUBIN comes out byte-identical with and
/// without it (NVRTC 12.9 and 13.2), and so does every backward kernel the engines launch by
/// default on sm_90a; a few others are scheduled differently at the same size. An NVRTC that
/// predates the option rejects it, and the compile is then retried without it.
const SPLIT_COMPILE: &str = "--split-compile=0";

/// Magic and format version at the start of every disk entry.
const MAGIC: &[u8; 12] = b"RSDPA-NVRTC1";
/// Magic, key, payload length, payload checksum.
const HEADER_LEN: usize = 12 + 16 + 8 + 16;

type Slot = Arc<Mutex<Option<Arc<[u8]>>>>;

/// The compile cache. One per process is the norm ([`NvrtcCache::global`]); tests make their own
/// with a private directory.
pub struct NvrtcCache {
    dir: Option<PathBuf>,
    /// One slot per key; the slot's mutex makes concurrent requests for the same kernel wait for
    /// a single compilation instead of running NVRTC twice.
    slots: Mutex<HashMap<u128, Slot>>,
}

impl NvrtcCache {
    /// The process-wide cache, stored under [`NvrtcCache::default_dir`].
    pub fn global() -> &'static NvrtcCache {
        static CACHE: OnceLock<NvrtcCache> = OnceLock::new();
        CACHE.get_or_init(|| NvrtcCache::new(Self::default_dir()))
    }

    /// A cache storing entries in `dir` (created on first write); `None` keeps it in memory only.
    pub fn new(dir: Option<PathBuf>) -> Self {
        Self {
            dir,
            slots: Mutex::new(HashMap::new()),
        }
    }

    /// `$XDG_CACHE_HOME/ragged-sdpa/nvrtc`, else `$HOME/.cache/ragged-sdpa/nvrtc`; `None` when
    /// neither variable is set to an absolute path (the XDG spec says to ignore relative ones).
    pub fn default_dir() -> Option<PathBuf> {
        let absolute = |var: &str| {
            std::env::var_os(var)
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
        };
        absolute("XDG_CACHE_HOME")
            .or_else(|| absolute("HOME").map(|home| home.join(".cache")))
            .map(|base| base.join("ragged-sdpa").join("nvrtc"))
    }

    /// The directory entries go to, if any.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// The full NVRTC option list for `target` plus the caller's `extra` options.
    pub fn options(target: &CompileTarget, extra: &[String]) -> Vec<String> {
        let mut options = vec![
            format!("--gpu-architecture={}", target.arch()),
            "--std=c++17".to_owned(),
            SPLIT_COMPILE.to_owned(),
        ];
        options.extend(extra.iter().cloned());
        options
    }

    /// The cache key of one compilation.
    pub fn key(source: &KernelSource, options: &[String], nvrtc_version: (i32, i32)) -> u128 {
        let mut fp = Fingerprint::default()
            .field(MAGIC)
            .field(source.text.as_bytes())
            .field(&nvrtc_version.0.to_le_bytes())
            .field(&nvrtc_version.1.to_le_bytes());
        for option in options {
            fp = fp.field(option.as_bytes());
        }
        fp.finish()
    }

    /// The image of `source` for `target`, compiled with NVRTC on a miss.
    pub fn get_or_compile(
        &self,
        source: &KernelSource,
        target: &CompileTarget,
        extra_options: &[String],
        nvrtc_version: (i32, i32),
    ) -> Result<CompiledImage, GpuError> {
        let options = Self::options(target, extra_options);
        let key = Self::key(source, &options, nvrtc_version);
        self.get_or_insert_with(key, target.extension(), || {
            compile(source, target, &options).or_else(|error| match without_split_compile(&error) {
                Some(serial) => compile(source, target, &serial),
                None => Err(error),
            })
        })
    }

    /// The cache logic with the compiler passed in, so that it can be tested without NVRTC.
    pub fn get_or_insert_with(
        &self,
        key: u128,
        extension: &str,
        compile: impl FnOnce() -> Result<Vec<u8>, GpuError>,
    ) -> Result<CompiledImage, GpuError> {
        let slot = Arc::clone(self.slots.lock().entry(key).or_default());
        let mut slot = slot.lock();
        if let Some(bytes) = slot.as_ref() {
            return Ok(CompiledImage {
                key,
                bytes: Arc::clone(bytes),
                origin: ImageOrigin::Memory,
            });
        }
        let path = self
            .dir
            .as_ref()
            .map(|dir| dir.join(format!("{key:032x}.{extension}")));
        let mut disk_note = None;
        if let Some(path) = &path {
            match read_entry(path, key) {
                Ok(Some(bytes)) => {
                    let bytes: Arc<[u8]> = bytes.into();
                    *slot = Some(Arc::clone(&bytes));
                    return Ok(CompiledImage {
                        key,
                        bytes,
                        origin: ImageOrigin::Disk,
                    });
                }
                Ok(None) => {}
                Err(why) => disk_note = Some(format!("replacing {}: {why}", path.display())),
            }
        }
        let bytes: Arc<[u8]> = compile()?.into();
        if let Some(path) = &path
            && let Err(why) = write_entry(path, key, &bytes)
        {
            disk_note = Some(format!("could not write {}: {why}", path.display()));
        }
        *slot = Some(Arc::clone(&bytes));
        Ok(CompiledImage {
            key,
            bytes,
            origin: ImageOrigin::Compiled { disk_note },
        })
    }
}

/// The options of a compile that NVRTC refused because it does not know [`SPLIT_COMPILE`], less
/// that option; `None` for every other error.
fn without_split_compile(error: &GpuError) -> Option<Vec<String>> {
    match error {
        GpuError::Compile {
            options, status, ..
        } if status.0 == nvrtc::nvrtcResult::NVRTC_ERROR_INVALID_OPTION
            && options.iter().any(|o| o == SPLIT_COMPILE) =>
        {
            Some(
                options
                    .iter()
                    .filter(|o| *o != SPLIT_COMPILE)
                    .cloned()
                    .collect(),
            )
        }
        _ => None,
    }
}

/// `Ok(None)`: no entry. `Err`: an entry that must not be used.
fn read_entry(path: &Path, key: u128) -> Result<Option<Vec<u8>>, String> {
    let data = match std::fs::read(path) {
        Ok(data) => data,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    let Some((header, payload)) = data.split_at_checked(HEADER_LEN) else {
        return Err(format!("{} bytes is shorter than the header", data.len()));
    };
    let (magic, rest) = header.split_at(12);
    let (stored_key, rest) = rest.split_at(16);
    let (len, checksum) = rest.split_at(8);
    if magic != MAGIC {
        return Err("bad magic".to_owned());
    }
    let le_u128 = |b: &[u8]| b.try_into().map(u128::from_le_bytes).unwrap_or_default();
    if le_u128(stored_key) != key {
        return Err(format!("entry holds key {:032x}", le_u128(stored_key)));
    }
    let len = len.try_into().map(u64::from_le_bytes).unwrap_or_default();
    if len != payload.len() as u64 {
        return Err(format!(
            "payload is {} bytes, header says {len}",
            payload.len()
        ));
    }
    if le_u128(checksum) != fingerprint(payload) {
        return Err("payload checksum mismatch".to_owned());
    }
    Ok(Some(payload.to_vec()))
}

/// Writes an entry atomically: a uniquely named temporary file in the same directory, then a
/// rename, which replaces any old entry in one step.
fn write_entry(path: &Path, key: u128, payload: &[u8]) -> Result<(), String> {
    let dir = path.parent().ok_or("entry path has no directory")?;
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{key:032x}.{}.{nanos}.tmp", std::process::id()));
    let write = || -> std::io::Result<()> {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(MAGIC)?;
        file.write_all(&key.to_le_bytes())?;
        file.write_all(&(payload.len() as u64).to_le_bytes())?;
        file.write_all(&fingerprint(payload).to_le_bytes())?;
        file.write_all(payload)?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        e.to_string()
    })
}

/// Owns an `nvrtcProgram` so that every exit path destroys it.
struct Program(nvrtc::nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: the program was created by nvrtcCreateProgram and is destroyed once, here.
        let _ = unsafe { nvrtc::nvrtcDestroyProgram(&mut self.0) };
    }
}

fn nvrtc_call(status: nvrtc::nvrtcResult, call: &'static str) -> Result<(), GpuError> {
    status
        .result()
        .map_err(|source| GpuError::Nvrtc { call, source })
}

/// Compiles `source` with NVRTC; the result is a cubin or NUL-terminated PTX per `target`.
fn compile(
    source: &KernelSource,
    target: &CompileTarget,
    options: &[String],
) -> Result<Vec<u8>, GpuError> {
    super::runtime::probe()?;
    let nul = |what: &'static str, e: std::ffi::NulError| GpuError::InteriorNul {
        what,
        source_name: source.name.to_owned(),
        position: e.nul_position(),
    };
    let text = CString::new(source.text).map_err(|e| nul("source", e))?;
    let name = CString::new(source.name).map_err(|e| nul("file name", e))?;
    let c_options = options
        .iter()
        .map(|o| CString::new(o.as_str()).map_err(|e| nul("option", e)))
        .collect::<Result<Vec<_>, _>>()?;
    let option_ptrs: Vec<*const c_char> = c_options.iter().map(|o| o.as_ptr()).collect();

    let mut raw = std::ptr::null_mut();
    // SAFETY: `text` and `name` are NUL-terminated and outlive the program (dropped after it);
    // no headers are passed.
    let status = unsafe {
        nvrtc::nvrtcCreateProgram(
            &mut raw,
            text.as_ptr(),
            name.as_ptr(),
            0,
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    nvrtc_call(status, "nvrtcCreateProgram")?;
    let program = Program(raw);

    let count = i32::try_from(option_ptrs.len()).unwrap_or(i32::MAX);
    // SAFETY: `option_ptrs` holds `count` NUL-terminated strings that outlive the call.
    let status = unsafe { nvrtc::nvrtcCompileProgram(program.0, count, option_ptrs.as_ptr()) };
    if let Err(status) = status.result() {
        return Err(GpuError::Compile {
            source_name: source.name.to_owned(),
            target: target.arch().to_owned(),
            options: options.to_vec(),
            status,
            log: program_log(&program).unwrap_or_else(|e| format!("(no log: {e})")),
        });
    }

    let mut size = 0usize;
    let bytes = match target {
        CompileTarget::Cubin { .. } => {
            // SAFETY: out-parameter call on a compiled program.
            let status = unsafe { nvrtc::nvrtcGetCUBINSize(program.0, &mut size) };
            nvrtc_call(status, "nvrtcGetCUBINSize")?;
            let mut bytes = vec![0u8; size];
            // SAFETY: `bytes` holds exactly the size NVRTC just reported.
            let status = unsafe { nvrtc::nvrtcGetCUBIN(program.0, bytes.as_mut_ptr().cast()) };
            nvrtc_call(status, "nvrtcGetCUBIN")?;
            bytes
        }
        CompileTarget::Ptx { .. } => {
            // SAFETY: out-parameter call on a compiled program; the size includes the NUL.
            let status = unsafe { nvrtc::nvrtcGetPTXSize(program.0, &mut size) };
            nvrtc_call(status, "nvrtcGetPTXSize")?;
            let mut bytes = vec![0u8; size];
            // SAFETY: `bytes` holds exactly the size NVRTC just reported.
            let status = unsafe { nvrtc::nvrtcGetPTX(program.0, bytes.as_mut_ptr().cast()) };
            nvrtc_call(status, "nvrtcGetPTX")?;
            bytes
        }
    };
    Ok(bytes)
}

fn program_log(program: &Program) -> Result<String, GpuError> {
    let mut size = 0usize;
    // SAFETY: out-parameter call on a created program.
    let status = unsafe { nvrtc::nvrtcGetProgramLogSize(program.0, &mut size) };
    nvrtc_call(status, "nvrtcGetProgramLogSize")?;
    let mut log = vec![0u8; size.max(1)];
    // SAFETY: `log` holds at least the size NVRTC reported (a NUL-terminated string).
    let status = unsafe { nvrtc::nvrtcGetProgramLog(program.0, log.as_mut_ptr().cast()) };
    nvrtc_call(status, "nvrtcGetProgramLog")?;
    Ok(CStr::from_bytes_until_nul(&log)
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|_| String::from_utf8_lossy(&log).into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::cell::Cell;

    /// A fresh directory under the system temp dir, removed on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(tag: &str) -> Self {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or_default();
            let dir = std::env::temp_dir().join(format!(
                "ragged-sdpa-nvrtc-test-{tag}-{}-{nanos}",
                std::process::id()
            ));
            std::fs::create_dir_all(&dir).unwrap();
            Self(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn entry_files(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    const SOURCE: KernelSource = KernelSource {
        name: "k.cu",
        text: "extern \"C\" __global__ void k() {}",
    };

    #[test]
    fn the_key_changes_with_source_options_and_nvrtc_version() {
        let sm90 = CompileTarget::Cubin {
            arch: "sm_90a".to_owned(),
        };
        let sm80 = CompileTarget::Cubin {
            arch: "sm_80".to_owned(),
        };
        let opts = NvrtcCache::options(&sm90, &[]);
        let base = NvrtcCache::key(&SOURCE, &opts, (13, 0));
        let other_source = KernelSource {
            name: "k.cu",
            text: "extern \"C\" __global__ void k2() {}",
        };
        assert_ne!(base, NvrtcCache::key(&other_source, &opts, (13, 0)));
        assert_ne!(
            base,
            NvrtcCache::key(&SOURCE, &NvrtcCache::options(&sm80, &[]), (13, 0))
        );
        let defined = NvrtcCache::options(&sm90, &["-DEXTRA_DEFINE".to_owned()]);
        assert_ne!(base, NvrtcCache::key(&SOURCE, &defined, (13, 0)));
        assert_ne!(base, NvrtcCache::key(&SOURCE, &opts, (13, 1)));
        assert_eq!(base, NvrtcCache::key(&SOURCE, &opts, (13, 0)));
    }

    #[test]
    fn options_start_with_the_architecture() {
        let ptx = CompileTarget::Ptx {
            arch: "compute_90".to_owned(),
        };
        let opts = NvrtcCache::options(&ptx, &["-DX=1".to_owned()]);
        assert_eq!(
            opts,
            [
                "--gpu-architecture=compute_90",
                "--std=c++17",
                SPLIT_COMPILE,
                "-DX=1"
            ]
        );
    }

    #[test]
    fn an_nvrtc_without_split_compile_is_asked_again_without_it() {
        use cudarc::nvrtc::result::NvrtcError;
        use nvrtc::nvrtcResult::{NVRTC_ERROR_COMPILATION, NVRTC_ERROR_INVALID_OPTION};
        let sm90 = CompileTarget::Cubin {
            arch: "sm_90a".to_owned(),
        };
        let options = NvrtcCache::options(&sm90, &["-DX=1".to_owned()]);
        let refused = |status, options: Vec<String>| GpuError::Compile {
            source_name: "k.cu".to_owned(),
            target: "sm_90a".to_owned(),
            options,
            status: NvrtcError(status),
            log: String::new(),
        };
        assert_eq!(
            without_split_compile(&refused(NVRTC_ERROR_INVALID_OPTION, options.clone())),
            Some(vec![
                "--gpu-architecture=sm_90a".to_owned(),
                "--std=c++17".to_owned(),
                "-DX=1".to_owned()
            ])
        );
        // A source error is the source's, and a refusal of the options without the flag is final.
        assert_eq!(
            without_split_compile(&refused(NVRTC_ERROR_COMPILATION, options.clone())),
            None
        );
        let serial: Vec<String> = options.into_iter().filter(|o| o != SPLIT_COMPILE).collect();
        assert_eq!(
            without_split_compile(&refused(NVRTC_ERROR_INVALID_OPTION, serial)),
            None
        );
    }

    #[test]
    fn memory_then_disk_then_memory() {
        let tmp = TempDir::new("hits");
        let compiles = Cell::new(0);
        let compile = || {
            compiles.set(compiles.get() + 1);
            Ok(b"image-bytes".to_vec())
        };
        let first = NvrtcCache::new(Some(tmp.0.clone()));
        let a = first.get_or_insert_with(7, "cubin", compile).unwrap();
        assert_eq!(a.origin, ImageOrigin::Compiled { disk_note: None });
        assert_eq!(&*a.bytes, b"image-bytes");
        let b = first.get_or_insert_with(7, "cubin", compile).unwrap();
        assert_eq!(b.origin, ImageOrigin::Memory);
        assert_eq!(entry_files(&tmp.0), [format!("{:032x}.cubin", 7)]);

        // A new process (a new cache) finds the entry on disk.
        let second = NvrtcCache::new(Some(tmp.0.clone()));
        let c = second.get_or_insert_with(7, "cubin", compile).unwrap();
        assert_eq!(c.origin, ImageOrigin::Disk);
        assert_eq!(&*c.bytes, b"image-bytes");
        assert_eq!(compiles.get(), 1);
    }

    #[test]
    fn corrupt_or_truncated_entries_are_recompiled_and_replaced() {
        let tmp = TempDir::new("corrupt");
        let good = || Ok(b"fresh".to_vec());
        NvrtcCache::new(Some(tmp.0.clone()))
            .get_or_insert_with(9, "cubin", good)
            .unwrap();
        let path = tmp.0.join(format!("{:032x}.cubin", 9));
        let pristine = std::fs::read(&path).unwrap();

        let mut flipped = pristine.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 0xff;
        let damaged: [(&str, Vec<u8>); 4] = [
            ("checksum", flipped),
            ("payload is", pristine[..pristine.len() - 2].to_vec()),
            ("shorter than the header", pristine[..10].to_vec()),
            ("bad magic", [b"XXXX", &pristine[4..]].concat()),
        ];
        for (expected, bytes) in damaged {
            std::fs::write(&path, &bytes).unwrap();
            let image = NvrtcCache::new(Some(tmp.0.clone()))
                .get_or_insert_with(9, "cubin", || Ok(b"fresh".to_vec()))
                .unwrap();
            match &image.origin {
                ImageOrigin::Compiled {
                    disk_note: Some(note),
                } => assert!(note.contains(expected), "{expected}: {note}"),
                other => panic!("{expected}: expected a recompile, got {other:?}"),
            }
            assert_eq!(&*image.bytes, b"fresh");
            assert_eq!(
                std::fs::read(&path).unwrap(),
                pristine,
                "{expected}: not rewritten"
            );
        }
    }

    #[test]
    fn an_entry_under_the_wrong_key_is_not_used() {
        let tmp = TempDir::new("key");
        NvrtcCache::new(Some(tmp.0.clone()))
            .get_or_insert_with(1, "cubin", || Ok(b"one".to_vec()))
            .unwrap();
        std::fs::rename(
            tmp.0.join(format!("{:032x}.cubin", 1)),
            tmp.0.join(format!("{:032x}.cubin", 2)),
        )
        .unwrap();
        let image = NvrtcCache::new(Some(tmp.0.clone()))
            .get_or_insert_with(2, "cubin", || Ok(b"two".to_vec()))
            .unwrap();
        assert_eq!(&*image.bytes, b"two");
        assert!(
            matches!(image.origin, ImageOrigin::Compiled { disk_note: Some(ref n) } if n.contains("holds key"))
        );
    }

    #[test]
    fn compile_errors_propagate_and_are_not_cached() {
        let cache = NvrtcCache::new(None);
        let err = cache
            .get_or_insert_with(3, "ptx", || {
                Err(GpuError::Unavailable {
                    reason: "test compiler failure".to_owned(),
                })
            })
            .unwrap_err();
        assert!(err.to_string().contains("test compiler failure"));
        let image = cache
            .get_or_insert_with(3, "ptx", || Ok(b"ok\0".to_vec()))
            .unwrap();
        assert_eq!(image.origin, ImageOrigin::Compiled { disk_note: None });
    }

    #[test]
    fn an_unwritable_directory_is_reported_not_fatal() {
        let tmp = TempDir::new("ro");
        // A regular file where the cache directory should be: create_dir_all fails.
        let blocker = tmp.0.join("not-a-dir");
        std::fs::write(&blocker, b"x").unwrap();
        let cache = NvrtcCache::new(Some(blocker.join("nvrtc")));
        let image = cache
            .get_or_insert_with(4, "cubin", || Ok(b"img".to_vec()))
            .unwrap();
        assert!(
            matches!(image.origin, ImageOrigin::Compiled { disk_note: Some(ref n) } if n.contains("could not write"))
        );
        assert_eq!(&*image.bytes, b"img");
    }

    #[test]
    fn writes_leave_no_temporary_files() {
        let tmp = TempDir::new("tmpfiles");
        let cache = NvrtcCache::new(Some(tmp.0.clone()));
        for key in 0..4u128 {
            cache
                .get_or_insert_with(key, "cubin", || Ok(vec![key as u8; 100]))
                .unwrap();
        }
        assert!(entry_files(&tmp.0).iter().all(|n| n.ends_with(".cubin")));
        assert_eq!(entry_files(&tmp.0).len(), 4);
    }

    /// Compiles a tiny kernel with the real NVRTC where it exists; elsewhere says why not.
    #[test]
    fn nvrtc_compiles_a_tiny_kernel_and_reports_errors_with_the_log() {
        let Some(runtime) = crate::cuda::runtime::runtime_or_skip("nvrtc_compiles_a_tiny_kernel")
        else {
            return;
        };
        let target = &runtime.devices[0].target;
        let cache = NvrtcCache::new(None);
        let image = cache
            .get_or_compile(&SOURCE, target, &[], runtime.nvrtc_version)
            .unwrap();
        assert!(!image.bytes.is_empty());
        let broken = KernelSource {
            name: "broken.cu",
            text: "extern \"C\" __global__ void k() { undeclared_name = 1; }",
        };
        match cache.get_or_compile(&broken, target, &[], runtime.nvrtc_version) {
            Err(GpuError::Compile { log, options, .. }) => {
                assert!(log.contains("undeclared_name"), "{log}");
                assert!(options[0].starts_with("--gpu-architecture="));
            }
            other => panic!("expected a compile error, got {other:?}"),
        }
    }
}
