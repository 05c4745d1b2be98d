//! Live-object registries behind the opaque C handles.
//!
//! A handle given to C is a key the registry issued; C never sees a pointer we would follow.
//! Keys come from one process-wide counter and are never reused while this library is loaded,
//! so a stale, foreign or already-destroyed handle is always a BAD_PARAM naming it (issue 13
//! item 4: heap addresses came back 1000 times out of 1000 after destroy + create, and a stale
//! context then ran). Every key has the top nibble `0xF`, outside user-space addresses, so it can
//! never equal a handle another plugin made from a heap address.
//!
//! Keys must not repeat across loads either: a host that unloads and reloads the library keeps
//! handles of the earlier load, and this load's statics remember nothing of it. So the low 60 bits
//! of a key are the system's monotonic clock in nanoseconds when it was issued, or one more than
//! the previous key if the clock has not moved on since. A key is issued after the load that
//! issues it began, and no load issues keys faster than one a nanosecond (each is a heap
//! allocation and a map insert), so every key of this load is larger than every key of an earlier
//! one. (A 16-bit random tag per load, used before, let 32 stale handles through in 2 000 reloads.)
//!
//! Each call holds a [`Lease`] for as long as it runs, outputs included. Removing an object waits
//! for every lease on it to end, so nothing a call hands back (an EngineDetails buffer, say) is
//! freed before that call has returned (issue 13 item 3). A call must not remove the object it
//! holds a lease on (a logging callback destroying the handle of the call that logs would wait
//! for itself).

use std::collections::HashMap;
use std::ops::Deref;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::{Condvar, Mutex, RwLock};

use crate::error::PluginError;

pub struct Registry<T> {
    kind: &'static str,
    live: RwLock<HashMap<usize, Arc<Entry<T>>>>,
}

struct Entry<T> {
    value: T,
    /// Calls holding a lease on this object right now.
    calls: Mutex<usize>,
    idle: Condvar,
}

/// One call's use of a live object; the object is not dropped while any lease on it exists.
pub struct Lease<T> {
    entry: Arc<Entry<T>>,
}

impl<T> Deref for Lease<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.entry.value
    }
}

impl<T> Drop for Lease<T> {
    fn drop(&mut self) {
        let mut calls = self.entry.calls.lock();
        *calls -= 1;
        if *calls == 0 {
            self.entry.idle.notify_all();
        }
    }
}

/// `0xF` in the top nibble; the clock-ordered serial below it (see the module doc).
const KEY_MARK: usize = 0xF << 60;
const SERIAL_MASK: usize = (1 << 60) - 1;

/// The serial of the last key issued by this load.
static LAST_SERIAL: AtomicUsize = AtomicUsize::new(0);

/// Nanoseconds since an unspecified start (boot, on Linux) that never goes backwards and is
/// shared by every load of this library in the process.
fn monotonic_nanos() -> u128 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid, writable timespec; CLOCK_MONOTONIC exists on every Linux.
    let status = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    if status != 0 {
        return 0;
    }
    (now.tv_sec as u128) * 1_000_000_000 + now.tv_nsec as u128
}

/// A key larger than every key issued before it in this process, by this load or an earlier one.
fn next_key() -> Result<usize, PluginError> {
    let now = monotonic_nanos();
    if now == 0 || now > SERIAL_MASK as u128 {
        // 2^60 ns is 36 years of uptime; a clock that cannot be read orders nothing.
        return Err(PluginError::Engine(format!(
            "the monotonic clock reads {now} ns, outside the 60 bits a handle key orders by"
        )));
    }
    let now = now as usize;
    let mut last = LAST_SERIAL.load(Ordering::Relaxed);
    loop {
        let serial = now.max(last + 1);
        if serial > SERIAL_MASK {
            return Err(PluginError::Engine(
                "handle keys are exhausted (2^60 issued)".into(),
            ));
        }
        match LAST_SERIAL.compare_exchange_weak(last, serial, Ordering::Relaxed, Ordering::Relaxed)
        {
            Ok(_) => return Ok(KEY_MARK | serial),
            Err(seen) => last = seen,
        }
    }
}

impl<T> Registry<T> {
    pub fn new(kind: &'static str) -> Self {
        Registry {
            kind,
            live: RwLock::new(HashMap::new()),
        }
    }

