//! `--verify` (and `bundle`): an engine's outputs against the float64 oracle, not against
//! kernels' CPU reference — which is the host engine itself.
//!
//! The oracle's values are stored into the harness's reference bundle, whose outputs start as the
//! same sentinel as the engine's; the harness then compares the two bundles output by output with
//! the tolerances of ragged-sdpa.md §8, the written/unwritten split and the exact-zero rows.

use hipdnn_shim::harness::{Comparison, GraphHarness, Harness, ValidationMode, Yardstick};

use crate::error::ShimError;
use crate::oracle;

pub fn against_oracle(
    harness: &mut Harness,
    mode: ValidationMode,
) -> Result<Vec<Comparison>, ShimError> {
    let writes = oracle::evaluate(&harness.graph, &harness.reference).map_err(ShimError::Oracle)?;
    oracle::store(&mut harness.reference, &writes).map_err(ShimError::Oracle)?;
    Ok(harness.validate_against(mode, Yardstick::Definition)?)
}

/// The same for a multi-node graph: the oracle walks every node, storing each node's values
/// (intermediates included) into the reference bundle, then every output is compared.
pub fn against_graph_oracle(
    harness: &mut GraphHarness,
    mode: ValidationMode,
) -> Result<Vec<Comparison>, ShimError> {
    oracle::evaluate_graph(&harness.graph, &mut harness.reference).map_err(ShimError::Oracle)?;
    Ok(harness.validate(mode)?)
}

#[cfg(test)]
mod tests {
    use hipdnn_shim::case_inputs::pre_supplied;
    use hipdnn_shim::graphs::{Mask, RaggedSdpaSpec, uid};
    use hipdnn_shim::harness::Entry;
    use ragged_core::{HostData, HostDataMut};
    use ragged_schema::model::DataType;

    use super::*;

    /// GQA 4:2, bottom-right causal with keys shorter than queries in batch 1 (rows with no key),
    /// a zero-length query batch, padded keys, f32 so that the tolerance is tight.
    fn spec() -> RaggedSdpaSpec {
        RaggedSdpaSpec {
            io_type: DataType::Float,
            heads_q: 4,
            heads_kv: 2,
            head_dim: 16,
            seq_len_kv: Some(vec![5, 2, 3]),
            seq_len_q: Some(vec![4, 3, 0]),
            mask: Mask::CausalBottomRight,
            ..RaggedSdpaSpec::packed("verify", &[4, 3, 2], &[6, 2, 4])
        }
    }

    /// A harness whose engine bundle holds what a correct engine writes: kernels' CPU reference,
    /// copied over. The oracle shares no code with it, so agreement is evidence for both.
    fn harness_with_correct_outputs() -> Harness {
        let spec = spec();
        let pre = pre_supplied(&spec).unwrap_or_else(|e| panic!("{e}"));
        let mut h = Harness::new(spec.graph(), &pre, 7).unwrap_or_else(|e| panic!("{e}"));
        h.run_reference().unwrap_or_else(|e| panic!("{e}"));
        for out in [uid::O, uid::STATS] {
            let values = match h.reference.get(out).map(|t| t.host_data()) {
                Ok(HostData::F32(s)) => s.to_vec(),
                other => panic!("output {out}: {other:?}"),
            };
            match h.engine.entries.get_mut(&out) {
                Some(Entry::Owned(t)) => match t.host_data_mut() {
                    HostDataMut::F32(s) => s.copy_from_slice(&values),
                    _ => panic!("output {out} is f32"),
                },
                _ => panic!("output {out} is owned"),
            }
        }
        h
    }

    fn engine_f32(h: &mut Harness, out: i64) -> &mut [f32] {
        match h.engine.entries.get_mut(&out) {
            Some(Entry::Owned(t)) => match t.host_data_mut() {
                HostDataMut::F32(s) => s,
                _ => panic!("f32"),
            },
            _ => panic!("owned"),
        }
    }

    fn failures(h: &mut Harness) -> Vec<(i64, usize)> {
        against_oracle(h, ValidationMode::Coverage)
            .unwrap_or_else(|e| panic!("{e}"))
            .iter()
            .map(|c| (c.uid, c.failure_count))
            .collect()
    }

    #[test]
    fn a_correct_engine_passes() {
        let mut h = harness_with_correct_outputs();
        assert_eq!(failures(&mut h), vec![(uid::O, 0), (uid::STATS, 0)]);
    }

    #[test]
    fn a_deliberately_wrong_output_fails_verification() {
        let mut h = harness_with_correct_outputs();
        // Batch 0, token 0, head 0, d 0 of O: written by every correct engine.
        engine_f32(&mut h, uid::O)[0] += 0.01;
        assert_eq!(failures(&mut h), vec![(uid::O, 1), (uid::STATS, 0)]);

        let mut h = harness_with_correct_outputs();
        engine_f32(&mut h, uid::STATS)[0] -= 0.05;
        assert_eq!(failures(&mut h), vec![(uid::O, 0), (uid::STATS, 1)]);
    }

    #[test]
    fn an_engine_writing_a_padding_row_fails_verification() {
        let mut h = harness_with_correct_outputs();
        // Batch 0 has 4 physical rows and 4 valid ones; batch 1 has 3 physical, 3 valid; batch 2
        // has 2 physical and 0 valid: its first element is padding no engine may write.
        let padding = (4 + 3) * 4 * 16;
        engine_f32(&mut h, uid::O)[padding] = 0.0;
        assert_eq!(failures(&mut h), vec![(uid::O, 1), (uid::STATS, 0)]);
    }

