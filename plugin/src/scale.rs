//! The attention scale of one execute (schema.md §6.2, ragged-sdpa.md §4).
//!
//! A scale fixed in the graph is known when the plan is made. A runtime pass-by-value scalar
//! (RFC 0016) is not: the variant pack binds its uid to a **host** pointer (plugin-abi.md §5.7),
//! so every engine, GPU engines included, reads it here on each execute and hands the kernels a
//! plain float. A scale tensor that is neither baked nor pass-by-value may live in device memory;
//! only the host engine (which stages device memory first) reads that one.
//!
//! A value read at execute must be finite: a NaN or infinite scale turns every output into NaN,
//! so it is INVALID_VALUE naming the uid and the value, and nothing is written (issue 13 item 5;
//! a non-finite scale baked into the graph is already declined at planning).

use ragged_core::problem::{ScalarType as DataType, ScalePlan};
use ragged_core::tensor::BorrowedStorage;
use ragged_core::{HostData, ShallowTensor, read_scalar_f32};

use crate::error::PluginError;
use crate::variant_pack::VariantPack;

/// The SDPA field a runtime scale is bound through, for error messages.
const ROLE: &str = "scale_tensor_uid";

/// What a GPU engine's plan carries as its scale while the real value is only known at execute;
/// every execute replaces it with [`for_device_engine`]'s value before anything is launched.
/// A finite value, so plan-time checks of the scale (AITER refuses a non-finite one) pass.
pub const RUNTIME_PLACEHOLDER: f32 = 1.0;

/// The scale for the host engine, where every tensor in the pack is host memory.
///
/// # Safety
/// For a runtime scale, the pointer bound to its uid is a host pointer valid for one element of
/// its data type.
pub unsafe fn for_host_engine(
    scale: ScalePlan,
    pack: &VariantPack<'_>,
) -> Result<f32, PluginError> {
    match scale {
        ScalePlan::Fixed(value) => Ok(value),
        ScalePlan::RuntimeHostScalar { uid, data_type }
        | ScalePlan::DeviceTensor { uid, data_type } => {
            // SAFETY: forwarded contract.
            unsafe { read_host_scalar(uid, data_type, pack) }
        }
    }
}

/// The scale for a GPU engine. A device-resident scale tensor is declined when the plan is made,
/// so reaching one here is an internal error, never a host read of a device address.
///
/// # Safety
/// For a pass-by-value scale, the pointer bound to its uid is a host pointer valid for one
/// element of its data type (plugin-abi.md §5.7).
pub unsafe fn for_device_engine(
    scale: ScalePlan,
    pack: &VariantPack<'_>,
) -> Result<f32, PluginError> {
    match scale {
        ScalePlan::Fixed(value) => Ok(value),
        ScalePlan::RuntimeHostScalar { uid, data_type } => {
            // SAFETY: forwarded contract.
            unsafe { read_host_scalar(uid, data_type, pack) }
        }
        ScalePlan::DeviceTensor { uid, .. } => Err(PluginError::Engine(format!(
            "{ROLE} tensor uid {uid} is a device-resident scale, which GPU engines decline at \
             planning; it reached execute"
        ))),
    }
}

/// # Safety
/// The pointer bound to `uid` is a host pointer valid for one element of `data_type`.
unsafe fn read_host_scalar(
    uid: i64,
    data_type: DataType,
    pack: &VariantPack<'_>,
) -> Result<f32, PluginError> {
    // SAFETY: forwarded contract.
    let value = unsafe { read_host_scalar_unchecked(uid, data_type, pack) }?;
    if value.is_finite() {
        Ok(value)
    } else {
        Err(PluginError::InvalidValue(format!(
            "{ROLE} tensor uid {uid} holds the scale {value} at execute; a finite scale is required"
        )))
    }
}

