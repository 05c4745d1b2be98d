//! The benchmark's ragged mix: validating-mode length checks, calls bit-identical over repeats
//! and alternating offsets, and the fused tile list across garbage workspaces and graph replays.

use super::*;

/// In validating mode a `seq_len_kv` longer than its batch's extent is an INVALID_VALUE naming
/// the lengths tensor (the enqueue mode clamps it).
#[test]
fn seq_len_beyond_the_extent_is_invalid_value_in_validating_mode() {
    let name = "seq_len_beyond_the_extent_is_invalid_value_in_validating_mode";
    if !validating_device_present(name) {
        return;
    }
    let case = Case {
        pad: 3,
        ..Case::new(DataType::BFloat16, 64, (2, 2), &[8, 8, 8], &[8, 8, 8])
    };
    let mut inputs = device_inputs(&case);
    // Extents are 11 rows: 12 is past the end of batch 1's keys.
    let long: Vec<i64> = vec![8, 12, 8];
    for (uid, buffer) in inputs.buffers.iter_mut() {
        if *uid == SEQ_LEN_KV {
            *buffer = device_with(&le_bytes(&long, i64::to_le_bytes));
        }
    }
    let (status, error, _, _) = execute(CUDA_FMHA_ID, &case, &inputs);
    assert_eq!(status, INVALID_VALUE, "{error}");
    assert!(
        error.contains(&format!("seq_len_kv (uid {SEQ_LEN_KV})")),
        "names the lengths tensor uid: {error}"
    );
    eprintln!("test {name}: {error}");
}

/// Repeatability at scale: a deterministic forward returns the same bits for the same inputs, so a
/// call that differs has a race. Compute-sanitizer and the small cases pass races that need the
/// scale (a thousand and more work items on every SM, calls back to back on one workspace), so
/// every head dim of the plugin set runs the benchmark's ragged mix (bf16, H 16, 16 384 tokens)
/// causal bottom-right, causal top-left and non-causal, its calls alternating between the mix's
/// lengths and the same lengths reversed (each call works from another tile list than the call
/// before it), enqueued back to back in groups of up to 16 with no synchronisation between them;
/// every O must equal, bit for bit, the first call of its own lengths. `RAGGED_SDPA_TEST_REPEATS`
/// sets the calls per configuration (default 12).
#[test]
fn ragged_mix_calls_are_bit_identical() {
    let name = "ragged_mix_calls_are_bit_identical";
    if !device_present(name) {
        return;
    }
    let calls: usize = test_repeats(12).max(2);
    for (d, dv) in HEAD_DIMS {
        for band in [
            (None, Some(0), DiagonalAlignment::BottomRight),
            (None, Some(0), DiagonalAlignment::TopLeft),
            (None, None, DiagonalAlignment::TopLeft),
        ] {
            repeat_calls(name, d, dv, band, calls);
        }
    }
}

