//! The host engine's SDPA backward next to a usable HIP runtime, through the built plugin's C
//! ABI: the project's fake `libamdhip64` (kernels/gpu-runtime/src/hip/fake_amdhip64.c, compiled here)
//! keeps "device" memory the CPU cannot dereference, so a device tensor the backward failed to
//! stage would fault. The staged run must give the bits of the same backward on host buffers,
//! copy every device tensor to the host once and only dQ, dK, dV back, and leave the gradients'
//! padding rows holding what the device held.

mod common;

use common::fake_hip::fake_hip;
use common::*;
use ragged_schema::wire::{encode_engine_config, encode_graph};
use ragged_schema::{
    DataType, EngineConfig, Graph, Node, SdpaBackwardAttributes, TensorAttributes,
};

const B: i64 = 2;
const HQ: i64 = 2;
const HKV: i64 = 1;
const D: i64 = 4;
const EXT_Q: [i64; 2] = [3, 2];
const EXT_KV: [i64; 2] = [4, 2];
// uids: Q K V O dO LSE dQ dK dV, offsets of Q and KV, seq_len q and kv.
const UIDS: [i64; 13] = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13];

fn graph() -> Graph {
    let (sq, skv) = (3, 4);
    let ragged = |uid: i64, s: i64, h: i64, aux: i64| {
        TensorAttributes::new()
            .set_uid(uid)
            .set_name(format!("t{uid}"))
            .set_data_type(DataType::Float)
            .set_dims(vec![B, s, h, D])
            .set_strides(vec![s * h * D, h * D, D, 1])
            .set_ragged_offset_uid(aux)
    };
    let index = |uid: i64, n: i64| {
        TensorAttributes::new()
            .set_uid(uid)
            .set_name(format!("i{uid}"))
            .set_data_type(DataType::Int32)
            .set_dims(vec![n, 1, 1, 1])
            .set_strides(vec![1, 1, 1, 1])
    };
    let mut node = SdpaBackwardAttributes::new(1, 2, 3, 4, 5, 6, 7, 8, 9)
        .set_attn_scale_value(0.5)
        .set_seq_len_q(&index(12, B))
        .set_seq_len_kv(&index(13, B));
    node.padding_mask = true;
    let mut g = Graph::new("backward_staged")
        .set_data_types(DataType::Float, DataType::Float, DataType::Float)
        .add_tensor(index(10, B + 1))
        .add_tensor(index(11, B + 1))
        .add_tensor(index(12, B))
        .add_tensor(index(13, B))
        .add_tensor(
            TensorAttributes::new()
                .set_uid(6)
                .set_name("lse")
                .set_data_type(DataType::Float)
                .set_dims(vec![B, HQ, sq, 1])
                .set_strides(vec![HQ * sq, sq, 1, 1]),
        );
    for (uid, s, h, aux) in [
        (1, sq, HQ, 10),
        (2, skv, HKV, 11),
        (3, skv, HKV, 11),
        (4, sq, HQ, 10),
        (5, sq, HQ, 10),
        (7, sq, HQ, 10),
        (8, skv, HKV, 11),
        (9, skv, HKV, 11),
    ] {
        g = g.add_tensor(ragged(uid, s, h, aux));
    }
    g.add_node(Node::sdpa_backward("bwd", node))
}

/// Every buffer of the pack, in [`UIDS`] order, as 4-byte words (f32 or i32 bits).
fn buffers() -> Vec<Vec<u32>> {
    let tokens = |e: &[i64]| e.iter().sum::<i64>() as usize;
    let (nq, nkv) = (tokens(&EXT_Q), tokens(&EXT_KV));
    let f = |seed: u32, n: usize| -> Vec<u32> {
        (0..n as u32)
            .map(|i| {
                let x = (i.wrapping_mul(2654435761) ^ seed.wrapping_mul(97)) % 1000;
                (x as f32 / 1000.0 - 0.5).to_bits()
            })
            .collect()
    };
    let offsets = |e: &[i64], h: i64| -> Vec<u32> {
        let mut out = vec![0u32];
        for x in e {
            out.push(out[out.len() - 1] + (x * h * D) as u32);
        }
        out
    };
    let (q, kv) = (nq * (HQ * D) as usize, nkv * (HKV * D) as usize);
    let sentinel = |n: usize| vec![0x7fc0_0bad_u32; n];
    vec![
        f(1, q),
        f(2, kv),
        f(3, kv),
        f(4, q),
        f(5, q),
        f(6, (B * HQ * 3) as usize),
        sentinel(q),
        sentinel(kv),
        sentinel(kv),
        offsets(&EXT_Q, HQ),
        offsets(&EXT_KV, HKV),
        vec![2, 2],
        vec![3, 1],
    ]
}

fn execute(pack: &[DeviceBuffer]) {
    let handle = OwnedHandle::new();
    let context = OwnedContext::new(
        &handle,
        &encode_engine_config(&EngineConfig::new(HOST_REFERENCE_ID)),
        &encode_graph(&graph()),
    );
    // Every pointer in `pack` is host memory or fake-device memory of its tensor's extent.
    let status = context.execute(pack);
    assert_eq!(status, SUCCESS, "{}", last_error());
}

#[test]
fn device_tensors_are_staged_and_give_the_host_runs_bits() {
    let fake = fake_hip();
    // On host buffers: used in place next to the fake device.
    let mut host = buffers();
    let pack: Vec<DeviceBuffer> = UIDS
        .iter()
        .zip(host.iter_mut())
        .map(|(uid, b)| DeviceBuffer {
            uid: *uid,
            ptr: b.as_mut_ptr().cast(),
        })
        .collect();
    let before = fake.counters();
    execute(&pack);
    assert_eq!(
        fake.counters()[..2],
        before[..2],
        "no copies for host memory"
    );

    // The same on device buffers.
    let device_inputs = buffers();
    let pack: Vec<DeviceBuffer> = UIDS
        .iter()
        .zip(&device_inputs)
        .map(|(uid, b)| DeviceBuffer {
            uid: *uid,
            // SAFETY: u32 words viewed as their bytes.
            ptr: fake.upload(unsafe {
                std::slice::from_raw_parts(b.as_ptr().cast::<u8>(), b.len() * 4)
            }),
        })
        .collect();
    let before = fake.counters();
    execute(&pack);
    let after = fake.counters();
    assert_eq!(
        after[1] - before[1],
        13,
        "each device tensor comes to the host once"
    );
    assert_eq!(after[0] - before[0], 3, "only dQ, dK and dV go back");
    assert!(after[2] > before[2], "the stream was synchronised");
    for i in 6..9 {
        let mut bytes = vec![0u8; host[i].len() * 4];
        fake.download(pack[i].ptr, &mut bytes);
        let got: Vec<u32> = bytes
            .chunks_exact(4)
            .map(|w| u32::from_ne_bytes([w[0], w[1], w[2], w[3]]))
            .collect();
        assert_eq!(
            got, host[i],
            "uid {}: staged and in-place runs differ",
            UIDS[i]
        );
        assert!(
            got.contains(&0x7fc0_0bad),
            "uid {}: padding rows keep the device's contents",
            UIDS[i]
        );
        assert!(
            got.iter()
                .any(|x| f32::from_bits(*x).is_finite() && *x != 0),
            "uid {}: gradients were written",
            UIDS[i]
        );
    }
}
