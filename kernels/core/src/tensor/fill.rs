//! Writing tensors: typed set and the fills the test harness needs (RFC §4.11.3).

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::dtype::{Element, HostDataMut};
use crate::error::KernelError;

use super::{TensorExt, TensorMut, typed_slice_mut};

/// Typed writes and fills for every writable tensor.
pub trait TensorMutExt: TensorMut {
    /// Writes `value` at `index`, routed through [`crate::tensor::Tensor::index_impl`].
    fn set<T: Element>(&mut self, index: &[i64], value: T) -> Result<(), KernelError> {
        let position = self.get_index(index)?;
        typed_slice_mut::<T>(self.host_data_mut())?[position] = value;
        Ok(())
    }

    /// Fills every owned position with values uniform in [-1, 1) (integers: in -8..8) drawn
    /// from ChaCha8 seeded with `seed`, in buffer order, so two tensors of the same type, layout
    /// and seed come out byte-identical.
    fn fill_random(&mut self, seed: u64) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let range = owned_range(self);
        match self.host_data_mut() {
            HostDataMut::F32(s) => s[range]
                .iter_mut()
                .for_each(|x| *x = rng.random_range(-1.0..1.0)),
            HostDataMut::F16(s) => s[range]
                .iter_mut()
                .for_each(|x| *x = half::f16::from_f32(rng.random_range(-1.0..1.0))),
            HostDataMut::BF16(s) => s[range]
                .iter_mut()
                .for_each(|x| *x = half::bf16::from_f32(rng.random_range(-1.0..1.0))),
            HostDataMut::I32(s) => s[range]
                .iter_mut()
                .for_each(|x| *x = rng.random_range(-8..8)),
            HostDataMut::I64(s) => s[range]
                .iter_mut()
                .for_each(|x| *x = rng.random_range(-8..8)),
            HostDataMut::Fp8(format, s) => s[range]
                .iter_mut()
                .for_each(|x| *x = format.encode(rng.random_range(-1.0..1.0))),
        }
    }

    /// Fills every owned position with `value` converted to the element type.
    fn fill_value(&mut self, value: f64) {
        let range = owned_range(self);
        match self.host_data_mut() {
            HostDataMut::F32(s) => s[range].fill(Element::from_f64(value)),
            HostDataMut::F16(s) => s[range].fill(Element::from_f64(value)),
            HostDataMut::BF16(s) => s[range].fill(Element::from_f64(value)),
            HostDataMut::I32(s) => s[range].fill(Element::from_f64(value)),
            HostDataMut::I64(s) => s[range].fill(Element::from_f64(value)),
            HostDataMut::Fp8(format, s) => s[range].fill(format.encode(value)),
        }
    }

    /// Fills every owned position with the element type's sentinel ([`Element::sentinel`]), so
    /// a later check can prove which positions an operation left untouched.
    fn fill_sentinel(&mut self) {
        let range = owned_range(self);
        match self.host_data_mut() {
            HostDataMut::F32(s) => s[range].fill(Element::sentinel()),
            HostDataMut::F16(s) => s[range].fill(Element::sentinel()),
            HostDataMut::BF16(s) => s[range].fill(Element::sentinel()),
            HostDataMut::I32(s) => s[range].fill(Element::sentinel()),
            HostDataMut::I64(s) => s[range].fill(Element::sentinel()),
            // Eight bits leave no room for a payload: the format's NaN, which the FP8 forward
            // writes only from a NaN input or scalar.
            HostDataMut::Fp8(format, s) => s[range].fill(format.nan_code(false)),
        }
    }
}

impl<X: TensorMut + ?Sized> TensorMutExt for X {}

/// Buffer positions the tensor owns: `[0, ragged_offset[B])` for ragged tensors (the union of
/// the per-batch ranges, since offsets start at 0 and never decrease), the element space for
/// dense ones.
fn owned_range<X: TensorMut + ?Sized>(tensor: &X) -> std::ops::Range<usize> {
    let end = match tensor.ragged_iteration_info() {
        Some(_) => tensor.element_count(),
        None => tensor.element_space(),
    };
    0..end.min(tensor.host_data().len())
}