    #[test]
    fn graphs_using_features_the_oracle_does_not_model_are_refused() {
        let mut h = harness_with_correct_outputs();
        if let Some(node) = h.graph.nodes.first_mut()
            && let Some(sdpa) = match &mut node.attributes {
                ragged_schema::model::NodeAttributes::Sdpa(s) => Some(s),
                _ => None,
            }
        {
            sdpa.alibi_mask = true;
        }
        let error = against_oracle(&mut h, ValidationMode::Coverage)
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            error.as_deref(),
            Some("float64 oracle: ALiBi or dropout is set; the oracle does not model it")
        );
    }

    /// A multi-node graph's engine outputs (the CPU graph executor's, copied over) pass the
    /// graph oracle; one wrong element of the final output fails it.
    #[test]
    fn the_graph_oracle_passes_a_correct_run_and_catches_one_wrong_element() {
        use hipdnn_shim::multi_node_graphs::{cases, uid as mn};
        let case = cases().remove(1); // SDPA -> scale -> add, bf16
        let graph = case.graph().unwrap_or_else(|e| panic!("{e}"));
        let pre = case.pre_supplied().unwrap_or_else(|e| panic!("{e}"));
        let mut h = GraphHarness::new(graph, &pre, 5).unwrap_or_else(|e| panic!("{e}"));
        h.run_reference().unwrap_or_else(|e| panic!("{e}"));
        std::mem::swap(&mut h.reference, &mut h.engine);
        let ok = against_graph_oracle(&mut h, ValidationMode::Coverage)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(ok.iter().all(|c| c.passed() && c.compared > 0), "{ok:?}");
        if let Ok(t) = h.engine.writable(mn::Y)
            && let HostDataMut::BF16(s) = t.host_data_mut()
        {
            s[3] = half::bf16::from_f32(s[3].to_f32() + 0.25);
        }
        let bad = against_graph_oracle(&mut h, ValidationMode::Coverage)
            .unwrap_or_else(|e| panic!("{e}"));
        let failures: Vec<(i64, usize)> = bad.iter().map(|c| (c.uid, c.failure_count)).collect();
        assert_eq!(failures, vec![(uid::STATS, 0), (mn::Y, 1)]);
    }

    /// FP8 forwards: kernels' FP8 reference, copied into the engine bundle, agrees with the
    /// oracle's independent FP8 steps on every scalar shape, format and output type; then one
    /// O code two steps away and an amax off by one f32 ulp more than allowed each fail.
    #[test]
    fn fp8_outputs_of_the_reference_pass_and_wrong_ones_fail() {
        use hipdnn_shim::graphs::Fp8Spec;
        let variants = [
            (DataType::Fp8E4m3, DataType::Fp8E4m3, true),
            (DataType::Fp8E4m3, DataType::BFloat16, false),
            (DataType::Fp8E4m3Fnuz, DataType::Fp8E4m3Fnuz, true),
            (DataType::Fp8E5m2, DataType::Float, true),
            (DataType::Fp8E5m2Fnuz, DataType::Half, false),
        ];
        for (input, output, full) in variants {
            let spec = RaggedSdpaSpec {
                io_type: output,
                fp8: Some(Fp8Spec { input, full }),
                ..spec()
            };
            let pre = pre_supplied(&spec).unwrap_or_else(|e| panic!("{e}"));
            let mut h = Harness::new(spec.graph(), &pre, 7).unwrap_or_else(|e| panic!("{e}"));
            std::mem::swap(&mut h.reference, &mut h.engine);
            h.run_reference().unwrap_or_else(|e| panic!("{e}"));
            std::mem::swap(&mut h.reference, &mut h.engine);
            let ok =
                against_oracle(&mut h, ValidationMode::Coverage).unwrap_or_else(|e| panic!("{e}"));
            assert!(
                ok.iter().all(|c| c.passed() && c.compared > 0),
                "{input:?} -> {output:?}: {ok:?}"
            );
            assert_eq!(ok.len(), if full { 4 } else { 2 });
            if !full || output != DataType::Fp8E4m3 {
                continue;
            }
            if let Ok(t) = h.engine.writable(uid::O)
                && let HostDataMut::Fp8(_, s) = t.host_data_mut()
            {
                s[1] = if s[1] & 0x7F >= 0x7D {
                    s[1] - 2
                } else {
                    s[1] + 2
                };
            }
            if let Ok(t) = h.engine.writable(hipdnn_shim::graphs::uid::AMAX_O)
                && let HostDataMut::F32(s) = t.host_data_mut()
            {
                s[0] = f32::from_bits(s[0].to_bits() + 2);
            }
            let bad: Vec<(i64, usize)> = against_oracle(&mut h, ValidationMode::Coverage)
                .unwrap_or_else(|e| panic!("{e}"))
                .iter()
                .map(|c| (c.uid, c.failure_count))
                .collect();
            assert_eq!(
                bad,
                vec![
                    (uid::O, 1),
                    (uid::STATS, 0),
                    (hipdnn_shim::graphs::uid::AMAX_S, 0),
                    (hipdnn_shim::graphs::uid::AMAX_O, 1)
                ]
            );
        }
    }
}
