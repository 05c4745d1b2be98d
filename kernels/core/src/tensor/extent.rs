//! Byte extents of tensors a graph declares, checked against what one Rust allocation may span.
//!
//! A slice (and every pointer offset inside one) may cover at most `isize::MAX` bytes; a view
//! built over more is undefined behaviour even if no byte is ever touched. The geometry of a
//! graph is the caller's value, so an extent beyond that limit must be refused when the graph is
//! planned, with a message naming the tensor, its dims and the bytes it would span — never found
//! by a later multiplication that overflows at execute.
//!
//! The arithmetic is done in `u128`, so the byte count in the message is exact for any extent
//! up to 2^128; beyond that the message says so.

use std::fmt;

/// The largest byte extent one buffer may have.
pub const MAX_EXTENT_BYTES: u128 = isize::MAX as u128;

/// How a tensor's buffer is addressed, which decides its extent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Addressing {
    /// Strided: the extent is one past the element `Σ (dim − 1) · stride` addresses.
    Strided,
    /// Ragged: addressed by offsets whose largest valid value is every padded row in use, so the
    /// largest extent any valid offsets give is the product of the padded dims.
    RaggedMaximum,
    /// An index tensor (ragged offsets, seq_len) of `dims[0]` packed elements, as read at
    /// execute.
    Packed,
}

/// One buffer a graph binds.
#[derive(Debug, Clone, Copy)]
pub struct DeclaredExtent<'a> {
    pub uid: i64,
    /// The SDPA field that names it, for the message.
    pub role: &'a str,
    pub dims: &'a [i64],
    pub strides: &'a [i64],
    pub element_size: usize,
    pub addressing: Addressing,
}

/// A buffer that would span more than [`MAX_EXTENT_BYTES`] (or a geometry that is not one:
/// a negative dim or stride, which planning declines before asking).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtentTooLarge {
    /// The tensor; `None` for a workspace.
    pub uid: Option<i64>,
    pub role: String,
    pub dims: Vec<i64>,
    /// The exact byte count, or `None` when it exceeds `u128` too.
    pub bytes: Option<u128>,
    /// The limit the bytes were checked against (`isize::MAX`, or a smaller one a caller gave).
    pub limit: u128,
}

impl fmt::Display for ExtentTooLarge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bytes = match self.bytes {
            Some(bytes) => bytes.to_string(),
            None => "more than 2^128".to_owned(),
        };
        match self.uid {
            Some(uid) => write!(
                f,
                "{} tensor uid {uid} with dims {:?}",
                self.role, self.dims
            )?,
            None => write!(f, "{}", self.role)?,
        }
        write!(
            f,
            " spans {bytes} bytes, above the {} bytes one buffer may span",
            self.limit
        )
    }
}

impl std::error::Error for ExtentTooLarge {}

/// The bytes `extent` spans, or `None` if its geometry is not a non-negative one or the count
/// exceeds `u128`.
pub fn byte_extent(extent: &DeclaredExtent<'_>) -> Option<u128> {
    let size = u128::try_from(extent.element_size).ok()?;
    // Every dim non-negative first, as one pass; then each form reads them as u128 (planning
    // runs this on every GetApplicableEngineIds, so nothing is collected).
    let dim = |d: i64| u128::try_from(d).ok();
    if extent.dims.iter().any(|&d| dim(d).is_none()) {
        return None;
    }
    let mut dims = extent.dims.iter().filter_map(|&d| dim(d));
    let elements = match extent.addressing {
        Addressing::Packed => extent.dims.first().map_or(Some(1), |&d| dim(d))?,
        Addressing::RaggedMaximum => dims.try_fold(1u128, |acc, d| acc.checked_mul(d))?,
        Addressing::Strided => {
            if extent.dims.contains(&0) {
                0
            } else {
                if extent.strides.len() != extent.dims.len() {
                    return None;
                }
                let last = dims.zip(extent.strides).try_fold(0u128, |acc, (d, &s)| {
                    let s = u128::try_from(s).ok()?;
                    (d - 1).checked_mul(s).and_then(|x| acc.checked_add(x))
                })?;
                last.checked_add(1)?
            }
        }
    };
    elements.checked_mul(size)
}

