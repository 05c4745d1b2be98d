//! The project's fake `libamdhip64` (kernels/gpu-runtime/src/hip/fake_amdhip64.c), compiled with the
//! system C compiler and loaded into the test process: one gfx942 device, HIP 6.2, and "device"
//! memory kept in a side table behind addresses the CPU cannot dereference. `dlopen` of the same
//! path gives the plugin the same instance, so memory allocated here is device memory to the
//! plugin, and a device pointer the plugin failed to stage faults instead of passing.

use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::OnceLock;

use ragged_gpu_runtime::hip::{FAKE_HIP_SOURCE, compile_fake_library};

type Malloc = unsafe extern "C" fn(*mut *mut c_void, usize) -> i32;
type MemcpyAsync = unsafe extern "C" fn(*mut c_void, *const c_void, usize, i32, *mut c_void) -> i32;
type Counters = unsafe extern "C" fn(*mut i64);

/// The fake's allocation, copy and counter entry points, resolved once.
pub struct FakeHip {
    _lib: libloading::Library,
    malloc: Malloc,
    memcpy_async: MemcpyAsync,
    counters: Counters,
}

/// Compiles and loads the fake, and points the plugin at it (with CUDA disabled) before the
/// plugin's first probe: a test calls this before it touches the plugin.
pub fn fake_hip() -> &'static FakeHip {
    static FAKE: OnceLock<FakeHip> = OnceLock::new();
    FAKE.get_or_init(|| {
        let dir =
            std::env::temp_dir().join(format!("ragged-plugin-fake-hip-{}", std::process::id()));
        let lib_path = compile_fake_library(&dir, "libamdhip64.so.6", FAKE_HIP_SOURCE, &[]);
        // SAFETY: runs once, before this process loads the plugin (which reads these variables
        // on its first probe); every test of such a binary goes through this OnceLock first.
        unsafe {
            std::env::set_var("RAGGED_SDPA_HIP_RUNTIME", &lib_path);
            std::env::set_var("RAGGED_SDPA_DISABLE_CUDA", "1");
        }
        // SAFETY: the fake's initialisers do nothing.
        let lib = unsafe { libloading::Library::new(&lib_path) }.expect("load the fake");
        // SAFETY: the types are the fake's C signatures.
        unsafe {
            FakeHip {
                malloc: *lib.get::<Malloc>(b"hipMalloc\0").expect("hipMalloc"),
                memcpy_async: *lib.get::<MemcpyAsync>(b"hipMemcpyAsync\0").expect("copy"),
                counters: *lib
                    .get::<Counters>(b"fake_hip_counters\0")
                    .expect("counters"),
                _lib: lib,
            }
        }
    })
}

impl FakeHip {
    /// A device copy of `bytes`.
    pub fn upload(&self, bytes: &[u8]) -> *mut c_void {
        let mut ptr = null_mut();
        // SAFETY: valid out-pointer; then a host → device copy of exactly the allocation.
        unsafe {
            assert_eq!((self.malloc)(&mut ptr, bytes.len()), 0);
            assert_eq!(
                (self.memcpy_async)(ptr, bytes.as_ptr().cast(), bytes.len(), 1, null_mut()),
                0
            );
        }
        ptr
    }

    /// Copies a device allocation of `out.len()` bytes into `out`.
    pub fn download(&self, ptr: *mut c_void, out: &mut [u8]) {
        // SAFETY: a device → host copy into a live buffer of the allocation's size.
        let status =
            unsafe { (self.memcpy_async)(out.as_mut_ptr().cast(), ptr, out.len(), 2, null_mut()) };
        assert_eq!(status, 0);
    }

    /// (host → device copies, device → host copies, stream synchronisations) so far.
    pub fn counters(&self) -> [i64; 3] {
        let mut out = [0i64; 3];
        // SAFETY: the fake writes three longs.
        unsafe { (self.counters)(out.as_mut_ptr()) };
        out
    }
}
