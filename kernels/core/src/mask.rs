//! The diagonal mask band (schema.md §6.1, ragged-sdpa.md §5 step 2) in already-resolved form.
//!
//! Every mask the project supports admits, for each query row, one contiguous interval of keys;
//! the reference works with that interval directly, which is also what lets it skip whole key
//! tiles.

use std::ops::Range;

/// Where the band's diagonal is anchored within each batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum DiagonalAlignment {
    /// Query i is aligned with key i (hipDNN's default, cuDNN `causal_mask`).
    #[default]
    TopLeft,
    /// The last query is aligned with the last key: offset `Lkv(b) − Lq(b)` (FA, AITER).
    BottomRight,
}

/// A resolved mask band: key j is admitted for query i iff
/// `i + offset − left ≤ j ≤ i + offset + right`, a missing bound being unbounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct MaskBand {
    /// How far left of the diagonal keys are admitted; `None` (or negative) = unbounded.
    pub left: Option<i64>,
    /// How far right of the diagonal keys are admitted; `None` (or negative) = unbounded.
    pub right: Option<i64>,
    /// Diagonal anchor.
    pub alignment: DiagonalAlignment,
}

impl MaskBand {
    /// No mask: every key is admitted.
    pub const fn none() -> Self {
        MaskBand {
            left: None,
            right: None,
            alignment: DiagonalAlignment::TopLeft,
        }
    }

    /// Causal, query i sees keys 0..=i.
    pub const fn causal_top_left() -> Self {
        MaskBand {
            left: None,
            right: Some(0),
            alignment: DiagonalAlignment::TopLeft,
        }
    }

    /// Causal with the diagonal through the last query and the last key.
    pub const fn causal_bottom_right() -> Self {
        MaskBand {
            left: None,
            right: Some(0),
            alignment: DiagonalAlignment::BottomRight,
        }
    }

    /// A sliding window of `left` keys before and `right` keys after the diagonal.
    pub const fn window(
        left: Option<i64>,
        right: Option<i64>,
        alignment: DiagonalAlignment,
    ) -> Self {
        MaskBand {
            left,
            right,
            alignment,
        }
    }

    /// Keys admitted for query row `i` of a batch with `lq` queries and `lkv` keys; empty when
    /// the row sees no key.
    pub fn admitted(&self, i: usize, lq: usize, lkv: usize) -> Range<usize> {
        let offset = match self.alignment {
            DiagonalAlignment::TopLeft => 0,
            DiagonalAlignment::BottomRight => lkv as i64 - lq as i64,
        };
        // Schema.md §6.1: any negative bound means unbounded.
        let bounded = |bound: Option<i64>| bound.filter(|&b| b >= 0);
        let diagonal = i as i64 + offset;
        // The bounds are int64 straight from the graph, so a huge one (a writer's "no limit")
        // must saturate: wrapping would turn it into an empty band and a row of zeros.
        let lo = bounded(self.left).map_or(0, |left| diagonal.saturating_sub(left).max(0));
        let hi = bounded(self.right).map_or(lkv as i64, |right| {
            diagonal
                .saturating_add(right)
                .saturating_add(1)
                .clamp(0, lkv as i64)
        });
        let lo = lo.min(hi);
        lo as usize..hi as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causal_top_left_sees_the_prefix() {
        let band = MaskBand::causal_top_left();
        assert_eq!(band.admitted(0, 3, 5), 0..1);
        assert_eq!(band.admitted(2, 3, 5), 0..3);
    }

    #[test]
    fn causal_bottom_right_shifts_by_the_length_difference() {
        let band = MaskBand::causal_bottom_right();
        assert_eq!(band.admitted(0, 3, 5), 0..3);
        assert_eq!(band.admitted(2, 3, 5), 0..5);
        // More queries than keys: the top rows see nothing.
        assert!(band.admitted(0, 4, 2).is_empty());
        assert!(band.admitted(1, 4, 2).is_empty());
        assert_eq!(band.admitted(2, 4, 2), 0..1);
    }

    #[test]
    fn windows_clip_both_sides_and_negative_bounds_are_unbounded() {
        let band = MaskBand::window(Some(1), Some(1), DiagonalAlignment::TopLeft);
        assert_eq!(band.admitted(0, 4, 4), 0..2);
        assert_eq!(band.admitted(2, 4, 4), 1..4);
        assert_eq!(band.admitted(3, 4, 4), 2..4);
        let unbounded = MaskBand::window(Some(-1), Some(-5), DiagonalAlignment::TopLeft);
        assert_eq!(unbounded.admitted(1, 4, 6), 0..6);
        assert_eq!(MaskBand::none().admitted(1, 4, 0), 0..0);
    }

    #[test]
    fn bounds_at_the_int64_limit_admit_every_key_instead_of_wrapping() {
        let wide = MaskBand::window(Some(i64::MAX), Some(i64::MAX), DiagonalAlignment::TopLeft);
        assert_eq!(wide.admitted(0, 3, 5), 0..5);
        assert_eq!(wide.admitted(2, 3, 5), 0..5);
        // Bottom-right with more queries than keys puts the diagonal below zero.
        let left_only = MaskBand::window(Some(i64::MAX), None, DiagonalAlignment::BottomRight);
        assert_eq!(left_only.admitted(0, 6, 2), 0..2);
        let right_only = MaskBand::window(None, Some(i64::MAX), DiagonalAlignment::BottomRight);
        assert_eq!(right_only.admitted(0, 6, 2), 0..2);
    }
}
