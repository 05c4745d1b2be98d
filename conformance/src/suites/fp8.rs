//! Suite (g): FP8 SDPA forward graphs (kernels/core/fp8-attention.md) on every engine of a
//! plugin, against kernels' CPU reference with the bounds of §5.
//!
//! FP8 is a feature a plugin may legitimately not offer (hipDNN's own providers decline every
//! FP8 field): an engine that declines a case is DECLINED, not failed. An engine that accepts
//! one must compute it: O within §5's bounds after decoding, the LSE, amax_s exactly and amax_o
//! within 20 %.

use ragged_schema::model::DataType;

use super::engine_cases::run_cases;
use super::numeric::{NumericOptions, optional_feature_case};
use crate::report::{Outcome, Report};
use hipdnn_shim::HostError;
use hipdnn_shim::case_inputs::pre_supplied;
use hipdnn_shim::graphs::{Fp8Spec, Mask, RaggedSdpaSpec};
use hipdnn_shim::manager::{Engine, LoadedPlugin};

/// The fixed case list: both scalar shapes of §1.3, both E4M3 encodings (OCP and FNUZ) and
/// E5M2, FP8 and 16/32-bit O, GQA, a sequence with no queries and one with no keys, padded
/// lengths, both causal alignments; D 64, and D 128 and D 256 over sequences of several key tiles.
pub fn cases() -> Vec<RaggedSdpaSpec> {
    let case = |name: &str, input, output, full, f: &dyn Fn(&mut RaggedSdpaSpec)| {
        let mut s = RaggedSdpaSpec {
            io_type: output,
            heads_q: 4,
            heads_kv: 2,
            fp8: Some(Fp8Spec { input, full }),
            // Sequence 1 has no queries, sequence 3 queries but no keys.
            ..RaggedSdpaSpec::packed(name, &[3, 0, 6, 2], &[5, 2, 6, 0])
        };
        f(&mut s);
        s
    };
    let (e4m3, fnuz) = (DataType::Fp8E4m3, DataType::Fp8E4m3Fnuz);
    vec![
        // Upstream's shape: descale_q/k/v only, bf16 O.
        case(
            "e4m3_descales_bf16_o",
            e4m3,
            DataType::BFloat16,
            false,
            &|s| s.mask = Mask::CausalTopLeft,
        ),
        // cuDNN's shape: every scalar, FP8 O, LSE and both amaxes.
        case("e4m3_full_e4m3_o", e4m3, e4m3, true, &|s| {
            s.mask = Mask::CausalBottomRight
        }),
        case(
            "e4m3fnuz_descales_bf16_o",
            fnuz,
            DataType::BFloat16,
            false,
            &|s| s.mask = Mask::CausalBottomRight,
        ),
        case("e4m3fnuz_full_e4m3fnuz_o_padded", fnuz, fnuz, true, &|s| {
            s.seq_len_q = Some(vec![2, 0, 6, 1]);
            s.seq_len_kv = Some(vec![4, 2, 3, 0]);
        }),
        case(
            "e5m2_full_e4m3_o_mqa",
            DataType::Fp8E5m2,
            e4m3,
            true,
            &|s| {
                s.heads_kv = 1;
                s.mask = Mask::CausalTopLeft;
            },
        ),
        case("e4m3_full_f32_o", e4m3, DataType::Float, true, &|_| {}),
        // D 128 over sequences longer than one 128-key tile (a GPU kernel's tail tiles and the
        // tiles a causal band skips), cuDNN's shape.
        case("e4m3_full_e4m3_o_d128_multi_tile", e4m3, e4m3, true, &|s| {
            s.head_dim = 128;
            s.extents_q = vec![130, 0, 257, 64];
            s.extents_kv = vec![200, 3, 257, 0];
            s.mask = Mask::CausalBottomRight;
        }),
        // D 256 likewise (the CUDA engine's D 256 entry point runs blocks of 64 keys: several per
        // sequence here), upstream's shape with a bf16 O and causal top-left.
        case(
            "e4m3_descales_bf16_o_d256_multi_tile",
            e4m3,
            DataType::BFloat16,
            false,
            &|s| {
                s.head_dim = 256;
                s.extents_q = vec![130, 0, 257, 64];
                s.extents_kv = vec![200, 3, 257, 0];
                s.mask = Mask::CausalTopLeft;
            },
        ),
    ]
}

pub fn run(plugin: &LoadedPlugin, options: &NumericOptions) -> Report {
    let cases = cases();
    run_cases(
        plugin,
        "fp8",
        &cases,
        |s| s.name.as_str(),
        |handle, engine, spec| {
            run_case(handle, engine, spec, options)
                .unwrap_or_else(|e| (Outcome::Fail(e.to_string()), vec![]))
        },
    )
}