fn repeat_calls(
    name: &str,
    d: i64,
    dv: i64,
    band: (Option<i64>, Option<i64>, DiagonalAlignment),
    calls: usize,
) {
    let reversed: Vec<i64> = RAGGED_MIX.iter().rev().copied().collect();
    let cases =
        [&RAGGED_MIX[..], &reversed[..]].map(|lengths| ragged_mix_case(d, dv, band, lengths));
    // The same graph for both (S_max is the same): one context serves every call.
    let inputs = [device_inputs(&cases[0]), device_inputs(&cases[1])];
    let p = plugin();
    let graph = encode_graph(&graph(&cases[0]));
    let config = encode_engine_config(&EngineConfig::new(CUDA_FMHA_ID));
    let (gd, cd) = (ConstData::of(&graph), ConstData::of(&config));
    let handle = OwnedHandle::new();
    let mut workspace_size = 0usize;
    let mut context: Context = null_mut();
    // SAFETY: live handle and out-pointers; the null stream orders every execute before the
    // downloads that read its O.
    unsafe {
        assert_eq!((p.SetStream)(handle.0, null_mut()), SUCCESS);
        assert_eq!(
            (p.GetWorkspaceSize)(handle.0, &cd, &gd, &mut workspace_size),
            SUCCESS,
            "{}",
            last_error()
        );
        assert_eq!(
            (p.CreateExecutionContext)(handle.0, &cd, &gd, &mut context),
            SUCCESS,
            "{}",
            last_error()
        );
    }
    let workspace = DeviceAllocation::new(workspace_size.max(1)).expect("workspace");
    let o_init = le_bytes(
        &vec![cases[0].o_sentinel(); inputs[0].o_bytes / 2],
        u16::to_le_bytes,
    );
    let group = calls.min(16);
    let outputs: Vec<DeviceAllocation> = (0..group).map(|_| device_with(&o_init)).collect();
    let mut first: [Option<Vec<u8>>; 2] = [None, None];
    let mut call = 0;
    while call < calls {
        let n = group.min(calls - call);
        for (slot, o) in outputs.iter().enumerate().take(n) {
            let pack = pack_with_o(&inputs[(call + slot) % 2], o);
            // SAFETY: the context is live; the pack's buffers and the workspace outlive the
            // downloads below, which synchronise the null stream.
            let status = unsafe {
                (p.ExecuteOpGraph)(
                    handle.0,
                    context,
                    workspace.address() as *mut _,
                    pack.as_ptr(),
                    pack.len() as u32,
                )
            };
            assert_eq!(status, SUCCESS, "{}", last_error());
        }
        for (slot, o) in outputs.iter().enumerate().take(n) {
            let which = (call + slot) % 2;
            let bits = read_back(o);
            if first[which].is_none() {
                let sentinel = cases[which].o_sentinel().to_le_bytes();
                let unwritten = bits.chunks_exact(2).filter(|c| *c == sentinel).count();
                assert_eq!(
                    unwritten,
                    0,
                    "{name} d{d}/{dv} {band:?}: call {} left {unwritten} O elements unwritten",
                    call + slot
                );
                first[which] = Some(bits);
                continue;
            }
            let reference = first[which].as_ref().unwrap();
            if bits != *reference {
                let differing = bits
                    .chunks_exact(2)
                    .zip(reference.chunks_exact(2))
                    .filter(|(a, b)| a != b)
                    .count();
                panic!(
                    "{name} d{d}/{dv} {band:?}: call {} differs from the first call of its lengths \
                     in {differing} O elements",
                    call + slot
                );
            }
        }
        call += n;
    }
    // SAFETY: the context belongs to this handle and is destroyed once.
    let status = unsafe { (p.DestroyExecutionContext)(handle.0, context) };
    assert_eq!(status, SUCCESS);
    eprintln!(
        "test {name} d{d}/{dv} {band:?}: {calls} calls (alternating lengths, up to {group} back to \
         back) bit-identical"
    );
}

/// The fused list (the CUDA engine's forward building its own tile list, no pre-pass launch)
/// keeps state in the caller's workspace between its blocks: a claim word, a publication word and
/// a count, which must work from whatever the workspace holds and must be clean again for a CUDA
/// graph that replays the nonce it captured. The execute is captured once on a stream of its own
/// with a workspace full of garbage, replayed three times (O reset before each), then run eagerly
/// on the same workspace: every O must equal, bit for bit, an eager execute's on the null stream.
/// In validating mode (`HIPDNN_RAGGED_SDPA_VALIDATE=1`, which synchronises after the pre-pass) the
/// captured execute must instead be refused with BAD_PARAM before it enqueues anything, leaving the
/// caller's capture valid.
#[test]
fn fused_list_from_a_garbage_workspace_and_across_graph_replays() {
    let name = "fused_list_from_a_garbage_workspace_and_across_graph_replays";
    if !device_present(name) {
        return;
    }
    // bf16, causal, at both of the plugin's arrangements: d128 (two consumer warpgroups, query
    // tiles of 128 rows: 19 tiles × 16 heads = 304 items) and d64 (three, tiles of 192 rows: 13 × 16
    // = 208). Either is more than an H200's 132 blocks take first, so blocks draw from the work
    // counter: a replay that found the previous replay's words would skip the claim, draw from a
    // counter left past the end and leave items undone.
    for d in [128, 64] {
        graph_replays_equal_eager(name, d);
    }
}

