//! The backward suite's case list: the numeric suite's shapes (zero-length batches, padded
//! lengths, both causal alignments, GQA, both dims orders, every element type) plus the shapes a
//! GPU backward is built for and must be checked on: D = 128, 96 and 256, fp16 with masks, sliding
//! windows in both alignments, and lengths that span several kernel tiles. Small enough that the host
//! engine runs the whole list in a few seconds, since CI runs it there.

use hipdnn_shim::backward::backward_of;
use hipdnn_shim::graphs::{Mask, RaggedSdpaSpec};
use ragged_schema::model::{DataType, DiagonalAlignment, Graph, NodeAttributes};

use super::numeric;

/// A forward whose backward is tested: a numeric-suite spec, optionally with a sliding window
/// (which [`RaggedSdpaSpec`]'s masks do not express) set on its node.
#[derive(Debug, Clone, PartialEq)]
pub struct BackwardCase {
    pub spec: RaggedSdpaSpec,
    pub window: Option<Window>,
}

/// A band of ragged-sdpa.md §2: key j is admitted iff
/// `i + offset - left <= j <= i + offset + right`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub left: i64,
    pub right: i64,
    pub alignment: DiagonalAlignment,
}

impl BackwardCase {
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// The forward graph, its band replaced by the window if there is one.
    pub fn forward(&self) -> Graph {
        let mut graph = self.spec.graph();
        if let Some(w) = self.window {
            for node in &mut graph.nodes {
                if let NodeAttributes::Sdpa(sdpa) = &mut node.attributes {
                    sdpa.left_bound = Some(w.left);
                    sdpa.right_bound = Some(w.right);
                    sdpa.diagonal_alignment = w.alignment;
                }
            }
        }
        graph
    }

    /// The backward graph of [`Self::forward`]; `None` if the forward has no stats.
    pub fn backward(&self) -> Option<Graph> {
        backward_of(&self.forward())
    }
}

impl From<RaggedSdpaSpec> for BackwardCase {
    fn from(spec: RaggedSdpaSpec) -> Self {
        BackwardCase { spec, window: None }
    }
}

