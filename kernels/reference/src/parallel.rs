//! The kernels' parallel loops and the worker pool they run on.
//!
//! One loop shape serves every kernel: a list of independent items, each handed to `body` with a
//! scratch value of the participant that took it. Participants are the calling thread and up to
//! `helpers` pool threads; they take items through one atomic index, so a long item never holds
//! back the others, and the caller works instead of waiting. A panic in any participant is
//! re-raised on the caller once every participant has left the loop.
//!
//! Why not rayon: its global state cannot be freed. crossbeam-epoch's global collector stays
//! behind after the last pool is dropped (≈ 11.5 KB per load/unload of the plugin, issue 13 asks
//! for no growth per loop), and its deque's speculative reads needed a ThreadSanitizer
//! suppression. This pool holds nothing global but what its owner holds.
//!
//! Which pool runs a loop: the one the caller installed with [`with_pool`] (the plugin's, whose
//! threads it starts with `pthread_create` and joins when its last handle goes), else a default
//! pool on std threads, started on first use and kept for the process (tests, benches, tools).
//! Inside [`on_calling_thread`], and inside any item, loops run sequentially on the calling
//! thread and no pool is touched.
//!
//! The caller's side uses only std's futex-based Mutex and Condvar and `const` thread-locals
//! without destructors: a destructor registered on a host thread would keep a `dlclose`d plugin
//! mapped (see the plugin's `worker_pool`).

use std::any::Any;
use std::cell::Cell;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};

thread_local! {
    /// Loops run sequentially here (inside [`on_calling_thread`], an item, or a pool thread).
    static INLINE: Cell<bool> = const { Cell::new(false) };
    /// The pool installed by [`with_pool`] on this thread, or null.
    static CURRENT: Cell<*const Shared> = const { Cell::new(std::ptr::null()) };
}

/// Joins one started thread.
pub type Joiner = Box<dyn FnOnce() + Send>;

/// A thread's body, handed to a spawner.
pub type ThreadMain = Box<dyn FnOnce() + Send>;