/// # Safety
/// As [`read_host_scalar`].
unsafe fn read_host_scalar_unchecked(
    uid: i64,
    data_type: DataType,
    pack: &VariantPack<'_>,
) -> Result<f32, PluginError> {
    let ptr = pack.pointer(uid, ROLE)?;
    if data_type == DataType::Double {
        // SAFETY: forwarded contract; unaligned read because a host scalar carries no promise.
        return Ok(unsafe { ptr.as_ptr().cast::<f64>().read_unaligned() } as f32);
    }
    let element = data_type.element().ok_or_else(|| {
        PluginError::Engine(format!(
            "{ROLE} tensor uid {uid} has data type {data_type}, which the plan should have declined"
        ))
    })?;
    // SAFETY: forwarded contract: one element at `ptr`.
    let data =
        unsafe { HostData::from_raw_parts(ptr.as_ptr().cast_const(), element, element.size()) }
            .map_err(|e| PluginError::from(e.for_tensor(uid)))?;
    // The float types read straight from the borrowed element; any other type goes through the
    // tensor path below for its error.
    match data {
        HostData::F32([value]) => return Ok(*value),
        HostData::F16([value]) => return Ok(value.to_f32()),
        HostData::BF16([value]) => return Ok(value.to_f32()),
        _ => {}
    }
    // SAFETY: forwarded contract: one element at `ptr`.
    let tensor = unsafe {
        ShallowTensor::from_raw(
            ptr.as_ptr().cast_const(),
            element,
            element.size(),
            vec![1],
            vec![1],
        )
    }
    .map_err(|e| PluginError::from(e.for_tensor(uid)))?;
    read_scalar_f32(&tensor).map_err(|e| e.for_tensor(uid).into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::types::{DeviceBuffer, Status};
    use std::ptr::null_mut;

    fn bound(uid: i64, value: &mut [u8]) -> [DeviceBuffer; 1] {
        [DeviceBuffer {
            uid,
            ptr: value.as_mut_ptr().cast(),
        }]
    }

    fn device_engine(scale: ScalePlan, entries: &[DeviceBuffer]) -> Result<f32, PluginError> {
        // SAFETY: the tests bind host scalars of the stated type, or nothing.
        let pack = unsafe { VariantPack::new(entries, null_mut(), null_mut()) }?;
        // SAFETY: every pointer in these tests is a live host buffer of 8 bytes.
        unsafe { for_device_engine(scale, &pack) }
    }

    fn host_engine(scale: ScalePlan, entries: &[DeviceBuffer]) -> Result<f32, PluginError> {
        // SAFETY: the tests bind host scalars of the stated type, or nothing.
        let pack = unsafe { VariantPack::new(entries, null_mut(), null_mut()) }?;
        // SAFETY: as above.
        unsafe { for_host_engine(scale, &pack) }
    }

    #[test]
    fn a_fixed_scale_needs_no_binding() {
        assert_eq!(
            device_engine(ScalePlan::Fixed(0.125), &[]).ok(),
            Some(0.125)
        );
        assert_eq!(host_engine(ScalePlan::Fixed(0.5), &[]).ok(), Some(0.5));
    }

    #[test]
    fn pass_by_value_scalars_are_read_in_each_float_type() {
        let cases: [(DataType, Vec<u8>, f32); 4] = [
            (DataType::Float, 0.375f32.to_le_bytes().to_vec(), 0.375),
            (DataType::Double, (-2.5f64).to_le_bytes().to_vec(), -2.5),
            (
                DataType::Half,
                half::f16::from_f32(0.25).to_le_bytes().to_vec(),
                0.25,
            ),
            (
                DataType::BFloat16,
                half::bf16::from_f32(3.0).to_le_bytes().to_vec(),
                3.0,
            ),
        ];
        for (data_type, mut bytes, expected) in cases {
            bytes.resize(8, 0);
            let scale = ScalePlan::RuntimeHostScalar { uid: 30, data_type };
            let entries = bound(30, &mut bytes);
            assert_eq!(
                device_engine(scale, &entries).ok(),
                Some(expected),
                "{data_type}"
            );
            assert_eq!(
                host_engine(scale, &entries).ok(),
                Some(expected),
                "{data_type}"
            );
        }
    }

    #[test]
    fn a_non_finite_scale_at_execute_is_invalid_value_naming_uid_and_value() {
        let cases: [(DataType, Vec<u8>, &str); 4] = [
            (DataType::Float, f32::INFINITY.to_le_bytes().to_vec(), "inf"),
            (DataType::Float, f32::NAN.to_le_bytes().to_vec(), "NaN"),
            (
                DataType::Double,
                f64::NEG_INFINITY.to_le_bytes().to_vec(),
                "-inf",
            ),
            // Finite as f64, infinite once narrowed to the f32 the kernels take.
            (DataType::Double, 1e300f64.to_le_bytes().to_vec(), "inf"),
        ];
        for (data_type, mut bytes, shown) in cases {
            bytes.resize(8, 0);
            for scale in [
                ScalePlan::RuntimeHostScalar { uid: 30, data_type },
                ScalePlan::DeviceTensor { uid: 30, data_type },
            ] {
                let entries = bound(30, &mut bytes);
                let error = host_engine(scale, &entries).err();
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
            let scale = ScalePlan::RuntimeHostScalar { uid: 30, data_type };
            let entries = bound(30, &mut bytes);
            assert!(device_engine(scale, &entries).is_err(), "{data_type}");
        }
    }

    #[test]
    fn a_missing_scale_binding_is_bad_param_naming_the_uid() {
        let mut other = [0u8; 8];
        let scale = ScalePlan::RuntimeHostScalar {
            uid: 30,
            data_type: DataType::Float,
        };
        let error = device_engine(scale, &bound(31, &mut other)).err();
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
        let mut bytes = 0.5f32.to_le_bytes().to_vec();
        let scale = ScalePlan::DeviceTensor {
            uid: 30,
            data_type: DataType::Float,
        };
        let entries = bound(30, &mut bytes);
        assert_eq!(host_engine(scale, &entries).ok(), Some(0.5));
        let error = device_engine(scale, &entries).err().map(|e| e.to_string());
        assert!(
            error
                .as_deref()
                .is_some_and(|e| e.contains("tensor uid 30") && e.contains("device-resident")),
            "{error:?}"
        );
    }
}
