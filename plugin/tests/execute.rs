//! `ExecuteOpGraph` on host buffers: the golden bf16 graph against its float64 oracle, an fp32
//! graph bit-for-bit against the CPU reference called directly, per-execute offsets, error
//! cases that must leave outputs untouched, and many threads on one context.

mod common;

use common::golden::{BF16_SENTINEL, bf16_to_f64, check_against_oracle, golden_file, npy};
use common::problem::{self, Inputs, PACKING_A, PACKING_B, SENTINEL, same_bits};
use common::*;

#[test]
fn golden_bf16_graph_matches_the_float64_oracle() {
    let handle = OwnedHandle::new();
    let graph = std::fs::read(golden_file("graph_flagged.bin")).expect("graph");
    let config = std::fs::read(golden_file("engine_config.bin")).expect("config");
    let context = OwnedContext::new(&handle, &config, &graph);

    let (q, k, v) = (
        npy::<u16>("inputs/1.npy"),
        npy::<u16>("inputs/2.npy"),
        npy::<u16>("inputs/3.npy"),
    );
    let (q_off, kv_off) = (npy::<i32>("inputs/5.npy"), npy::<i32>("inputs/6.npy"));
    let (o_ref, lse_ref) = (npy::<f64>("expected/4.npy"), npy::<f64>("expected/9.npy"));
    let mut o = vec![BF16_SENTINEL; o_ref.len()];
    let mut lse = vec![f32::from_bits(SENTINEL); lse_ref.len()];
    let input = |uid, ptr: *const u8| DeviceBuffer {
        uid,
        ptr: ptr.cast_mut().cast(),
    };
    let pack = [
        input(1, q.as_ptr().cast()),
        input(2, k.as_ptr().cast()),
        input(3, v.as_ptr().cast()),
        DeviceBuffer {
            uid: 4,
            ptr: o.as_mut_ptr().cast(),
        },
        input(5, q_off.as_ptr().cast()),
        input(6, kv_off.as_ptr().cast()),
        DeviceBuffer {
            uid: 9,
            ptr: lse.as_mut_ptr().cast(),
        },
    ];
    assert_eq!(context.execute(&pack), SUCCESS, "{}", last_error());

    let o_got: Vec<f64> = o.iter().map(|&b| bf16_to_f64(b)).collect();
    let o_untouched: Vec<bool> = o.iter().map(|&b| b == BF16_SENTINEL).collect();
    check_against_oracle("O", &o_got, &o_untouched, &o_ref, 1e-2);
    let lse_got: Vec<f64> = lse.iter().map(|&x| f64::from(x)).collect();
    let lse_untouched: Vec<bool> = lse.iter().map(|x| x.to_bits() == SENTINEL).collect();
    check_against_oracle("LSE", &lse_got, &lse_untouched, &lse_ref, 1e-3);
}

#[test]
fn fp32_execute_equals_the_cpu_reference_bit_for_bit() {
    let handle = OwnedHandle::new();
    let context = OwnedContext::new(&handle, &problem::config_bytes(), &problem::graph_bytes());
    for packing in [PACKING_A, PACKING_B] {
        let inputs = Inputs::new(packing);
        let (want_o, want_lse) = inputs.reference();
        let (mut o, mut lse) = inputs.outputs();
        assert_eq!(
            context.execute(&inputs.pack(&mut o, &mut lse)),
            SUCCESS,
            "{}",
            last_error()
        );
        assert!(same_bits(&o, &want_o), "O differs for {packing:?}");
        assert!(same_bits(&lse, &want_lse), "LSE differs for {packing:?}");
        assert!(
            o.iter().any(|x| x.to_bits() == SENTINEL),
            "padding rows stay unwritten"
        );
        assert!(o.iter().any(|x| x.is_finite()), "valid rows are written");
    }
}

/// The fp32 graph rewritten the ways upstream also writes it, over the same memory: ragged
/// Q/K/V/O in cuDNN's `[B, H, S, D]` dims order, and `seq_len` tensors of dims `[B]`.
fn upstream_forms() -> Vec<(&'static str, Vec<u8>)> {
    let mut bhsd = problem::graph();
    for t in bhsd
        .tensors
        .iter_mut()
        .filter(|t| t.ragged_offset_tensor_uid.is_some())
    {
        t.dims.swap(1, 2);
        t.strides.swap(1, 2);
    }
    let mut rank1 = bhsd.clone();
    for t in rank1
        .tensors
        .iter_mut()
        .filter(|t| [problem::SEQ_Q, problem::SEQ_KV].contains(&t.uid))
    {
        t.dims = vec![problem::B];
        t.strides = vec![1];
    }
    vec![
        (
            "[B, H, S, D] dims",
            ragged_schema::wire::encode_graph(&bhsd),
        ),
        (
            "[B, H, S, D] dims, seq_len [B]",
            ragged_schema::wire::encode_graph(&rank1),
        ),
    ]
}

