//! Every head dim of the plugin set: its graphs are applicable, and zero-length batches with
//! padding, causal masks and windows (the sanitizer runs filter on `zero_length`).

use super::*;

/// Without a device: every graph the device tests above and below build is one the plugin
/// accepts, so a device round never spends its time on a malformed graph.
#[test]
fn the_device_graphs_are_applicable() {
    let mut cases = vec![("seq_len_padding", seq_len_padding_case())];
    for (d, dv) in HEAD_DIMS {
        for band in [(None, Some(0)), (Some(16), Some(4))] {
            cases.push(("sanitizer", sanitizer_case(d, dv, band)));
        }
        cases.push((
            "ragged mix",
            ragged_mix_case(
                d,
                dv,
                (None, Some(0), DiagonalAlignment::TopLeft),
                &RAGGED_MIX,
            ),
        ));
    }
    for (what, case) in cases {
        let handle = OwnedHandle::new();
        let (status, ids) = applicable(&handle, &encode_graph(&graph(&case)));
        assert_eq!(status, SUCCESS, "{what} d{}: {}", case.d, last_error());
        assert!(
            ids.contains(&HOST_REFERENCE_ID),
            "{what} d{}: {ids:?}",
            case.d
        );
    }
}

/// The sanitizer case, run under compute-sanitizer memcheck and racecheck by
/// `bench/gpu/verify_build.sh` (its name holds `zero_length`): every head dim of the plugin set,
/// f16, exact-size device buffers, zero-length Q and K/V batches, `seq_len` padding, GQA 2, causal
/// bottom-right and a (16, 4) bottom-right sliding window, dense LSE.
#[test]
fn zero_length_batches_every_head_dim_padding_causal_and_window() {
    let name = "zero_length_batches_every_head_dim_padding_causal_and_window";
    for (d, dv) in HEAD_DIMS {
        for band in [(None, Some(0)), (Some(16), Some(4))] {
            let label = format!("{name} d{d}/{dv} band {band:?}");
            if check(&label, sanitizer_case(d, dv, band)).is_none() {
                return;
            }
        }
    }
}