/// Checks every extent against `isize::MAX`; the first that exceeds it is the error.
pub fn check_extents(extents: &[DeclaredExtent<'_>]) -> Result<(), ExtentTooLarge> {
    check_extents_below(extents, MAX_EXTENT_BYTES)
}

/// Checks every extent against `limit` bytes (at most `isize::MAX`).
pub fn check_extents_below(
    extents: &[DeclaredExtent<'_>],
    limit: u128,
) -> Result<(), ExtentTooLarge> {
    let limit = limit.min(MAX_EXTENT_BYTES);
    for extent in extents {
        let bytes = byte_extent(extent);
        if bytes.is_none_or(|b| b > limit) {
            return Err(ExtentTooLarge {
                uid: Some(extent.uid),
                role: extent.role.to_owned(),
                dims: extent.dims.to_vec(),
                bytes,
                limit,
            });
        }
    }
    Ok(())
}

/// A workspace size an engine computed, checked like a tensor extent.
pub fn check_workspace(engine: &str, bytes: u128) -> Result<(), ExtentTooLarge> {
    if bytes > MAX_EXTENT_BYTES {
        return Err(ExtentTooLarge {
            uid: None,
            role: format!("{engine} workspace"),
            dims: Vec::new(),
            bytes: Some(bytes),
            limit: MAX_EXTENT_BYTES,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn extent<'a>(
        dims: &'a [i64],
        strides: &'a [i64],
        element_size: usize,
        addressing: Addressing,
    ) -> DeclaredExtent<'a> {
        DeclaredExtent {
            uid: 9,
            role: "stats_tensor_uid",
            dims,
            strides,
            element_size,
            addressing,
        }
    }

    #[test]
    fn strided_extents_end_one_past_the_last_element() {
        // [2, 3] with strides [10, 1]: last element at 1·10 + 2·1 = 12, so 13 elements.
        let e = extent(&[2, 3], &[10, 1], 4, Addressing::Strided);
        assert_eq!(byte_extent(&e), Some(52));
        let empty = extent(&[2, 0], &[10, 1], 4, Addressing::Strided);
        assert_eq!(byte_extent(&empty), Some(0));
        // Ragged maximum ignores strides: 2·3 elements.
        let r = extent(&[2, 3], &[10, 1], 4, Addressing::RaggedMaximum);
        assert_eq!(byte_extent(&r), Some(24));
        let p = extent(&[5, 1, 1, 1], &[1, 1, 1, 1], 8, Addressing::Packed);
        assert_eq!(byte_extent(&p), Some(40));
    }

    /// Issue 13 item 1: a dense LSE [1, 1, 2^61, 1] of f32 spans 2^63 bytes, one past isize::MAX.
    #[test]
    fn the_issue_lse_is_refused_naming_uid_dims_and_bytes() {
        let dims = [1, 1, 1i64 << 61, 1];
        let strides = [1i64 << 61, 1i64 << 61, 1, 1];
        let e = extent(&dims, &strides, 4, Addressing::Strided);
        let error = check_extents(&[e]).err();
        assert_eq!(
            error.map(|e| e.to_string()),
            Some(format!(
                "stats_tensor_uid tensor uid 9 with dims [1, 1, 2305843009213693952, 1] spans \
                 9223372036854775808 bytes, above the {} bytes one buffer may span",
                isize::MAX
            ))
        );
        // One element less fits exactly.
        let fits = [1, 1, (1i64 << 61) - 1, 1];
        let e = extent(&fits, &strides, 4, Addressing::Strided);
        assert_eq!(byte_extent(&e), Some((1u128 << 63) - 4));
        assert!(check_extents(&[e]).is_ok());
    }

    #[test]
    fn extents_beyond_u128_and_negative_geometry_are_refused() {
        let huge = [i64::MAX; 4];
        let e = extent(&huge, &huge, 2, Addressing::RaggedMaximum);
        let error = check_extents(&[e]).err();
        assert!(
            error
                .as_ref()
                .is_some_and(|e| e.bytes.is_none() && e.to_string().contains("more than 2^128")),
            "{error:?}"
        );
        let negative = extent(&[2, -1], &[1, 1], 4, Addressing::Strided);
        assert!(check_extents(&[negative]).is_err());
    }

    #[test]
    fn a_workspace_above_isize_max_is_refused() {
        assert!(check_workspace("X", MAX_EXTENT_BYTES).is_ok());
        let error = check_workspace("X", MAX_EXTENT_BYTES + 1).err();
        assert_eq!(
            error.map(|e| e.to_string()),
            Some(format!(
                "X workspace spans 9223372036854775808 bytes, above the {} bytes one buffer \
                 may span",
                isize::MAX
            ))
        );
    }
}