/// The numeric suite's cases, an MQA one, and the GPU backward's shapes. The forward's
/// `unshared_aux` case is left out: a backward's O, dO and dQ must name Q's offsets (schema
/// validation of `SdpaBackwardAttributes`), which separate aux tensors do not.
pub fn cases() -> Vec<BackwardCase> {
    let mut cases: Vec<BackwardCase> = numeric::cases()
        .into_iter()
        .filter(|s| s.shared_aux)
        .map(BackwardCase::from)
        .collect();
    let spec = |name: &str, q: &[i64], kv: &[i64], f: &dyn Fn(&mut RaggedSdpaSpec)| {
        let mut s = RaggedSdpaSpec::packed(name, q, kv);
        f(&mut s);
        s
    };
    let window = |left, right, alignment| {
        Some(Window {
            left,
            right,
            alignment,
        })
    };
    cases.push(
        spec("mqa_4q_1kv", &[3, 0, 4], &[2, 5, 0], &|s| {
            s.heads_q = 4;
            s.heads_kv = 1;
        })
        .into(),
    );
    // Several 64-row tiles on both sides, a one-row batch and S_q != S_kv, bottom-right.
    cases.push(
        spec(
            "bf16_d128_gqa_causal_bottom_right_tiles",
            &[70, 130, 1],
            &[150, 64, 33],
            &|s| {
                s.head_dim = 128;
                s.heads_q = 4;
                s.heads_kv = 2;
                s.mask = Mask::CausalBottomRight;
            },
        )
        .into(),
    );
    cases.push(
        spec("f16_d128_causal_top_left", &[5, 9], &[9, 4], &|s| {
            s.io_type = DataType::Half;
            s.head_dim = 128;
            s.mask = Mask::CausalTopLeft;
        })
        .into(),
    );
    // Row 7 of batch 0 (Lkv 5) sees no key through a window of 2 left of the diagonal; keys 3 to 5
    // of batch 1 (Lq 3) are admitted by no query.
    cases.push(BackwardCase {
        window: window(2, 0, DiagonalAlignment::TopLeft),
        ..spec("f16_d128_padded_window_top_left", &[9, 5], &[7, 6], &|s| {
            s.io_type = DataType::Half;
            s.head_dim = 128;
            s.seq_len_q = Some(vec![8, 3]);
            s.seq_len_kv = Some(vec![5, 6]);
        })
        .into()
    });
    // Batch 0 has no queries and batch 2 no keys; batch 1 spans two tiles each way.
    cases.push(BackwardCase {
        window: window(16, 4, DiagonalAlignment::BottomRight),
        ..spec(
            "f16_d64_gqa_window_bottom_right_zero_lengths",
            &[0, 70, 3, 5],
            &[4, 90, 0, 2],
            &|s| {
                s.io_type = DataType::Half;
                s.heads_q = 4;
                s.heads_kv = 2;
            },
        )
        .into()
    });
    // Rows 4 and 5 of batch 0 (Lkv 3) and keys 3 to 7 of batch 1 (Lq 2) have no partner.
    cases.push(BackwardCase {
        window: window(1, 1, DiagonalAlignment::TopLeft),
        ..spec(
            "bf16_d64_padded_window_top_left_bhsd_dims",
            &[6, 4],
            &[5, 8],
            &|s| {
                s.seq_len_q = Some(vec![6, 2]);
                s.seq_len_kv = Some(vec![3, 8]);
                s.bhsd_dims = true;
            },
        )
        .into()
    });
    // D 96 (rows a kernel pads to 128 columns) over two query tiles, GQA, causal top-left.
    cases.push(
        spec(
            "f16_d96_gqa_causal_top_left_tiles",
            &[70, 3],
            &[66, 9],
            &|s| {
                s.io_type = DataType::Half;
                s.head_dim = 96;
                s.heads_q = 4;
                s.heads_kv = 2;
                s.mask = Mask::CausalTopLeft;
            },
        )
        .into(),
    );
    // D 256 with a bottom-right window: batch 0 has no queries, batch 2 no keys.
    cases.push(BackwardCase {
        window: window(8, 2, DiagonalAlignment::BottomRight),
        ..spec(
            "bf16_d256_window_bottom_right_zero_lengths",
            &[0, 40, 5],
            &[6, 70, 0],
            &|s| s.head_dim = 256,
        )
        .into()
    });
    cases
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the list must keep covering (issue 15 item 4): both 16-bit types at D 64 and 128, D 96
    /// and 256, every band, GQA, padded lengths, and batches with Lq = 0 and with Lkv = 0.
    #[test]
    fn the_list_covers_the_gpu_backwards_matrix() {
        let cases = cases();
        let any = |f: &dyn Fn(&BackwardCase) -> bool| cases.iter().any(f);
        for dtype in [DataType::BFloat16, DataType::Half] {
            for d in [64, 128] {
                assert!(
                    any(&|c| c.spec.io_type == dtype && c.spec.head_dim == d),
                    "{dtype:?} D {d}"
                );
            }
        }
        for d in [96, 256] {
            assert!(any(&|c| c.spec.head_dim == d), "D {d}");
        }
        assert!(any(&|c| c.spec.mask == Mask::None && c.window.is_none()));
        assert!(any(&|c| c.spec.mask == Mask::CausalTopLeft));
        assert!(any(&|c| c.spec.mask == Mask::CausalBottomRight));
        for alignment in [DiagonalAlignment::TopLeft, DiagonalAlignment::BottomRight] {
            assert!(any(&|c| c
                .window
                .is_some_and(|w| w.alignment == alignment && w.left > 0)));
        }
        assert!(any(&|c| c.spec.heads_q > c.spec.heads_kv));
        assert!(any(
            &|c| c.spec.seq_len_q.is_some() && c.spec.seq_len_kv.is_some()
        ));
        let lengths = |c: &BackwardCase| {
            let s = &c.spec;
            let q = s.seq_len_q.clone().unwrap_or_else(|| s.extents_q.clone());
            let kv = s.seq_len_kv.clone().unwrap_or_else(|| s.extents_kv.clone());
            q.into_iter().zip(kv).collect::<Vec<_>>()
        };
        assert!(any(&|c| lengths(c).iter().any(|&(q, kv)| q == 0 && kv > 0)));
        assert!(any(&|c| lengths(c).iter().any(|&(q, kv)| q > 0 && kv == 0)));
        assert!(any(
            &|c| c.window.is_some() && lengths(c).iter().any(|&(q, kv)| q > 64 && kv > 64)
        ));
    }

    #[test]
    fn a_window_is_set_on_the_forward_and_carried_into_the_backward() {
        let case = cases()
            .into_iter()
            .find(|c| c.window.is_some())
            .unwrap_or_else(|| panic!("a window case"));
        let graph = case.backward().unwrap_or_else(|| panic!("no backward"));
        let Some(NodeAttributes::SdpaBackward(b)) = graph.nodes.first().map(|n| &n.attributes)
        else {
            panic!("not a backward node");
        };
        let w = case.window.unwrap_or_else(|| panic!("window"));
        assert_eq!(
            (b.left_bound, b.right_bound, b.diagonal_alignment),
            (Some(w.left), Some(w.right), w.alignment)
        );
    }
}
