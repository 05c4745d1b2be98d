//! Where the CPU forward's parallel loops run: rayon's current pool, or the calling thread.
//!
//! A small problem costs less than waking a pool thread and waiting for it (two context switches
//! per execute, several µs on a loaded two-core machine against tens of µs of work), so a caller
//! that knows its problem is small runs it with [`on_calling_thread`]: the forward's loops then
//! never touch rayon, and no pool is started. Only `sdpa_forward` honours it.

use std::cell::Cell;

use rayon::prelude::*;

thread_local! {
    static INLINE: Cell<bool> = const { Cell::new(false) };
}

/// Runs `work` with the forward's parallel loops on the calling thread (restored on return,
/// panics included).
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

/// `items.into_par_iter().for_each_init(init, body)`, or the same loop on the calling thread
/// with one scratch value inside [`on_calling_thread`].
pub(crate) fn for_each_init<T: Send, S>(
    items: Vec<T>,
    init: impl Fn() -> S + Sync + Send,
    body: impl Fn(&mut S, T) + Sync + Send,
) {
    if INLINE.with(Cell::get) {
        let mut scratch = init();
        for item in items {
            body(&mut scratch, item);
        }
    } else {
        items.into_par_iter().for_each_init(init, body);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_loops_stay_on_the_calling_thread_and_the_flag_is_restored() {
        let caller = std::thread::current().id();
        let seen = std::sync::Mutex::new(Vec::new());
        on_calling_thread(|| {
            for_each_init(
                (0..64).collect(),
                || (),
                |_, _: i32| {
                    seen.lock().unwrap().push(std::thread::current().id());
                },
            );
        });
        assert!(seen.lock().unwrap().iter().all(|&id| id == caller));
        assert!(!INLINE.with(Cell::get));
        let _ = std::panic::catch_unwind(|| on_calling_thread(|| panic!("inside")));
        assert!(!INLINE.with(Cell::get), "restored after a panic");
    }
}