fn graph_replays_equal_eager(name: &str, d: i64) {
    use cudarc::driver::sys as cu;
    let validating =
        std::env::var_os("HIPDNN_RAGGED_SDPA_VALIDATE").as_deref() == Some("1".as_ref());
    let case = Case {
        band: (None, Some(0), DiagonalAlignment::TopLeft),
        ..Case::new(
            DataType::BFloat16,
            d,
            (16, 4),
            &[1000, 0, 1333],
            &[1100, 7, 1333],
        )
    };
    let inputs = device_inputs(&case);
    let (reference, _) = run(CUDA_FMHA_ID, &case, &inputs);

    let p = plugin();
    let graph = encode_graph(&graph(&case));
    let config = encode_engine_config(&EngineConfig::new(CUDA_FMHA_ID));
    let (gd, cd) = (ConstData::of(&graph), ConstData::of(&config));
    let o = device_with(&vec![0u8; inputs.o_bytes]);
    let pack = pack_with_o(&inputs, &o);
    let handle = OwnedHandle::new();
    let mut stream: cu::CUstream = null_mut();
    let mut captured: cu::CUgraph = null_mut();
    let mut exec: cu::CUgraphExec = null_mut();
    let mut workspace_size = 0usize;
    let mut context: Context = null_mut();
    let o_words = inputs.o_bytes / 2;
    let mut primary: cu::CUcontext = null_mut();
    // SAFETY: driver calls with live out-pointers, in device 0's primary context (where the
    // allocations above live: the null stream's context); the pack's buffers, the workspace and O
    // outlive every launch (each replay is synchronised).
    unsafe {
        assert_eq!(
            cu::cuDevicePrimaryCtxRetain(&mut primary, 0),
            cu::CUresult::CUDA_SUCCESS
        );
        assert_eq!(cu::cuCtxSetCurrent(primary), cu::CUresult::CUDA_SUCCESS);
        assert_eq!(
            cu::cuStreamCreate(
                &mut stream,
                cu::CUstream_flags::CU_STREAM_NON_BLOCKING as u32
            ),
            cu::CUresult::CUDA_SUCCESS
        );
        assert_eq!((p.SetStream)(handle.0, stream.cast()), SUCCESS);
        assert_eq!(
            (p.GetWorkspaceSize)(handle.0, &cd, &gd, &mut workspace_size),
            SUCCESS,
            "{}",
            last_error()
        );
        assert_eq!(
            (p.CreateExecutionContext)(handle.0, &cd, &gd, &mut context),
            SUCCESS,
            "{}",
            last_error()
        );
        // Every byte 0xA5: the claim and publication words hold a value no execute's nonce has
        // (but with probability 2^-64), as a reused workspace would.
        let workspace = device_with(&vec![0xA5u8; workspace_size]);
        assert_eq!(
            cu::cuStreamBeginCapture_v2(
                stream,
                cu::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
            ),
            cu::CUresult::CUDA_SUCCESS
        );
        let status = (p.ExecuteOpGraph)(
            handle.0,
            context,
            workspace.address() as *mut _,
            pack.as_ptr(),
            pack.len() as u32,
        );
        let message = last_error();
        assert_eq!(
            cu::cuStreamEndCapture(stream, &mut captured),
            cu::CUresult::CUDA_SUCCESS,
            "{name} (d{d}): the capture must survive the execute ({message})"
        );
        if validating {
            // Validating mode synchronises after its pre-pass, which capture forbids: the
            // execute must refuse before enqueuing anything, leaving the capture valid.
            assert_eq!(status, BAD_PARAM, "captured validating execute: {message}");
            assert!(
                message.contains("HIPDNN_RAGGED_SDPA_VALIDATE") && message.contains("capture"),
                "the refusal names the mode and the capture: {message}"
            );
        } else {
            assert_eq!(status, SUCCESS, "captured execute: {message}");
        }
        assert_eq!(
            cu::cuGraphInstantiateWithFlags(&mut exec, captured, 0),
            cu::CUresult::CUDA_SUCCESS
        );
        for replay in (0..4).filter(|_| !validating) {
            assert_eq!(
                cu::cuMemsetD16Async(o.address(), case.o_sentinel(), o_words, stream),
                cu::CUresult::CUDA_SUCCESS
            );
            if replay < 3 {
                assert_eq!(cu::cuGraphLaunch(exec, stream), cu::CUresult::CUDA_SUCCESS);
            } else {
                let status = (p.ExecuteOpGraph)(
                    handle.0,
                    context,
                    workspace.address() as *mut _,
                    pack.as_ptr(),
                    pack.len() as u32,
                );
                assert_eq!(status, SUCCESS, "eager execute: {}", last_error());
            }
            assert_eq!(cu::cuStreamSynchronize(stream), cu::CUresult::CUDA_SUCCESS);
            let bits: Vec<u16> = read_back(&o)
                .chunks_exact(2)
                .map(|c| u16::from_le_bytes([c[0], c[1]]))
                .collect();
            let what = if replay < 3 {
                "graph replay"
            } else {
                "eager execute after the replays"
            };
            let differing = bits.iter().zip(&reference).filter(|(a, b)| a != b).count();
            assert_eq!(
                differing, 0,
                "{name} (d{d}): {what} {replay}: {differing} of {o_words} O elements differ from the eager execute"
            );
        }
        assert_eq!((p.DestroyExecutionContext)(handle.0, context), SUCCESS);
        assert_eq!(cu::cuGraphExecDestroy(exec), cu::CUresult::CUDA_SUCCESS);
        assert_eq!(cu::cuGraphDestroy(captured), cu::CUresult::CUDA_SUCCESS);
        assert_eq!(cu::cuStreamDestroy_v2(stream), cu::CUresult::CUDA_SUCCESS);
        assert_eq!(
            cu::cuDevicePrimaryCtxRelease_v2(0),
            cu::CUresult::CUDA_SUCCESS
        );
    }
    if validating {
        eprintln!(
            "test {name} (d{d}): validating mode refused the captured execute with BAD_PARAM and \
             left the capture valid (the replays need the enqueue mode)"
        );
    } else {
        eprintln!(
            "test {name} (d{d}): three graph replays from a garbage workspace and an eager execute \
             after them equal an eager execute bit for bit"
        );
    }
}

