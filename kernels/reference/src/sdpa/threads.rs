//! Where the CPU forward's parallel loops run: the current pool ([`crate::parallel`]), or the
//! calling thread.
//!
//! A small problem costs less than waking a pool thread and waiting for it (two context switches
//! per execute, several µs on a loaded two-core machine against tens of µs of work), so a caller
//! that knows its problem is small runs it with [`on_calling_thread`]: the loops then stay on the
//! calling thread, and no pool is started or woken.

pub use crate::parallel::on_calling_thread;
pub(crate) use crate::parallel::{current_threads, for_each_init};
