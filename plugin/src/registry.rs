//! Live-object registries behind the opaque C handles.
//!
//! A handle given to C is the address of an `Arc` the registry owns; C never sees a pointer we
//! would follow. Each call looks the address up and clones the `Arc`, so a stale, foreign or
//! already-destroyed handle is a BAD_PARAM naming the address instead of undefined behaviour, and
//! a destroy racing with an execute on another thread cannot free the object under it.
//!
//! One limit: the allocator may give a destroyed object's address to a later object of the same
//! registry, and a stale handle equal to that address then reaches the new object. That is still
//! memory-safe, and hipDNN never uses a handle after destroying it; using heap addresses (rather
//! than counters) is what keeps handles of different plugins in one process distinct, which the
//! backend checks.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::RwLock;

use crate::error::PluginError;

pub struct Registry<T> {
    kind: &'static str,
    live: RwLock<HashMap<usize, Arc<T>>>,
}

impl<T> Registry<T> {
    pub fn new(kind: &'static str) -> Self {
        Registry {
            kind,
            live: RwLock::new(HashMap::new()),
        }
    }

    /// Adopts `object`; returns the address that identifies it to C (never 0). Addresses are
    /// unique among live objects because each is a distinct heap allocation; the registered
    /// types are never zero-sized, which would break that.
    pub fn insert(&self, object: T) -> usize {
        let object = Arc::new(object);
        let address = Arc::as_ptr(&object) as usize;
        self.live.write().insert(address, object);
        address
    }

    pub fn get(&self, address: usize) -> Result<Arc<T>, PluginError> {
        self.live
            .read()
            .get(&address)
            .cloned()
            .ok_or(PluginError::UnknownObject {
                kind: self.kind,
                address,
            })
    }

    /// Forgets the object; it is dropped once calls still holding it return.
    pub fn remove(&self, address: usize) -> Result<Arc<T>, PluginError> {
        self.live
            .write()
            .remove(&address)
            .ok_or(PluginError::UnknownObject {
                kind: self.kind,
                address,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups_fail_after_removal_and_for_foreign_addresses() {
        let registry = Registry::new("thing");
        let a = registry.insert(5u32);
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
    fn an_object_outlives_its_removal_while_borrowed() {
        let registry = Registry::new("thing");
        let a = registry.insert(String::from("alive"));
        let held = registry.get(a).ok();
        assert!(registry.remove(a).is_ok());
        assert_eq!(held.as_deref().map(String::as_str), Some("alive"));
    }
}
