use std::ptr::null_mut;

use half::{bf16, f16};
use ragged_core::binding::Signature;
use ragged_core::engine::Reach;
use ragged_core::problem::test_support::packed;
use ragged_core::problem::{RaggedSdpaProblem, ScalarType, ScalePlan};
use ragged_core::{HostData, KernelError};

use super::*;
use crate::abi::types::Status;

/// B = 1, one query and two keys, one head, D = 1 (bf16): uids 1..=4, offsets 10 (Q/O) and 11
/// (K/V), int32 in elements.
fn tiny() -> RaggedSdpaProblem {
    packed(1, (1, 1), (2, 1), 1)
}

fn entry(uid: i64, ptr: *mut c_void) -> DeviceBuffer {
    DeviceBuffer { uid, ptr }
}

fn pack(entries: &[DeviceBuffer]) -> Pack<'_> {
    Pack {
        entries,
        stream: null_mut(),
        workspace: null_mut(),
    }
}

/// Host buffers for [`tiny`]: offsets, Q, K, V and O, each its own allocation.
struct Tiny {
    q_offsets: [i32; 2],
    kv_offsets: [i32; 2],
    q: [bf16; 1],
    k: [bf16; 2],
    v: [bf16; 2],
    o: [bf16; 1],
}

impl Tiny {
    fn new() -> Self {
        Tiny {
            q_offsets: [0, 1],
            kv_offsets: [0, 2],
            q: [bf16::ONE],
            k: [bf16::ONE; 2],
            v: [bf16::ONE; 2],
            o: [bf16::ZERO],
        }
    }

    fn entries(&mut self) -> Vec<DeviceBuffer> {
        vec![
            entry(10, self.q_offsets.as_mut_ptr().cast()),
            entry(11, self.kv_offsets.as_mut_ptr().cast()),
            entry(1, self.q.as_mut_ptr().cast()),
            entry(2, self.k.as_mut_ptr().cast()),
            entry(3, self.v.as_mut_ptr().cast()),
            entry(4, self.o.as_mut_ptr().cast()),
        ]
    }
}

/// [`bind`] with no workspace and a fresh scratch.
///
/// # Safety
/// As [`bind`]: every pointer in `entries` is a live host buffer of its declared extent.
unsafe fn bind_for<'a>(
    signature: &'a Signature,
    reach: Reach,
    entries: &'a [DeviceBuffer],
    staged: &'a mut Staged,
) -> Result<Call<'a>, PluginError> {
    // SAFETY: forwarded contract.
    unsafe {
        bind(
            signature,
            reach,
            pack(entries),
            0,
            staged,
            &mut BindScratch::default(),
        )
    }
}

#[test]
fn host_buffers_are_bound_over_exactly_the_extent_their_offsets_give() {
    let problem = tiny();
    let signature = Signature::forward(&problem);
    let mut buffers = Tiny::new();
    let entries = buffers.entries();
    let mut staged = Staged::default();
    // SAFETY: every pointer is a live host array of the declared extent.
    let call = unsafe { bind_for(&signature, Reach::Host, &entries, &mut staged) };
    let mut call = call.expect("binds");
    assert_eq!(call.host(2).map(|d| d.len()), Ok(2), "K: offsets[B] = 2");
    assert_eq!(call.host(1).map(|d| d.len()), Ok(1), "Q: offsets[B] = 1");
    assert!(matches!(call.host(10), Ok(HostData::I32([0, 1]))));
    assert!(call.take_layout(2).is_some(), "K's layout comes validated");
    assert_eq!(call.take_output(4).map(|o| o.len()), Ok(1));
    assert_eq!(
        call.take_output(4).err(),
        Some(KernelError::Unbound { uid: 4 }),
        "an output is lent once"
    );
}

#[test]
fn an_output_overlapping_an_input_is_invalid_value_naming_both() {
    let problem = tiny();
    let signature = Signature::forward(&problem);
    let mut buffers = Tiny::new();
    let mut entries = buffers.entries();
    entries[5].ptr = entries[2].ptr; // O over Q
    let mut staged = Staged::default();
    // SAFETY: as above; the overlap is refused before any slice exists.
    let error = unsafe { bind_for(&signature, Reach::Host, &entries, &mut staged) }.err();
    assert_eq!(
        error.as_ref().map(PluginError::status),
        Some(Status::INVALID_VALUE)
    );
    let text = error.map(|e| e.to_string()).unwrap_or_default();
    assert!(
        text.contains("output tensor uid 4") && text.contains("tensor uid 1"),
        "{text}"
    );
}

