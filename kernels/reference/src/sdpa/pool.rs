//! Recycles staging buffers between calls.
//!
//! A fresh buffer of tens of megabytes costs one page fault per 4 KiB on first touch, which
//! measured at a fifth of a whole forward pass on real shapes; reusing the previous call's
//! buffers avoids that. At most a few buffers of at most 256 MiB each are kept per pool.

use std::sync::Mutex;

use ragged_core::error::KernelError;

/// Larger buffers are freed: a one-off huge problem should not pin its memory for good.
const MAX_KEPT_BYTES: usize = 256 << 20;

/// Kept buffers of one element type.
pub(crate) struct Pool<T> {
    buffers: Mutex<Vec<Vec<T>>>,
    keep: usize,
}

impl<T: Copy + Default> Pool<T> {
    /// A pool that keeps at most `keep` buffers.
    pub(crate) const fn new(keep: usize) -> Self {
        Pool {
            buffers: Mutex::new(Vec::new()),
            keep,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Vec<T>>> {
        self.buffers
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A buffer of `len` elements for a caller that overwrites every one: a recycled buffer
    /// keeps its stale contents rather than paying for a memset, only growth is zero-filled.
    /// Reserved fallibly (`too_large` names the failure), since the size follows graph dims and
    /// a failed allocation would abort the host process.
    pub(crate) fn buffer(
        &self,
        len: usize,
        too_large: impl Fn() -> KernelError,
    ) -> Result<Vec<T>, KernelError> {
        let mut data = self.take(len);
        data.truncate(len);
        data.try_reserve_exact(len - data.len())
            .map_err(|_| too_large())?;
        data.resize(len, T::default());
        Ok(data)
    }

    /// The smallest kept buffer that holds `len` elements, else the largest one (it grows less).
    fn take(&self, len: usize) -> Vec<T> {
        let mut buffers = self.lock();
        let fitting = (0..buffers.len())
            .filter(|&i| buffers[i].capacity() >= len)
            .min_by_key(|&i| buffers[i].capacity());
        let largest = (0..buffers.len()).max_by_key(|&i| buffers[i].capacity());
        match fitting.or(largest) {
            Some(i) => buffers.swap_remove(i),
            None => Vec::new(),
        }
    }

    /// Keeps `buffer` for a later call, unless the pool is full or the buffer too large.
    pub(crate) fn give(&self, buffer: Vec<T>) {
        let mut buffers = self.lock();
        let bytes = buffer.capacity().saturating_mul(std::mem::size_of::<T>());
        if buffers.len() < self.keep && bytes <= MAX_KEPT_BYTES {
            buffers.push(buffer);
        }
    }

    /// Drops every kept buffer and the list itself, so no heap of the pool outlives the call.
    pub(crate) fn release(&self) {
        *self.lock() = Vec::new();
    }
}

/// Where each (batch, head) block starts when batch `b`'s blocks hold `rows[b] × width`
/// elements, heads within a batch, and the total; `None` when the total overflows.
pub(crate) fn block_starts(
    heads: usize,
    width: usize,
    rows: &[usize],
) -> Option<(Vec<usize>, usize)> {
    let mut starts = Vec::with_capacity(rows.len().saturating_mul(heads));
    let mut next = 0usize;
    for &len in rows {
        let block = len.checked_mul(width)?;
        for _ in 0..heads {
            starts.push(next);
            next = next.checked_add(block)?;
        }
    }
    Some((starts, next))
}
