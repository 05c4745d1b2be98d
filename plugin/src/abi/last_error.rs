//! Per-thread last-error text behind `hipdnnPluginGetLastErrorString`.
//!
//! The backend wraps the returned pointer in a `std::string_view` without a NULL check and reads it
//! right after a failing call on the same thread, so the storage is a fixed per-thread buffer: its
//! address never changes, it is an empty C string before the first failure, and a message stays
//! until the next failure on that thread (successes leave it alone).

use std::cell::RefCell;
use std::ffi::c_char;

/// `HIPDNN_PLUGIN_ERROR_STRING_MAX_LENGTH`, NUL included.
pub const MAX_LEN: usize = 2048;

thread_local! {
    static LAST_ERROR: RefCell<[u8; MAX_LEN]> = const { RefCell::new([0; MAX_LEN]) };
}

/// Replaces this thread's message. Text longer than the buffer is cut at a UTF-8 character
/// boundary so C++ callers that decode it never see half a character; interior NULs (which
/// would silently shorten the C string) are replaced by spaces.
pub fn set(message: &str) {
    let mut end = message.len().min(MAX_LEN - 1);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    LAST_ERROR.with(|cell| {
        let mut buffer = cell.borrow_mut();
        for (slot, byte) in buffer.iter_mut().zip(message[..end].bytes()) {
            *slot = if byte == 0 { b' ' } else { byte };
        }
        buffer[end] = 0;
    });
}

/// This thread's message as it stands, to be put back with [`restore`].
pub fn snapshot() -> Box<[u8; MAX_LEN]> {
    LAST_ERROR.with(|cell| Box::new(*cell.borrow()))
}

/// Puts back a message taken with [`snapshot`] (log delivery uses it: a callback's calls into the
/// plugin must not replace the error of the export that logged).
pub fn restore(kept: &[u8; MAX_LEN]) {
    LAST_ERROR.with(|cell| *cell.borrow_mut() = *kept);
}

/// The C string for this thread; valid for the thread's lifetime.
pub fn as_c_ptr() -> *const c_char {
    LAST_ERROR.with(|cell| cell.as_ptr().cast::<c_char>().cast_const())
}

/// This thread's message as Rust text, for tests.
#[cfg(test)]
pub fn current() -> String {
    LAST_ERROR.with(|cell| {
        let buffer = cell.borrow();
        let len = buffer.iter().position(|&b| b == 0).unwrap_or(MAX_LEN);
        String::from_utf8_lossy(&buffer[..len]).into_owned()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_kept_until_replaced() {
        set("first failure");
        assert_eq!(current(), "first failure");
        set("second");
        assert_eq!(current(), "second");
    }

    #[test]
    fn long_messages_are_cut_at_a_character_boundary() {
        // 'é' is two bytes; 1024 of them are 2048 bytes, so the cut falls after 1023 characters.
        set(&"é".repeat(1024));
        let text = current();
        assert_eq!(text.len(), 2046);
        assert_eq!(text.chars().count(), 1023);
    }

    #[test]
    fn the_buffer_address_is_stable_and_per_thread() {
        let here = as_c_ptr();
        set("x");
        assert_eq!(as_c_ptr(), here);
        let there = std::thread::spawn(|| {
            set("other thread");
            as_c_ptr() as usize
        })
        .join()
        .unwrap_or(0);
        assert_ne!(there, here as usize);
        assert_eq!(current(), "x");
    }

    #[test]
    fn interior_nul_does_not_truncate() {
        set("a\0b");
        assert_eq!(current(), "a b");
    }
}
