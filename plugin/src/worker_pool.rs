//! The plugin's own worker threads, for the CPU reference's parallel loops.
//!
//! rayon's global pool starts threads that live as long as the process; their thread-local
//! destructors point into this library, so glibc never unmaps it on `dlclose` (issue 13 item 7:
//! 100 of 100 unload loops left it resident, and its statics — a logging callback among them —
//! survived into the next `dlopen`). Instead the plugin owns a pool, started on the first execute
//! that needs it and shut down, threads joined, when the last engine handle is destroyed: after
//! that no thread runs our code and `dlclose` unmaps the library.
//!
//! matrixmultiply's `threading` feature would start a second, global set of threads
//! (`thread-tree`) with the same problem; the kernels size their tiles so that it never engages
//! (`kernels/src/sdpa`), so the workspace builds matrixmultiply without it.
//!
//! The threads are started with `pthread_create`, not `std::thread::spawn`: std's spawn gives the
//! *spawning* thread (the host's, which lives on) a thread-local with a destructor in this
//! library (its spawn-hook list), and one such destructor pending on any live thread keeps glibc
//! from unmapping the library. The pool threads get std thread-locals too, but they are joined.

use std::ffi::{c_int, c_void};
use std::sync::Arc;

use parking_lot::Mutex;
use rayon::{ThreadBuilder, ThreadPool, ThreadPoolBuilder};

use crate::error::PluginError;

/// The pool and the threads to join once it has been told to stop.
struct Pool {
    pool: Option<ThreadPool>,
    threads: Arc<Mutex<Vec<PosixThread>>>,
}

impl Drop for Pool {
    fn drop(&mut self) {
        // Dropping the pool tells its threads to exit once idle; joining waits until they have
        // (thread-local destructors included), so none is left running this library's code.
        drop(self.pool.take());
        let threads = std::mem::take(&mut *self.threads.lock());
        for thread in threads {
            thread.join();
        }
    }
}

static POOL: Mutex<Option<Arc<Pool>>> = Mutex::new(None);

fn start() -> Result<Pool, PluginError> {
    let threads = Arc::new(Mutex::new(Vec::new()));
    let spawned = Arc::clone(&threads);
    let pool = ThreadPoolBuilder::new()
        .spawn_handler(move |thread| {
            let handle = PosixThread::spawn(thread)?;
            spawned.lock().push(handle);
            Ok(())
        })
        .build()
        .map_err(|e| PluginError::Engine(format!("cannot start the worker pool: {e}")))?;
    Ok(Pool {
        pool: Some(pool),
        threads,
    })
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
    fn spawn(thread: ThreadBuilder) -> std::io::Result<Self> {
        let arg = Box::into_raw(Box::new(thread)).cast::<c_void>();
        let mut id: PthreadT = 0;
        // SAFETY: `id` is valid for one write; `run_worker` takes ownership of `arg`, a leaked
        // Box<ThreadBuilder>, exactly once, and only if the thread was created.
        let status = unsafe { pthread_create(&mut id, std::ptr::null(), run_worker, arg) };
        if status != 0 {
            // SAFETY: no thread was created, so `arg` is still ours to free.
            drop(unsafe { Box::from_raw(arg.cast::<ThreadBuilder>()) });
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
    // SAFETY: `arg` is the Box<ThreadBuilder> `PosixThread::spawn` leaked for this thread.
    let thread = unsafe { Box::from_raw(arg.cast::<ThreadBuilder>()) };
    // A panic must not unwind out of a C thread entry; rayon catches job panics itself.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || thread.run()));
    std::ptr::null_mut()
}

/// Runs `work` with the plugin's pool as rayon's current pool, starting the pool if needed.
pub fn install<R: Send>(work: impl FnOnce() -> R + Send) -> Result<R, PluginError> {
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
    match pool.pool.as_ref() {
        Some(p) => Ok(p.install(work)),
        None => Err(PluginError::Engine("the worker pool is stopped".into())),
    }
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
    use super::*;

    #[test]
    fn work_runs_on_a_pool_thread_not_the_callers() {
        let caller = std::thread::current().id();
        let ran = install(|| (rayon::current_thread_index(), std::thread::current().id())).ok();
        assert!(
            ran.is_some_and(|(index, id)| index.is_some() && id != caller),
            "{ran:?}"
        );
    }
}
