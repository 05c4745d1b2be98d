//! Buffers the plugin lends to C: EngineDetails (`GetEngineDetails`) and serialized execution
//! contexts (`SerializeExecutionContext`).
//!
//! A lent buffer belongs to the caller until it comes back through its own destroy function
//! (`DestroyEngineDetails`, `DestroySerializedExecutionContext`) with the handle value it was lent
//! through — even once that handle is destroyed. A caller whose GetEngineDetails succeeded while
//! another thread destroyed the handle may still read the buffer and then return it (issue 13
//! item 3); a host that destroys its handle before freeing a serialized context must still be
//! able to free it, or its bytes are lost for the life of the process (issue 38).

use std::collections::BTreeMap;

use parking_lot::Mutex;

use crate::error::PluginError;

/// What a buffer was lent as; a buffer comes back only through its own kind's destroy function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    EngineDetails,
    SerializedContext,
}

impl Kind {
    fn describe(self) -> &'static str {
        match self {
            Kind::EngineDetails => "engine details",
            Kind::SerializedContext => "serialized execution context",
        }
    }
}

struct Loan {
    kind: Kind,
    /// Key of the handle it was lent through.
    owner: usize,
    bytes: Box<[u8]>,
}

/// Buffer address → its loan. A `BTreeMap`, because its empty value is `const` and holds no heap.
static LENT: Mutex<BTreeMap<usize, Loan>> = Mutex::new(BTreeMap::new());

/// Keeps `bytes` alive until [`give_back`] and returns where C may read them; `owner` is the key
/// of the lending handle.
pub fn lend(kind: Kind, owner: usize, bytes: Vec<u8>) -> (*const u8, usize) {
    let bytes = bytes.into_boxed_slice();
    let (ptr, len) = (bytes.as_ptr(), bytes.len());
    LENT.lock()
        .insert(ptr as usize, Loan { kind, owner, bytes });
    (ptr, len)
}

/// Frees a buffer lent as `kind` through handle `owner` (live or destroyed); `size` must be what
/// was lent.
pub fn give_back(kind: Kind, owner: usize, address: usize, size: usize) -> Result<(), PluginError> {
    let mut lent = LENT.lock();
    match lent.get(&address) {
        Some(loan) if loan.kind == kind && loan.owner == owner && loan.bytes.len() == size => {
            lent.remove(&address);
            if lent.is_empty() {
                // An emptied map keeps its root node; a fresh one holds no heap, so nothing stays
                // allocated behind this static when the library is unloaded.
                *lent = BTreeMap::new();
            }
            Ok(())
        }
        _ => Err(PluginError::UnknownLentBuffer {
            what: kind.describe(),
            address,
            size,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_comes_back_once_with_its_kind_size_and_lending_handle() {
        let (ptr, len) = lend(Kind::EngineDetails, 7, vec![1, 2, 3]);
        let address = ptr as usize;
        assert!(give_back(Kind::EngineDetails, 7, address, len + 1).is_err());
        assert!(give_back(Kind::EngineDetails, 8, address, len).is_err());
        assert!(give_back(Kind::SerializedContext, 7, address, len).is_err());
        assert!(give_back(Kind::EngineDetails, 7, address, len).is_ok());
        let again = give_back(Kind::EngineDetails, 7, address, len).err();
        assert_eq!(
            again.map(|e| e.to_string()),
            Some(format!(
                "engine details buffer {address:#x} of 3 bytes was not lent through this handle, \
                 or was already returned"
            ))
        );
    }
}