#[test]
fn both_ragged_dims_orders_execute_bit_identically() {
    let handle = OwnedHandle::new();
    let rfc_form = OwnedContext::new(&handle, &problem::config_bytes(), &problem::graph_bytes());
    for (form, graph) in upstream_forms() {
        let other = OwnedContext::new(&handle, &problem::config_bytes(), &graph);
        for packing in [PACKING_A, PACKING_B] {
            let inputs = Inputs::new(packing);
            let (want_o, want_lse) = inputs.reference();
            let (mut o_a, mut lse_a) = inputs.outputs();
            let (mut o_b, mut lse_b) = inputs.outputs();
            assert_eq!(
                rfc_form.execute(&inputs.pack(&mut o_a, &mut lse_a)),
                SUCCESS
            );
            assert_eq!(
                other.execute(&inputs.pack(&mut o_b, &mut lse_b)),
                SUCCESS,
                "{form}: {}",
                last_error()
            );
            assert!(same_bits(&o_a, &o_b), "{form}: O differs for {packing:?}");
            assert!(
                same_bits(&lse_a, &lse_b),
                "{form}: LSE differs for {packing:?}"
            );
            assert!(
                same_bits(&o_b, &want_o),
                "{form}: O vs reference, {packing:?}"
            );
            assert!(same_bits(&lse_b, &want_lse), "{form}: LSE vs reference");
            assert!(o_b.iter().any(|x| x.is_finite()), "{form}: rows written");
        }
    }
}

#[test]
fn a_missing_uid_is_bad_param_and_writes_nothing() {
    let handle = OwnedHandle::new();
    let context = OwnedContext::new(&handle, &problem::config_bytes(), &problem::graph_bytes());
    let inputs = Inputs::new(PACKING_A);
    let (mut o, mut lse) = inputs.outputs();
    for missing in [
        problem::V,
        problem::KV_OFFSETS,
        problem::SEQ_Q,
        problem::SCALE,
    ] {
        let pack: Vec<DeviceBuffer> = inputs
            .pack(&mut o, &mut lse)
            .into_iter()
            .filter(|b| b.uid != missing)
            .collect();
        assert_eq!(context.execute(&pack), BAD_PARAM);
        let message = last_error();
        assert!(
            message.starts_with("hipdnnEnginePluginExecuteOpGraph: ")
                && message.contains(&format!("tensor uid {missing} ")),
            "{message}"
        );
    }
    assert!(
        o.iter().chain(&lse).all(|x| x.to_bits() == SENTINEL),
        "outputs touched"
    );
}

#[test]
fn bad_ragged_offsets_are_invalid_value_naming_batch_and_values() {
    let handle = OwnedHandle::new();
    let context = OwnedContext::new(&handle, &problem::config_bytes(), &problem::graph_bytes());
    let mut inputs = Inputs::new(PACKING_A);
    // Batch 1 → 2 decreases: [0, 96, 64, …] in elements.
    let saved = inputs.q_offsets.clone();
    inputs.q_offsets[2] = inputs.q_offsets[1] - 32;
    let (mut o, mut lse) = inputs.outputs();
    assert_eq!(
        context.execute(&inputs.pack(&mut o, &mut lse)),
        INVALID_VALUE
    );
    let message = last_error();
    assert!(message.contains("tensor uid 1"), "{message}");
    assert!(
        message.contains("ragged_offset[2] = 64 is below ragged_offset[1] = 96"),
        "{message}"
    );

    // A seq_len beyond its batch's extent.
    inputs.q_offsets = saved;
    inputs.seq_q[0] = 4;
    assert_eq!(
        context.execute(&inputs.pack(&mut o, &mut lse)),
        INVALID_VALUE
    );
    let message = last_error();
    assert!(
        message.contains(&format!("tensor uid {}", problem::SEQ_Q)),
        "{message}"
    );
    assert!(
        o.iter().chain(&lse).all(|x| x.to_bits() == SENTINEL),
        "outputs touched"
    );
}

#[test]
fn an_output_aliasing_an_input_is_refused() {
    let handle = OwnedHandle::new();
    let context = OwnedContext::new(&handle, &problem::config_bytes(), &problem::graph_bytes());
    let inputs = Inputs::new(PACKING_A);
    let (mut o, mut lse) = inputs.outputs();
    let mut pack = inputs.pack(&mut o, &mut lse);
    let q_ptr = pack[0].ptr;
    pack[3].ptr = q_ptr;
    assert_eq!(context.execute(&pack), INVALID_VALUE);
    assert!(
        last_error().contains("tensor uid 4 (o_tensor_uid)"),
        "{}",
        last_error()
    );
}

#[test]
fn eight_threads_share_one_context() {
    const THREADS: usize = 8;
    const EXECUTES: usize = 200;
    let handle = OwnedHandle::new();
    let context = OwnedContext::new(&handle, &problem::config_bytes(), &problem::graph_bytes());
    type Expected = (Vec<f32>, Vec<f32>);
    let cases: Vec<(Inputs, Expected)> = [PACKING_A, PACKING_B]
        .into_iter()
        .map(|p| {
            let inputs = Inputs::new(p);
            let expected = inputs.reference();
            (inputs, expected)
        })
        .collect();
    let (ctx, h) = (context.context as usize, handle.0 as usize);
    std::thread::scope(|scope| {
        for t in 0..THREADS {
            let cases = &cases;
            scope.spawn(move || {
                for i in 0..EXECUTES {
                    let (inputs, (want_o, want_lse)) = &cases[(t + i) % 2];
                    let (mut o, mut lse) = inputs.outputs();
                    let pack = inputs.pack(&mut o, &mut lse);
                    // SAFETY: live handle and context; `pack` points at live host buffers.
                    let status = unsafe { execute(h as Handle, ctx as Context, &pack) };
                    assert_eq!(status, SUCCESS, "thread {t} execute {i}: {}", last_error());
                    assert!(
                        same_bits(&o, want_o) && same_bits(&lse, want_lse),
                        "thread {t} execute {i}"
                    );
                }
            });
        }
    });
}