#[test]
fn an_output_named_in_a_second_role_is_invalid_value_naming_both() {
    let mut problem = tiny();
    problem.o.uid = problem.q.uid;
    let signature = Signature::forward(&problem);
    let mut buffers = Tiny::new();
    let entries = buffers.entries();
    let mut staged = Staged::default();
    // SAFETY: the alias is refused before any pointer is used.
    let error = unsafe { bind_for(&signature, Reach::Host, &entries, &mut staged) }.err();
    assert_eq!(
        error.as_ref().map(PluginError::status),
        Some(Status::INVALID_VALUE)
    );
    assert_eq!(
        error.map(|e| e.to_string()),
        Some(
            "invalid value: tensor uid 1 is both q_tensor_uid and o_tensor_uid, and one of them \
             is written: an output may not overlap another binding"
                .to_owned()
        )
    );
}

#[test]
fn offsets_that_decrease_are_the_callers_values() {
    let problem = tiny();
    let signature = Signature::forward(&problem);
    let mut buffers = Tiny::new();
    buffers.kv_offsets = [0, -1];
    let entries = buffers.entries();
    let mut staged = Staged::default();
    // SAFETY: as above; the offsets are refused before their tensors are bound.
    let error = unsafe { bind_for(&signature, Reach::Host, &entries, &mut staged) }.err();
    assert_eq!(
        error.as_ref().map(PluginError::status),
        Some(Status::INVALID_VALUE),
        "{error:?}"
    );
    assert!(error.is_some_and(|e| e.to_string().contains("tensor uid 2")));
}

#[test]
fn lookups_name_the_missing_or_null_uid_and_a_uid_bound_twice_is_rejected() {
    let problem = tiny();
    let signature = Signature::forward(&problem);
    let mut buffers = Tiny::new();
    let mut entries = buffers.entries();
    entries.remove(3); // K
    let mut staged = Staged::default();
    // SAFETY: nothing is read before the missing binding is reported.
    let missing = unsafe { bind_for(&signature, Reach::Device, &entries, &mut staged) };
    assert_eq!(
        missing.err().map(|e| e.to_string()),
        Some("tensor uid 2 (k_tensor_uid) has no entry in device_buffers".into())
    );
    let mut entries = buffers.entries();
    entries[3].ptr = null_mut();
    let mut staged = Staged::default();
    // SAFETY: as above.
    let null = unsafe { bind_for(&signature, Reach::Device, &entries, &mut staged) };
    assert!(matches!(
        null.err(),
        Some(PluginError::NullBuffer { uid: 2, .. })
    ));
    let mut entries = buffers.entries();
    entries.push(entry(3, null_mut()));
    let mut staged = Staged::default();
    // SAFETY: the pack is refused before any pointer is used.
    let twice = unsafe { bind_for(&signature, Reach::Device, &entries, &mut staged) };
    assert_eq!(
        twice.err().map(|e| e.to_string()),
        Some("invalid value: device_buffers binds tensor uid 3 more than once".into())
    );
}

#[test]
fn device_addresses_are_zero_only_for_what_the_problem_lacks() {
    let problem = tiny();
    let signature = Signature::forward(&problem);
    let mut buffers = Tiny::new();
    let entries = buffers.entries();
    let mut staged = Staged::default();
    // SAFETY: nothing is dereferenced on the device path.
    let call = unsafe { bind_for(&signature, Reach::Device, &entries, &mut staged) };
    let call = call.expect("binds");
    assert_eq!(
        call.device(1).map(|d| d.address()),
        Ok(buffers.q.as_ptr() as u64)
    );
    assert_eq!(
        call.device_address(Some(11)),
        Ok(buffers.kv_offsets.as_ptr() as u64)
    );
    assert_eq!(call.device_address(None), Ok(0));
    assert!(call.host(1).is_err(), "a device plan gets no host slices");
}

/// [`tiny`] with its scale bound at execute through uid 30.
fn scaled(scale: ScalePlan) -> RaggedSdpaProblem {
    RaggedSdpaProblem { scale, ..tiny() }
}

/// The scale `reach` reads from `bytes` bound to uid 30 (plus the tiny problem's buffers).
fn scale_of(scale: ScalePlan, reach: Reach, bytes: &mut [u8]) -> Result<f32, PluginError> {
    let problem = scaled(scale);
    let signature = Signature::forward(&problem);
    let mut buffers = Tiny::new();
    let mut entries = buffers.entries();
    entries.push(entry(30, bytes.as_mut_ptr().cast()));
    let mut staged = Staged::default();
    // SAFETY: every pointer is a live host buffer of its declared extent.
    let call = unsafe { bind_for(&signature, reach, &entries, &mut staged) }?;
    Ok(call.scale(problem.scale)?)
}

