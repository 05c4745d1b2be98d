//! The host reference engine next to a usable HIP runtime, through the built plugin's C ABI.
//!
//! The HIP runtime is the project's fake `libamdhip64` ([`common::fake_hip`]), whose "device"
//! memory the CPU cannot dereference. So the plugin's pointer classification, its staging copies
//! and the stream synchronisation all run for real: a device pointer that was not staged faults
//! instead of passing.

mod common;

use std::sync::Mutex;

use common::fake_hip::fake_hip;
use common::problem::{self, Inputs, PACKING_A, PACKING_B, same_bits};
use common::*;

/// The fake's counters are process-wide: tests that read them take turns.
static COUNTED: Mutex<()> = Mutex::new(());

fn bytes_of<T>(v: &[T]) -> &[u8] {
    // SAFETY: plain-old-data element types; the byte view covers the same memory.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast(), std::mem::size_of_val(v)) }
}

fn bytes_of_mut(v: &mut [f32]) -> &mut [u8] {
    // SAFETY: every byte pattern is a valid f32.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast(), std::mem::size_of_val(v)) }
}

/// Creates a host-engine context for the shared test graph, executes `pack` on the null
/// stream, and destroys the context.
fn execute(pack: &[DeviceBuffer]) -> Status {
    let handle = OwnedHandle::new();
    let context = OwnedContext::new(&handle, &problem::config_bytes(), &problem::graph_bytes());
    // Every pointer in `pack` is host memory or fake-device memory of its extent.
    context.execute(pack)
}

#[test]
fn the_host_engine_is_applicable_next_to_a_hip_device() {
    fake_hip();
    let handle = OwnedHandle::new();
    let (status, ids) = applicable(&handle, &problem::graph_bytes());
    assert_eq!(status, SUCCESS, "{}", last_error());
    assert!(ids.contains(&HOST_REFERENCE_ID), "{ids:?}");
}

#[test]
fn device_tensors_are_staged_and_unwritten_rows_keep_their_device_contents() {
    let fake = fake_hip();
    let _turn = COUNTED.lock().unwrap_or_else(|e| e.into_inner());
    for packing in [PACKING_A, PACKING_B] {
        let inputs = Inputs::new(packing);
        let (mut o, mut lse) = inputs.outputs();
        let mut pack = inputs.pack(&mut o, &mut lse);
        let host_scale = pack.iter().position(|b| b.uid == problem::SCALE);
        let sizes = [
            (problem::Q, bytes_of(&inputs.q)),
            (problem::K, bytes_of(&inputs.k)),
            (problem::V, bytes_of(&inputs.v)),
            (problem::O, bytes_of(&o)),
            (problem::LSE, bytes_of(&lse)),
            (problem::Q_OFFSETS, bytes_of(&inputs.q_offsets)),
            (problem::KV_OFFSETS, bytes_of(&inputs.kv_offsets)),
            (problem::SEQ_Q, bytes_of(&inputs.seq_q)),
            (problem::SEQ_KV, bytes_of(&inputs.seq_kv)),
        ];
        // Everything but the pass-by-value scale (a host pointer by contract) moves to the
        // device; O and LSE go there holding the sentinel.
        for (uid, bytes) in sizes {
            let device = fake.upload(bytes);
            let entry = pack.iter_mut().find(|b| b.uid == uid).expect("uid in pack");
            entry.ptr = device;
        }
        assert!(host_scale.is_some());
        let before = fake.counters();
        assert_eq!(execute(&pack), SUCCESS, "{}", last_error());
        let after = fake.counters();
        // Nine device tensors come to the host once each; only O and LSE go back.
        assert_eq!(after[1] - before[1], 9, "device → host copies");
        assert_eq!(after[0] - before[0], 2, "host → device copies");
        assert!(after[2] > before[2], "the stream was synchronised");

        let (expected_o, expected_lse) = inputs.reference();
        let (mut got_o, mut got_lse) = inputs.outputs();
        let device = |uid| pack.iter().find(|b| b.uid == uid).expect("uid").ptr;
        fake.download(device(problem::O), bytes_of_mut(&mut got_o));
        fake.download(device(problem::LSE), bytes_of_mut(&mut got_lse));
        assert!(
            same_bits(&got_o, &expected_o),
            "O differs from the CPU reference"
        );
        assert!(
            same_bits(&got_lse, &expected_lse),
            "LSE differs from the CPU reference"
        );
        assert!(
            got_o.iter().any(|x| x.to_bits() == problem::SENTINEL),
            "the packing leaves rows unwritten, and they must keep the device's sentinel"
        );
    }
}

#[test]
fn host_buffers_next_to_a_hip_device_are_used_in_place() {
    let fake = fake_hip();
    let _turn = COUNTED.lock().unwrap_or_else(|e| e.into_inner());
    let inputs = Inputs::new(PACKING_A);
    let (mut o, mut lse) = inputs.outputs();
    let pack = inputs.pack(&mut o, &mut lse);
    let before = fake.counters();
    assert_eq!(execute(&pack), SUCCESS, "{}", last_error());
    assert_eq!(
        fake.counters()[..2],
        before[..2],
        "no copies for host memory"
    );
    let (expected_o, expected_lse) = inputs.reference();
    assert!(same_bits(&o, &expected_o) && same_bits(&lse, &expected_lse));
}