fn run_case(
    handle: &hipdnn_shim::plugin::PluginHandle<'_>,
    engine: &Engine,
    spec: &RaggedSdpaSpec,
    options: &NumericOptions,
) -> Result<(Outcome, Vec<String>), HostError> {
    optional_feature_case(
        handle,
        engine,
        (&spec.name, "FP8"),
        spec.graph(),
        &pre_supplied(spec)?,
        options,
    )
}

#[cfg(test)]
mod tests {
    use hipdnn_shim::graphs::uid;
    use hipdnn_shim::harness::{Entry, Harness, ValidationMode};
    use ragged_core::HostDataMut;

    use super::*;

    fn harness(spec: &RaggedSdpaSpec) -> Harness {
        let graph = spec.graph();
        graph
            .validate()
            .unwrap_or_else(|e| panic!("{}: {e}", spec.name));
        let pre = pre_supplied(spec).unwrap_or_else(|e| panic!("{}: {e}", spec.name));
        Harness::new(graph, &pre, 11).unwrap_or_else(|e| panic!("{}: {e}", spec.name))
    }

    fn failures(h: &Harness) -> Vec<(i64, usize)> {
        h.validate(ValidationMode::Coverage)
            .unwrap_or_else(|e| panic!("{e}"))
            .iter()
            .map(|c| (c.uid, c.failure_count))
            .collect()
    }

    /// The CPU reference as "engine" passes with every output compared, amaxes included.
    #[test]
    fn every_case_runs_on_the_reference_and_passes_against_itself() {
        for spec in cases() {
            let mut h = harness(&spec);
            h.run_reference()
                .unwrap_or_else(|e| panic!("{}: {e}", spec.name));
            std::mem::swap(&mut h.reference, &mut h.engine);
            h.run_reference()
                .unwrap_or_else(|e| panic!("{}: {e}", spec.name));
            let ok = h
                .validate(ValidationMode::Coverage)
                .unwrap_or_else(|e| panic!("{}: {e}", spec.name));
            let full = spec.fp8.is_some_and(|f| f.full);
            assert_eq!(ok.len(), if full { 4 } else { 2 }, "{}: {ok:?}", spec.name);
            assert!(
                ok.iter().all(|c| c.passed() && c.compared > 0),
                "{}: {ok:?}",
                spec.name
            );
        }
    }

    /// A wrong amax_s, an O code far from the reference's and a value in a padding row of O
    /// each fail the case.
    #[test]
    fn wrong_fp8_outputs_fail() {
        let spec = cases().remove(1);
        assert_eq!(spec.name, "e4m3_full_e4m3_o");
        let mut h = harness(&spec);
        h.run_reference().unwrap_or_else(|e| panic!("{e}"));
        let reference_o = match h.reference.get(uid::O).map(|t| t.host_data()) {
            Ok(ragged_core::HostData::Fp8(_, s)) => s.to_vec(),
            _ => panic!("O holds FP8 codes"),
        };
        let amax_s = h
            .reference
            .get(uid::AMAX_S)
            .map(|t| t.host_data().len())
            .unwrap_or(0);
        assert_eq!(amax_s, 1);
        let copy = |h: &mut Harness| {
            std::mem::swap(&mut h.reference, &mut h.engine);
            h.run_reference().unwrap_or_else(|e| panic!("{e}"));
            std::mem::swap(&mut h.reference, &mut h.engine);
        };
        copy(&mut h);
        assert!(failures(&h).iter().all(|&(_, n)| n == 0));
        let set = |h: &mut Harness, uid: i64, f: &dyn Fn(HostDataMut<'_>)| {
            if let Some(Entry::Owned(t)) = h.engine.entries.get_mut(&uid) {
                f(t.host_data_mut());
            }
        };
        // Element 0 is sequence 0, row 0, head 0: written. Its code plus 8 is one binade up.
        set(&mut h, uid::O, &|d| {
            if let HostDataMut::Fp8(_, s) = d {
                s[0] = reference_o[0].wrapping_add(8);
            }
        });
        set(&mut h, uid::AMAX_S, &|d| {
            if let HostDataMut::F32(s) = d {
                s[0] = f32::from_bits(s[0].to_bits() + 1);
            }
        });
        assert_eq!(
            failures(&h),
            vec![
                (uid::O, 1),
                (uid::STATS, 0),
                (uid::AMAX_S, 1),
                (uid::AMAX_O, 0)
            ]
        );
    }
}