#[test]
fn pass_by_value_scalars_are_read_in_each_float_type_by_every_engine_kind() {
    let cases: [(ScalarType, Vec<u8>, f32); 4] = [
        (ScalarType::Float, 0.375f32.to_le_bytes().to_vec(), 0.375),
        (ScalarType::Double, (-2.5f64).to_le_bytes().to_vec(), -2.5),
        (
            ScalarType::Half,
            f16::from_f32(0.25).to_le_bytes().to_vec(),
            0.25,
        ),
        (
            ScalarType::BFloat16,
            bf16::from_f32(3.0).to_le_bytes().to_vec(),
            3.0,
        ),
    ];
    for (data_type, mut bytes, expected) in cases {
        bytes.resize(8, 0);
        let scale = ScalePlan::RuntimeHostScalar { uid: 30, data_type };
        for reach in [Reach::Device, Reach::Host] {
            assert_eq!(
                scale_of(scale, reach, &mut bytes).ok(),
                Some(expected),
                "{data_type} {reach:?}"
            );
        }
    }
}

#[test]
fn a_non_finite_scale_at_execute_is_invalid_value_naming_uid_and_value() {
    let cases: [(ScalarType, Vec<u8>, &str); 4] = [
        (
            ScalarType::Float,
            f32::INFINITY.to_le_bytes().to_vec(),
            "inf",
        ),
        (ScalarType::Float, f32::NAN.to_le_bytes().to_vec(), "NaN"),
        (
            ScalarType::Double,
            f64::NEG_INFINITY.to_le_bytes().to_vec(),
            "-inf",
        ),
        // Finite as f64, infinite once narrowed to the f32 the kernels take.
        (ScalarType::Double, 1e300f64.to_le_bytes().to_vec(), "inf"),
    ];
    for (data_type, mut bytes, shown) in cases {
        bytes.resize(8, 0);
        for (scale, reach) in [
            (
                ScalePlan::RuntimeHostScalar { uid: 30, data_type },
                Reach::Device,
            ),
            (ScalePlan::DeviceTensor { uid: 30, data_type }, Reach::Host),
        ] {
            let error = scale_of(scale, reach, &mut bytes).err();
            assert_eq!(
                error.as_ref().map(PluginError::status),
                Some(Status::INVALID_VALUE)
            );
            assert_eq!(
                error.map(|e| e.to_string()),
                Some(format!(
                    "invalid value: scale_tensor_uid tensor uid 30 holds the scale {shown} at \
                     execute; a finite scale is required"
                ))
            );
        }
    }
}

#[test]
fn a_fixed_scale_needs_no_binding_and_a_missing_one_is_bad_param_naming_it() {
    let problem = scaled(ScalePlan::Fixed(0.5));
    let signature = Signature::forward(&problem);
    let mut buffers = Tiny::new();
    let entries = buffers.entries();
    let mut staged = Staged::default();
    // SAFETY: every pointer is a live host buffer; nothing is read on the device path.
    let call = unsafe { bind_for(&signature, Reach::Device, &entries, &mut staged) };
    assert_eq!(
        call.map(|c| c.scale(problem.scale).ok()).ok(),
        Some(Some(0.5))
    );

    let problem = scaled(ScalePlan::RuntimeHostScalar {
        uid: 30,
        data_type: ScalarType::Float,
    });
    let signature = Signature::forward(&problem);
    let mut staged = Staged::default();
    // SAFETY: as above.
    let error = unsafe { bind_for(&signature, Reach::Device, &entries, &mut staged) }.err();
    assert_eq!(
        error.as_ref().map(PluginError::status),
        Some(Status::BAD_PARAM)
    );
    assert_eq!(
        error.map(|e| e.to_string()),
        Some("tensor uid 30 (scale_tensor_uid) has no entry in device_buffers".to_owned())
    );
}

#[test]
fn a_device_scale_tensor_is_read_by_the_host_engine_only() {
    let scale = ScalePlan::DeviceTensor {
        uid: 30,
        data_type: ScalarType::Float,
    };
    let mut bytes = 0.5f32.to_le_bytes().to_vec();
    assert_eq!(scale_of(scale, Reach::Host, &mut bytes).ok(), Some(0.5));
    let error = scale_of(scale, Reach::Device, &mut bytes)
        .err()
        .map(|e| e.to_string());
    assert!(
        error
            .as_deref()
            .is_some_and(|e| e.contains("tensor uid 30") && e.contains("device-resident")),
        "{error:?}"
    );
}
