//! Live-object registries behind the opaque C handles.
//!
//! A handle given to C is a key the registry issued; C never sees a pointer we would follow.
//! Keys come from one process-wide counter and are never reused while this library is loaded,
//! so a stale, foreign or already-destroyed handle is always a BAD_PARAM naming it (issue 13
//! item 4: heap addresses came back 1000 times out of 1000 after destroy + create, and a stale
//! context then ran). Every key has the top nibble `0xF`, outside user-space addresses, so it can
//! never equal a handle another plugin made from a heap address, and bits 44..60 hold a tag drawn
//! from the clock and this library's load address when the library is loaded, so keys of an
//! earlier load of the same file (after `dlclose`) are, with overwhelming odds, not reissued.
//!
//! Each call holds a [`Lease`] for as long as it runs, outputs included. Removing an object waits
//! for every lease on it to end, so nothing a call hands back (an EngineDetails buffer, say) is
//! freed before that call has returned (issue 13 item 3). A call must not remove the object it
//! holds a lease on (a logging callback destroying the handle of the call that logs would wait
//! for itself).

use std::collections::HashMap;
use std::ops::Deref;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock};

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

/// Bits of a key: `0xF` in the top nibble, a per-load tag in bits 44..60, a counter below.
const KEY_MARK: usize = 0xF << 60;
const TAG_SHIFT: u32 = 44;
const COUNTER_MASK: usize = (1 << TAG_SHIFT) - 1;

static NEXT_COUNTER: AtomicUsize = AtomicUsize::new(1);

/// Drawn once per load of the library; see the module doc.
static LOAD_TAG: LazyLock<usize> = LazyLock::new(|| {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let here = &NEXT_COUNTER as *const AtomicUsize as usize;
    // Fold both into 16 bits; a multiplicative mix so nearby clocks give distant tags.
    let mixed = (nanos as u64 ^ (here as u64).rotate_left(17)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (mixed >> 48) as usize
});

/// A key never issued before in this load: 2^44 keys before the counter would wrap, which at a
/// billion creations a second is over four hours of nothing but creations; it then refuses.
fn next_key() -> Result<usize, PluginError> {
    let counter = NEXT_COUNTER.fetch_add(1, Ordering::Relaxed);
    if counter > COUNTER_MASK {
        return Err(PluginError::Engine(
            "this process has created 2^44 plugin objects; keys would repeat".into(),
        ));
    }
    Ok(KEY_MARK | (*LOAD_TAG << TAG_SHIFT) | counter)
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
