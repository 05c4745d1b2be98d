//! The engine's own worker threads, for the CPU reference's parallel loops.
//!
//! A process-wide pool would start threads that live as long as the process; their thread-local
//! destructors point into this library, so glibc never unmaps it on `dlclose` (issue 13 item 7:
//! with rayon's global pool 100 of 100 unload loops left it resident, and its statics — a
//! logging callback among them — survived into the next `dlopen`). Instead the engine owns a
//! [`ragged_reference::parallel::Pool`], started on the first execute that needs it and shut down,
//! threads joined, when the plugin's last engine handle is destroyed or the library is unloaded
//! ([`shut_down`]): after that no thread runs our code and `dlclose` unmaps the library.
//!
//! The tile products are the kernels' own single-threaded micro-kernel (`kernels/reference/src/gemm.rs`), so
//! no library underneath starts threads of its own.
//!
//! The threads are started with `pthread_create`, not `std::thread::spawn`: std's spawn gives the
//! *spawning* thread (the host's, which lives on) a thread-local with a destructor in this
//! library (its spawn-hook list), and one such destructor pending on any live thread keeps glibc
//! from unmapping the library. The pool threads get std thread-locals too, but they are joined.

use std::ffi::{c_int, c_void};
use std::sync::Arc;

use parking_lot::Mutex;
use ragged_reference::parallel::{self, Joiner, Pool, ThreadMain};

use ragged_core::KernelError;

static POOL: Mutex<Option<Arc<Pool>>> = Mutex::new(None);

fn start() -> Result<Pool, KernelError> {
    // The calling thread takes part in every loop, so one thread fewer is started.
    Pool::start(parallel::configured_threads() - 1, |main| {
        let thread = PosixThread::spawn(main)?;
        Ok(Box::new(move || thread.join()) as Joiner)
    })
    .map_err(|e| KernelError::Internal(format!("cannot start the worker pool: {e}")))
}

/// `pthread_t` on Linux (glibc and musl: an unsigned long).
type PthreadT = std::ffi::c_ulong;

unsafe extern "C" {
    fn pthread_create(
        thread: *mut PthreadT,
        attr: *const c_void,
        start: extern "C" fn(*mut c_void) -> *mut c_void,
        arg: *mut c_void,
    ) -> c_int;
    fn pthread_join(thread: PthreadT, result: *mut *mut c_void) -> c_int;
}

/// A joinable thread started without std's spawn (see the module doc).
struct PosixThread(PthreadT);

impl PosixThread {
    fn spawn(main: ThreadMain) -> std::io::Result<Self> {
        let arg = Box::into_raw(Box::new(main)).cast::<c_void>();
        let mut id: PthreadT = 0;
        // SAFETY: `id` is valid for one write; `run_worker` takes ownership of `arg`, a leaked
        // Box<ThreadMain>, exactly once, and only if the thread was created.
        let status = unsafe { pthread_create(&mut id, std::ptr::null(), run_worker, arg) };
        if status != 0 {
            // SAFETY: no thread was created, so `arg` is still ours to free.
            drop(unsafe { Box::from_raw(arg.cast::<ThreadMain>()) });
            return Err(std::io::Error::from_raw_os_error(status));
        }
        Ok(PosixThread(id))
    }

    fn join(self) {
        // SAFETY: `self.0` is a thread this process created and nobody has joined or detached.
        unsafe { pthread_join(self.0, std::ptr::null_mut()) };
    }
}

extern "C" fn run_worker(arg: *mut c_void) -> *mut c_void {
    // SAFETY: `arg` is the Box<ThreadMain> `PosixThread::spawn` leaked for this thread.
    let main = unsafe { Box::from_raw(arg.cast::<ThreadMain>()) };
    // A panic must not unwind out of a C thread entry; the pool catches item panics itself.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(main));
    std::ptr::null_mut()
}

/// Runs `work` on the calling thread with the engine's pool running its parallel loops,
/// starting the pool if needed.
pub fn install<R>(work: impl FnOnce() -> R) -> Result<R, KernelError> {
    let pool = {
        let mut slot = POOL.lock();
        match slot.as_ref() {
            Some(pool) => Arc::clone(pool),
            None => {
                let pool = Arc::new(start()?);
                *slot = Some(Arc::clone(&pool));
                pool
            }
        }
    };
    Ok(parallel::with_pool(&pool, work))
    // `pool` drops here; if a shutdown ran meanwhile, this was the last reference and the
    // threads are joined now, on the calling thread (never on a pool thread).
}

/// Stops the pool and joins its threads (the next [`install`] starts a new one). Called when the
/// last handle is destroyed; an execute still running on the pool finishes first.
pub fn shut_down() {
    let pool = POOL.lock().take();
    drop(pool);
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::{Duration, Instant};

    use super::*;

    #[test]
    fn loops_run_on_the_callers_thread_and_on_pool_threads() {
        let caller = std::thread::current().id();
        let expected = parallel::configured_threads().min(2);
        let started = AtomicUsize::new(0);
        let threads = std::sync::Mutex::new(HashSet::new());
        let outer = install(|| {
            parallel::for_each_init(
                vec![0, 1],
                || (),
                |_, _: i32| {
                    threads.lock().unwrap().insert(std::thread::current().id());
                    started.fetch_add(1, Ordering::SeqCst);
                    // Both items wait for each other when there are two threads to run them.
                    let deadline = Instant::now() + Duration::from_secs(20);
                    while expected == 2
                        && started.load(Ordering::SeqCst) < 2
                        && Instant::now() < deadline
                    {
                        std::thread::yield_now();
                    }
                },
            );
            std::thread::current().id()
        });
        assert_eq!(outer.ok(), Some(caller), "install runs work on the caller");
        let threads = threads.into_inner().unwrap();
        assert_eq!(threads.len(), expected, "{threads:?}");
        assert!(threads.contains(&caller));
    }
}
