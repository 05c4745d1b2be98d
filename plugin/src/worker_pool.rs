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

use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::Mutex;
use rayon::{ThreadPool, ThreadPoolBuilder};

use crate::error::PluginError;

/// The pool and the threads to join once it has been told to stop.
struct Pool {
    pool: Option<ThreadPool>,
    threads: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl Drop for Pool {
    fn drop(&mut self) {
        // Dropping the pool tells its threads to exit once idle; joining waits until they have
        // (thread-local destructors included), so none is left running this library's code.
        drop(self.pool.take());
        let threads = std::mem::take(&mut *self.threads.lock());
        for thread in threads {
            let _ = thread.join();
        }
    }
}

static POOL: Mutex<Option<Arc<Pool>>> = Mutex::new(None);

fn start() -> Result<Pool, PluginError> {
    let threads = Arc::new(Mutex::new(Vec::new()));
    let spawned = Arc::clone(&threads);
    let pool = ThreadPoolBuilder::new()
        .thread_name(|i| format!("ragged-sdpa-{i}"))
        .spawn_handler(move |thread| {
            let mut builder = std::thread::Builder::new();
            if let Some(name) = thread.name() {
                builder = builder.name(name.to_owned());
            }
            if let Some(size) = thread.stack_size() {
                builder = builder.stack_size(size);
            }
            let handle = builder.spawn(|| thread.run())?;
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
    fn work_runs_on_the_plugins_threads_and_shutdown_joins_them() {
        let name = install(|| std::thread::current().name().map(str::to_owned))
            .ok()
            .flatten();
        assert!(
            name.as_deref()
                .is_some_and(|n| n.starts_with("ragged-sdpa-")),
            "{name:?}"
        );
        assert!(rayon::current_num_threads() >= 1);
    }
}