/// The LSE of the ragged mix over repeated calls: bit-identical like O (the repeat check above
/// writes no LSE). Each head dim, causal bottom-right, the dense LSE; `RAGGED_SDPA_TEST_REPEATS`
/// calls (default 4 here: one execute and download per call).
#[test]
fn ragged_mix_lse_is_bit_identical() {
    let name = "ragged_mix_lse_is_bit_identical";
    if !device_present(name) {
        return;
    }
    let calls: usize = test_repeats(4).clamp(2, 8);
    for (d, dv) in HEAD_DIMS {
        let band = (None, Some(0), DiagonalAlignment::BottomRight);
        let case = Case {
            lse: Lse::Dense,
            ..ragged_mix_case(d, dv, band, &RAGGED_MIX)
        };
        let inputs = device_inputs(&case);
        let (o0, lse0) = run(CUDA_FMHA_ID, &case, &inputs);
        for call in 1..calls {
            let (o, lse) = run(CUDA_FMHA_ID, &case, &inputs);
            assert!(
                o == o0,
                "{name} d{d}/{dv}: O of call {call} differs from call 0"
            );
            let differing: Vec<usize> = (0..lse0.len()).filter(|&i| lse[i] != lse0[i]).collect();
            assert!(
                differing.is_empty(),
                "{name} d{d}/{dv}: LSE of call {call} differs from call 0 at {} of {} positions, \
                 first {:?}: {:?}",
                differing.len(),
                lse0.len(),
                &differing[..differing.len().min(4)],
                differing
                    .iter()
                    .take(4)
                    .map(|&i| (f32::from_bits(lse0[i]), f32::from_bits(lse[i])))
                    .collect::<Vec<_>>()
            );
        }
        eprintln!("test {name} d{d}/{dv}: {calls} calls, O and LSE bit-identical");
    }
}