    /// Adopts `object`; returns the key that identifies it to C (never 0, never issued before).
    pub fn insert(&self, object: T) -> Result<usize, PluginError> {
        let key = next_key()?;
        let entry = Arc::new(Entry {
            value: object,
            calls: Mutex::new(0),
            idle: Condvar::new(),
        });
        self.live.write().insert(key, entry);
        Ok(key)
    }

    /// A lease on the live object `key` names, for the duration of one call.
    pub fn get(&self, key: usize) -> Result<Lease<T>, PluginError> {
        let live = self.live.read();
        let entry = live.get(&key).ok_or(PluginError::UnknownObject {
            kind: self.kind,
            address: key,
        })?;
        // Counted while the map is read-locked, so a removal cannot slip between lookup and count.
        *entry.calls.lock() += 1;
        Ok(Lease {
            entry: Arc::clone(entry),
        })
    }

    /// Forgets the object (later lookups fail at once), waits until every call still holding a
    /// lease on it has returned, then drops it.
    pub fn remove(&self, key: usize) -> Result<(), PluginError> {
        let entry = {
            let mut live = self.live.write();
            let entry = live.remove(&key).ok_or(PluginError::UnknownObject {
                kind: self.kind,
                address: key,
            })?;
            // An empty map gives its table back: the registries are statics, and a table left
            // allocated when the library is unloaded is heap nobody can free (issue 13).
            if live.is_empty() {
                live.shrink_to_fit();
            }
            entry
        };
        let mut calls = entry.calls.lock();
        while *calls > 0 {
            entry.idle.wait(&mut calls);
        }
        Ok(())
    }

    /// How many objects are live.
    pub fn len(&self) -> usize {
        self.live.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    #[test]
    fn lookups_fail_after_removal_and_for_foreign_keys() {
        let registry = Registry::new("thing");
        let a = registry.insert(5u32).ok().unwrap_or(0);
        assert_ne!(a, 0);
        assert_eq!(registry.get(a).map(|v| *v).ok(), Some(5));
        assert!(registry.get(a + 1).is_err());
        assert!(registry.remove(a).is_ok());
        let err = registry.get(a).err().map(|e| e.to_string());
        assert_eq!(
            err,
            Some(format!(
                "thing {a:#x} is not live (never created by this plugin, or already destroyed)"
            ))
        );
        assert!(registry.remove(a).is_err());
    }

    #[test]
    fn keys_never_repeat_after_destroy_and_create() {
        let registry = Registry::new("thing");
        let mut seen = std::collections::HashSet::new();
        for i in 0..1000u32 {
            let key = registry.insert(i).ok().unwrap_or(0);
            assert!(seen.insert(key), "key {key:#x} reissued");
            assert!(registry.remove(key).is_ok());
        }
        assert!(registry.is_empty());
    }

    #[test]
    fn keys_follow_the_monotonic_clock_and_carry_the_mark() {
        let before = monotonic_nanos() as usize;
        let key = next_key().ok().unwrap_or(0);
        let after = monotonic_nanos() as usize;
        assert_eq!(key & KEY_MARK, KEY_MARK);
        // Neither behind the clock (a later load, starting from the clock, could reissue it) nor
        // ahead of it (an earlier load's keys would reach into this one's).
        let serial = key & SERIAL_MASK;
        assert!(
            (before..=after).contains(&serial),
            "{serial} outside {before}..={after}"
        );
        assert!(next_key().ok().unwrap_or(0) > key);
    }

    #[test]
    fn removal_waits_for_the_calls_holding_a_lease() {
        let registry = Arc::new(Registry::new("thing"));
        let key = registry.insert(String::from("alive")).ok().unwrap_or(0);
        let lease = registry.get(key).ok();
        let removed = Arc::new(AtomicBool::new(false));
        let remover = {
            let (registry, removed) = (Arc::clone(&registry), Arc::clone(&removed));
            std::thread::spawn(move || {
                let result = registry.remove(key);
                removed.store(true, Ordering::SeqCst);
                result.is_ok()
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(!removed.load(Ordering::SeqCst), "removal did not wait");
        assert!(registry.get(key).is_err(), "new calls are refused at once");
        assert_eq!(lease.as_deref().map(String::as_str), Some("alive"));
        drop(lease);
        assert_eq!(remover.join().ok(), Some(true));
        assert!(removed.load(Ordering::SeqCst));
    }
}