/// A borrowed loop body with its lifetime erased; see [`Shared::run`] for why it stays valid.
#[derive(Clone, Copy)]
struct Task(*const (dyn Fn() + Sync + 'static));

// SAFETY: the pointee is `Sync`, so calling it from another thread is sound; the pointer itself
// is only dereferenced while the posting caller keeps the pointee alive (see `Shared::run`).
unsafe impl Send for Task {}

/// One loop posted by a caller.
struct Posted {
    id: u64,
    task: Task,
    /// Helpers that may still join.
    wanted: usize,
    /// Helpers inside the task now.
    running: usize,
    /// The first panic of a helper, re-raised on the caller.
    panic: Option<Box<dyn Any + Send>>,
}

#[derive(Default)]
struct State {
    jobs: Vec<Posted>,
    next_id: u64,
    stop: bool,
}

/// What the pool's threads and its callers share.
struct Shared {
    state: Mutex<State>,
    /// Helpers wait here for a job or for the stop.
    work: Condvar,
    /// Callers wait here for their job's helpers to leave.
    idle: Condvar,
    helpers: usize,
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    // Nothing panics while holding the lock; a poisoned one still holds a consistent state.
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    /// A helper thread's life: run the posted jobs' tasks until told to stop.
    fn serve(&self) {
        INLINE.with(|flag| flag.set(true));
        let mut state = lock(&self.state);
        loop {
            if state.stop {
                return;
            }
            let Some(job) = state.jobs.iter_mut().find(|job| job.wanted > 0) else {
                state = self
                    .work
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
                continue;
            };
            job.wanted -= 1;
            job.running += 1;
            let (id, task) = (job.id, job.task);
            drop(state);
            // SAFETY: `running` was raised under the lock while the job was posted, and its
            // caller keeps the task alive until `running` is back to 0 (`Shared::run`).
            let outcome = panic::catch_unwind(AssertUnwindSafe(|| unsafe { (*task.0)() }));
            state = lock(&self.state);
            if let Some(job) = state.jobs.iter_mut().find(|job| job.id == id) {
                job.running -= 1;
                if let Err(payload) = outcome {
                    job.panic.get_or_insert(payload);
                }
                if job.running == 0 {
                    self.idle.notify_all();
                }
            }
        }
    }

    /// Runs `task` on the calling thread and on up to `helpers` pool threads at once; returns
    /// when every participant has left it, re-raising the first panic.
    fn run(&self, helpers: usize, task: &(dyn Fn() + Sync)) {
        // SAFETY: only the lifetime changes. The pointer is dereferenced by helpers that joined
        // the job (`running` > 0) and this function does not return, panics included, before
        // it has withdrawn the job under the lock with `running` at 0, so `task` outlives
        // every call through the erased pointer.
        let erased = Task(unsafe {
            std::mem::transmute::<*const (dyn Fn() + Sync + '_), *const (dyn Fn() + Sync + 'static)>(
                task,
            )
        });
        let id = {
            let mut state = lock(&self.state);
            let id = state.next_id;
            state.next_id += 1;
            state.jobs.push(Posted {
                id,
                task: erased,
                wanted: helpers,
                running: 0,
                panic: None,
            });
            id
        };
        self.work.notify_all();
        let own = panic::catch_unwind(AssertUnwindSafe(|| on_calling_thread(task)));
        let mut state = lock(&self.state);
        let helper_panic = loop {
            let Some(at) = state.jobs.iter().position(|job| job.id == id) else {
                break None;
            };
            // The caller only returns from `task` once every item is taken: helpers that have
            // not joined yet would find nothing to do.
            state.jobs[at].wanted = 0;
            if state.jobs[at].running == 0 {
                break state.jobs.swap_remove(at).panic;
            }
            state = self
                .idle
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        };
        drop(state);
        if let Err(payload) = own {
            panic::resume_unwind(payload);
        }
        if let Some(payload) = helper_panic {
            panic::resume_unwind(payload);
        }
    }
}

/// Worker threads for the parallel loops; dropping the pool stops and joins them.
pub struct Pool {
    shared: Arc<Shared>,
    joiners: Mutex<Vec<Joiner>>,
}

impl Pool {
    /// Starts `helpers` threads through `spawn`, which runs its argument on a new thread and
    /// returns how to join it. A failed spawn stops the threads already started.
    pub fn start(
        helpers: usize,
        spawn: impl Fn(ThreadMain) -> std::io::Result<Joiner>,
    ) -> std::io::Result<Pool> {
        let pool = Pool {
            shared: Arc::new(Shared {
                state: Mutex::new(State::default()),
                work: Condvar::new(),
                idle: Condvar::new(),
                helpers,
            }),
            joiners: Mutex::new(Vec::with_capacity(helpers)),
        };
        for _ in 0..helpers {
            let shared = Arc::clone(&pool.shared);
            let joiner = spawn(Box::new(move || shared.serve()))?;
            pool.joiners
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(joiner);
        }
        Ok(pool)
    }

    /// Threads a loop on this pool runs on, the caller included.
    pub fn threads(&self) -> usize {
        self.shared.helpers + 1
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        lock(&self.shared.state).stop = true;
        self.shared.work.notify_all();
        let joiners = std::mem::take(
            self.joiners
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for join in joiners {
            join();
        }
    }
}

/// Threads the loops should use: `RAGGED_SDPA_THREADS`, else `RAYON_NUM_THREADS` (still read so
/// the existing bench scripts keep their meaning), else the available parallelism.
pub fn configured_threads() -> usize {
    ["RAGGED_SDPA_THREADS", "RAYON_NUM_THREADS"]
        .iter()
        .find_map(|name| std::env::var(name).ok()?.trim().parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

fn default_pool() -> Option<&'static Pool> {
    static DEFAULT: OnceLock<Option<Pool>> = OnceLock::new();
    DEFAULT
        .get_or_init(|| {
            // A process that cannot start threads still runs every loop, on the caller.
            Pool::start(configured_threads() - 1, |main| {
                let handle = std::thread::Builder::new()
                    .name("ragged-reference".into())
                    .spawn(main)?;
                Ok(Box::new(move || {
                    let _ = handle.join();
                }))
            })
            .ok()
        })
        .as_ref()
}

/// Runs `work` with `pool` running the parallel loops it starts on this thread.
pub fn with_pool<R>(pool: &Pool, work: impl FnOnce() -> R) -> R {
    struct Restore(*const Shared);
    impl Drop for Restore {
        fn drop(&mut self) {
            CURRENT.with(|current| current.set(self.0));
        }
    }
    let _restore = Restore(CURRENT.with(|current| current.replace(Arc::as_ptr(&pool.shared))));
    work()
}

/// Runs `work` with its parallel loops on the calling thread (restored on return, panics
/// included): no pool is started or woken.
pub fn on_calling_thread<R>(work: impl FnOnce() -> R) -> R {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            INLINE.with(|flag| flag.set(self.0));
        }
    }
    let _restore = Restore(INLINE.with(|flag| flag.replace(true)));
    work()
}

/// Calls `f` with the pool this thread's loops run on, or with `None` to run them inline.
fn with_current<R>(f: impl FnOnce(Option<&Shared>) -> R) -> R {
    if INLINE.with(Cell::get) {
        return f(None);
    }
    let installed = CURRENT.with(Cell::get);
    if installed.is_null() {
        return f(default_pool().map(|pool| &*pool.shared));
    }
    // SAFETY: `with_pool` set this pointer from a borrowed `Pool` and restores the previous
    // value before that borrow ends, so the `Shared` it points to is alive for this call.
    f(Some(unsafe { &*installed }))
}

/// Threads a loop started here would run on (1 inside [`on_calling_thread`]).
pub fn current_threads() -> usize {
    with_current(|pool| pool.map_or(1, |shared| shared.helpers + 1))
}

/// Calls `body(scratch, item)` for every item, spread over the current pool; each participant
/// makes its scratch with `init` before its first item.
pub fn for_each_init<T: Send, S>(
    items: Vec<T>,
    init: impl Fn() -> S + Sync,
    body: impl Fn(&mut S, T) + Sync,
) {
    with_current(|pool| {
        let helpers = pool.map_or(0, |shared| {
            shared.helpers.min(items.len().saturating_sub(1))
        });
        let (Some(shared), true) = (pool, helpers > 0) else {
            let mut scratch = None;
            for item in items {
                body(scratch.get_or_insert_with(&init), item);
            }
            return;
        };
        let slots: Vec<Mutex<Option<T>>> = items.into_iter().map(|i| Mutex::new(Some(i))).collect();
        let next = AtomicUsize::new(0);
        let task = || {
            let mut scratch = None;
            while let Some(slot) = slots.get(next.fetch_add(1, Ordering::Relaxed)) {
                // Each index is handed out once, so the slot is uncontended and still full.
                let item = slot.lock().unwrap_or_else(PoisonError::into_inner).take();
                if let Some(item) = item {
                    body(scratch.get_or_insert_with(&init), item);
                }
            }
        };
        shared.run(helpers, &task);
    });
}

#[cfg(test)]
mod tests;
