//! Whether the buffers one execute writes overlap anything else it binds.
//!
//! An output that overlaps an input would be read after being written (wrong results), one that
//! overlaps the caller's ragged offsets or seq_len would overwrite the caller's metadata (issue
//! 13 item 6), and two writes over one byte race. So every buffer the engine writes is checked
//! against every buffer it reads — Q, K, V, each ragged offset aux, each seq_len, a runtime
//! scale — and against every other buffer it writes.

use crate::error::PluginError;

/// The bytes one binding spans in this call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub uid: i64,
    pub role: &'static str,
    pub start: usize,
    pub bytes: usize,
}

impl Span {
    fn end(&self) -> usize {
        self.start.saturating_add(self.bytes)
    }

    /// Empty spans overlap nothing: a zero-byte buffer is never read or written.
    fn overlaps(&self, other: &Span) -> bool {
        self.bytes > 0 && other.bytes > 0 && self.start < other.end() && other.start < self.end()
    }
}

/// INVALID_VALUE naming both uids, roles and ranges for the first write that overlaps a read or
/// an earlier write.
pub fn check(writes: &[Span], reads: &[Span]) -> Result<(), PluginError> {
    check_all(writes.iter().copied(), reads.iter().copied())
}

/// [`check`] over spans the caller keeps wherever it likes (the per-call path keeps them on
/// the stack). A handful of spans per call: pairwise comparison, no sorting.
pub fn check_all<W, R>(writes: W, reads: R) -> Result<(), PluginError>
where
    W: Iterator<Item = Span> + Clone,
    R: Iterator<Item = Span> + Clone,
{
    for (i, write) in writes.clone().enumerate() {
        let mut others = reads.clone().chain(writes.clone().take(i));
        if let Some(other) = others.find(|o| write.overlaps(o)) {
            return Err(PluginError::InvalidValue(format!(
                "output tensor uid {} ({}) at {:#x}..{:#x} overlaps tensor uid {} ({}) at \
                 {:#x}..{:#x}",
                write.uid,
                write.role,
                write.start,
                write.end(),
                other.uid,
                other.role,
                other.start,
                other.end()
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::types::Status;

    fn span(uid: i64, role: &'static str, start: usize, bytes: usize) -> Span {
        Span {
            uid,
            role,
            start,
            bytes,
        }
    }

    #[test]
    fn offsets_inside_o_are_refused_naming_both() {
        let o = span(4, "o_tensor_uid", 0x1000, 0x100);
        let offsets = span(5, "ragged_offset_tensor_uid", 0x10f0, 12);
        let error = check(&[o], &[offsets]).err();
        assert_eq!(
            error.as_ref().map(PluginError::status),
            Some(Status::INVALID_VALUE)
        );
        assert_eq!(
            error.map(|e| e.to_string()),
            Some(
                "invalid value: output tensor uid 4 (o_tensor_uid) at 0x1000..0x1100 overlaps \
                 tensor uid 5 (ragged_offset_tensor_uid) at 0x10f0..0x10fc"
                    .into()
            )
        );
    }

    #[test]
    fn adjacent_and_empty_spans_do_not_overlap_but_two_writes_do() {
        let o = span(4, "o_tensor_uid", 0x1000, 0x100);
        let after = span(5, "ragged_offset_tensor_uid", 0x1100, 12);
        let empty = span(6, "seq_len_q_tensor_uid", 0x1010, 0);
        assert!(check(&[o], &[after, empty]).is_ok());
        let lse = span(9, "stats_tensor_uid", 0x10ff, 4);
        assert!(check(&[o, lse], &[]).is_err());
    }
}
