use std::collections::HashSet;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use super::*;

/// A pool on std threads that counts how many of them are still alive.
fn counted_pool(helpers: usize, alive: &Arc<AtomicUsize>) -> Pool {
    Pool::start(helpers, |main| {
        let alive = Arc::clone(alive);
        alive.fetch_add(1, Ordering::SeqCst);
        let handle = std::thread::spawn(move || {
            main();
            alive.fetch_sub(1, Ordering::SeqCst);
        });
        Ok(Box::new(move || handle.join().unwrap()))
    })
    .unwrap()
}

#[test]
fn every_item_runs_once_and_scratch_is_made_once_per_participant() {
    let alive = Arc::new(AtomicUsize::new(0));
    let pool = counted_pool(3, &alive);
    let hits: Vec<AtomicUsize> = (0..1000).map(|_| AtomicUsize::new(0)).collect();
    let inits = AtomicUsize::new(0);
    with_pool(&pool, || {
        assert_eq!(current_threads(), 4);
        for_each_init(
            (0..1000).collect(),
            || inits.fetch_add(1, Ordering::SeqCst),
            |_, i: usize| {
                hits[i].fetch_add(1, Ordering::SeqCst);
            },
        );
    });
    assert!(hits.iter().all(|h| h.load(Ordering::SeqCst) == 1));
    let inits = inits.load(Ordering::SeqCst);
    assert!((1..=4).contains(&inits), "{inits} scratch values");
    drop(pool);
    assert_eq!(
        alive.load(Ordering::SeqCst),
        0,
        "dropping the pool joins its threads"
    );
}

#[test]
fn the_caller_and_a_helper_work_at_the_same_time() {
    let alive = Arc::new(AtomicUsize::new(0));
    let pool = counted_pool(1, &alive);
    let started = AtomicUsize::new(0);
    let threads = Mutex::new(HashSet::new());
    with_pool(&pool, || {
        for_each_init(
            vec![0, 1],
            || (),
            |_, _: i32| {
                threads.lock().unwrap().insert(std::thread::current().id());
                started.fetch_add(1, Ordering::SeqCst);
                // Each item waits for the other: only two threads at once can finish both.
                let deadline = Instant::now() + Duration::from_secs(20);
                while started.load(Ordering::SeqCst) < 2 && Instant::now() < deadline {
                    std::thread::yield_now();
                }
            },
        );
    });
    assert_eq!(started.load(Ordering::SeqCst), 2);
    assert_eq!(threads.lock().unwrap().len(), 2, "caller and helper");
}

#[test]
fn a_helpers_panic_reaches_the_caller_and_the_pool_still_works() {
    let alive = Arc::new(AtomicUsize::new(0));
    let pool = counted_pool(1, &alive);
    let caller = std::thread::current().id();
    let panicked = AtomicBool::new(false);
    let outcome = panic::catch_unwind(AssertUnwindSafe(|| {
        with_pool(&pool, || {
            for_each_init(
                (0..64).collect(),
                || (),
                |_, _: i32| {
                    if std::thread::current().id() != caller {
                        panicked.store(true, Ordering::SeqCst);
                        panic!("helper item");
                    }
                    std::thread::sleep(Duration::from_millis(2));
                },
            );
        })
    }));
    assert_eq!(outcome.is_err(), panicked.load(Ordering::SeqCst));
    let sum = AtomicUsize::new(0);
    with_pool(&pool, || {
        for_each_init(
            (1..=100).collect(),
            || (),
            |_, i: usize| {
                sum.fetch_add(i, Ordering::SeqCst);
            },
        )
    });
    assert_eq!(sum.load(Ordering::SeqCst), 5050);
    assert_eq!(
        current_threads(),
        configured_threads(),
        "with_pool restored"
    );
}

#[test]
fn inline_loops_stay_on_the_calling_thread_and_the_flag_is_restored() {
    let caller = std::thread::current().id();
    let seen = Mutex::new(Vec::new());
    on_calling_thread(|| {
        assert_eq!(current_threads(), 1);
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
    let _ = panic::catch_unwind(|| on_calling_thread(|| panic!("inside")));
    assert!(!INLINE.with(Cell::get), "restored after a panic");
}

#[test]
fn a_loop_inside_an_item_runs_on_that_items_thread() {
    let alive = Arc::new(AtomicUsize::new(0));
    let pool = counted_pool(2, &alive);
    let mismatched = AtomicUsize::new(0);
    with_pool(&pool, || {
        for_each_init(
            (0..8).collect(),
            || (),
            |_, _: i32| {
                let outer = std::thread::current().id();
                for_each_init(
                    (0..8).collect(),
                    || (),
                    |_, _: i32| {
                        if std::thread::current().id() != outer {
                            mismatched.fetch_add(1, Ordering::SeqCst);
                        }
                    },
                );
            },
        );
    });
    assert_eq!(mismatched.load(Ordering::SeqCst), 0);
}
