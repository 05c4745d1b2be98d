use ragged_core::HostDataMut;
use ragged_schema::model::DataType;

use super::*;
use crate::case_inputs::pre_supplied;
use crate::graphs::{Mask, RaggedSdpaSpec};
use crate::harness::Entry;
use crate::oracle_backward;

/// GQA 4:2, zero-length batches on each side, padded lengths, bottom-right causal (rows with no
/// key in batch 2).
fn spec(io_type: DataType) -> RaggedSdpaSpec {
    RaggedSdpaSpec {
        io_type,
        heads_q: 4,
        heads_kv: 2,
        head_dim: 16,
        seq_len_q: Some(vec![3, 0, 4, 2]),
        seq_len_kv: Some(vec![4, 3, 1, 0]),
        mask: Mask::CausalBottomRight,
        ..RaggedSdpaSpec::packed("bwd", &[4, 2, 5, 2], &[5, 3, 2, 1])
    }
}

fn harness(spec: &RaggedSdpaSpec) -> BackwardHarness {
    let graph = backward_of(&spec.graph()).expect("the spec has stats");
    if let Err(e) = graph.validate() {
        panic!("{e}");
    }
    let pre = pre_supplied(spec).unwrap_or_else(|e| panic!("{e}"));
    BackwardHarness::new(graph, &pre, 7).unwrap_or_else(|e| panic!("{e}"))
}

/// The reference's gradients moved into the engine bundle, as if an engine had produced them.
fn reference_as_engine(h: &mut BackwardHarness) {
    h.run_reference().unwrap_or_else(|e| panic!("{e}"));
    std::mem::swap(&mut h.reference, &mut h.engine);
}

#[test]
fn the_kernels_reference_agrees_with_the_independent_oracle() {
    for io_type in [DataType::Float, DataType::BFloat16, DataType::Half] {
        let mut h = harness(&spec(io_type));
        let expected = oracle_backward::evaluate(&h).unwrap_or_else(|e| panic!("{e}"));
        assert!(expected.iter().all(|e| !e.exact_zero.is_empty()));
        reference_as_engine(&mut h);
        let result = oracle_backward::compare(&h, &expected, ValidationMode::Coverage)
            .unwrap_or_else(|e| panic!("{e}"));
        for c in &result {
            assert!(
                c.passed() && c.compared > 0,
                "{io_type:?}: {c} {:?}",
                c.failures
            );
        }
    }
}

#[test]
fn a_wrong_value_a_padding_write_and_a_nonzero_exact_zero_each_fail() {
    let mut h = harness(&spec(DataType::Float));
    let expected = oracle_backward::evaluate(&h).unwrap_or_else(|e| panic!("{e}"));
    reference_as_engine(&mut h);
    let dk = &expected[1];
    let written = dk.values.iter().position(|v| !v.is_nan() && *v != 0.0);
    let padding = dk.values.iter().position(|v| v.is_nan());
    let exact = dk.exact_zero.iter().next().copied();
    let (Some(written), Some(padding), Some(exact)) = (written, padding, exact) else {
        panic!("the case has every kind of position");
    };
    if let Some(Entry::Owned(t)) = h.engine.entries.get_mut(&dk.uid)
        && let HostDataMut::F32(s) = t.host_data_mut()
    {
        s[written] += 0.5;
        s[padding] = 0.0;
        s[exact] = 1e-7;
    }
    let result = oracle_backward::compare(&h, &expected, ValidationMode::Coverage)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(result[1].failure_count, 3, "{:?}", result[1].failures);
    let skip = oracle_backward::compare(&h, &expected, ValidationMode::SentinelSkip)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(skip[1].failure_count, 2, "the padding write is not checked");
}

#[test]
fn the_harness_positions_match_the_oracles() {
    let h = harness(&spec(DataType::BFloat16));
    let expected = oracle_backward::evaluate(&h).unwrap_or_else(|e| panic!("{e}"));
    for e in &expected {
        let (written, exact) = h.positions(e.uid).unwrap_or_else(|x| panic!("{x}"));
        let oracle_written: BTreeSet<usize> = e
            .values
            .iter()
            .enumerate()
            .filter_map(|(i, v)| (!v.is_nan()).then_some(i))
            .collect();
        assert_eq!(written, oracle_written, "uid {}", e.uid);
        assert_eq!(exact, e.exact_zero, "uid {}", e.uid);
    }
}

/// `examples/ragged_sdpa_backward_bf16.json` is the backward of the forward example, so the two
/// cannot drift apart; `RAGGED_WRITE_EXAMPLES=1` rewrites it from the forward.
#[test]
fn the_example_backward_graph_is_the_backward_of_the_example_forward() {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let read = |name: &str| {
        let text = std::fs::read_to_string(dir.join(name)).unwrap_or_else(|e| panic!("{e}"));
        Graph::from_json(&text).unwrap_or_else(|e| panic!("{name}: {e}"))
    };
    let want = backward_of(&read("ragged_sdpa_bf16.json")).expect("the example has stats");
    let name = "ragged_sdpa_backward_bf16.json";
    if std::env::var_os("RAGGED_WRITE_EXAMPLES").is_some() {
        std::fs::write(dir.join(name), want.to_json()).unwrap_or_else(|e| panic!("{e}"));
    }
    assert_eq!(read(name), want);
}
