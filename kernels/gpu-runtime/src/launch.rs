//! One description of a kernel launch for both vendors.
//!
//! `cuLaunchKernel` and `hipModuleLaunchKernel` take the same untyped array of pointers, one per
//! kernel parameter; a wrong type or a missing parameter is silent memory corruption on the
//! device. Launchers therefore build their argument list from [`KernelArg`] values, one per
//! parameter in the order of the `extern "C"` signature, and [`LaunchConfig`] names grid, block
//! and shared memory so they cannot be swapped.

use std::ffi::c_void;

/// One kernel parameter, by value, with the exact C type of the signature.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KernelArg {
    /// A device pointer (`T*`, `const T*`); 0 is a null pointer.
    Ptr(u64),
    /// `int`.
    I32(i32),
    /// `long long`.
    I64(i64),
    /// `float`.
    F32(f32),
    /// A `const __grid_constant__ CUtensorMap` (128 opaque bytes encoded by the driver).
    TensorMap([u64; 16]),
}

impl KernelArg {
    /// A pointer argument from an address held as `usize` (the AMD engine's buffers).
    pub fn ptr(address: usize) -> Self {
        KernelArg::Ptr(address as u64)
    }

    /// The C type name, as it appears in a kernel's parameter list.
    pub fn c_type(&self) -> &'static str {
        match self {
            KernelArg::Ptr(_) => "ptr",
            KernelArg::I32(_) => "int",
            KernelArg::I64(_) => "long long",
            KernelArg::F32(_) => "float",
            KernelArg::TensorMap(_) => "CUtensorMap",
        }
    }

    /// Where the value lives: the element of the `void**` array the launch APIs take. The
    /// runtime reads exactly as many bytes as the parameter's C type has, which is the size of
    /// the variant's payload.
    pub fn address(&self) -> *mut c_void {
        match self {
            KernelArg::Ptr(v) => std::ptr::from_ref(v).cast_mut().cast(),
            KernelArg::I32(v) => std::ptr::from_ref(v).cast_mut().cast(),
            KernelArg::I64(v) => std::ptr::from_ref(v).cast_mut().cast(),
            KernelArg::F32(v) => std::ptr::from_ref(v).cast_mut().cast(),
            KernelArg::TensorMap(v) => std::ptr::from_ref(v).cast_mut().cast(),
        }
    }
}

/// Grid, block and dynamic shared memory of one launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchConfig {
    /// Blocks in x, y, z.
    pub grid: (u32, u32, u32),
    /// Threads per block in x, y, z.
    pub block: (u32, u32, u32),
    /// Dynamic shared memory per block, bytes.
    pub shared_mem_bytes: u32,
}

impl LaunchConfig {
    /// A one-dimensional launch without dynamic shared memory.
    pub fn linear(blocks: u32, threads: u32) -> Self {
        Self {
            grid: (blocks, 1, 1),
            block: (threads, 1, 1),
            shared_mem_bytes: 0,
        }
    }
}

/// Parameters a launch marshals without a heap allocation (every kernel of this crate has fewer;
/// the most are the persistent forward's 56: its own, three tensor maps, the pre-pass's and a nonce).
const INLINE_PARAMETERS: usize = 64;

/// The `void**` array of one launch: on the stack up to `INLINE_PARAMETERS` entries, since
/// it is built on every execute's path; on the heap beyond (an empty `Vec` allocates nothing).
pub struct ParameterArray {
    inline: [*mut c_void; INLINE_PARAMETERS],
    len: usize,
    heap: Vec<*mut c_void>,
}

impl ParameterArray {
    /// One entry per parameter, in signature order.
    pub fn as_mut_slice(&mut self) -> &mut [*mut c_void] {
        if self.heap.is_empty() {
            &mut self.inline[..self.len]
        } else {
            &mut self.heap
        }
    }

    /// The array's first element, as the launch APIs take it.
    pub fn as_mut_ptr(&mut self) -> *mut *mut c_void {
        self.as_mut_slice().as_mut_ptr()
    }
}

/// The parameter array for `args`; it borrows `args`, which must outlive the launch call.
pub fn parameter_array(args: &[KernelArg]) -> ParameterArray {
    parameter_array_of_parts(&[args])
}

/// The parameter array of `parts` in order (a kernel's common parameters, then its tensor maps,
/// without copying them into one list); it borrows `parts`, which must outlive the launch call.
pub fn parameter_array_of_parts(parts: &[&[KernelArg]]) -> ParameterArray {
    let len = parts.iter().map(|part| part.len()).sum();
    let mut params = ParameterArray {
        inline: [std::ptr::null_mut(); INLINE_PARAMETERS],
        len,
        heap: Vec::new(),
    };
    let args = parts.iter().flat_map(|part| part.iter());
    if len <= INLINE_PARAMETERS {
        for (slot, arg) in params.inline.iter_mut().zip(args) {
            *slot = arg.address();
        }
    } else {
        params.heap = args.map(KernelArg::address).collect();
    }
    params
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_parameter_points_at_a_value_of_its_c_size() {
        let args = [
            KernelArg::Ptr(0x1122_3344_5566_7788),
            KernelArg::I32(-2),
            KernelArg::I64(1 << 40),
            KernelArg::F32(0.5),
            KernelArg::TensorMap(std::array::from_fn(|i| 100 + i as u64)),
        ];
        let mut params = parameter_array(&args);
        let params = params.as_mut_slice();
        assert_eq!(params.len(), args.len());
        // SAFETY: each pointer addresses the payload of the matching `args` element, alive here.
        unsafe {
            assert_eq!(*params[0].cast::<u64>(), 0x1122_3344_5566_7788);
            assert_eq!(*params[1].cast::<i32>(), -2);
            assert_eq!(*params[2].cast::<i64>(), 1 << 40);
            assert_eq!(*params[3].cast::<f32>(), 0.5);
            let map = &*params[4].cast::<[u64; 16]>();
            assert_eq!((map[0], map[15]), (100, 115));
        }
        assert_eq!(KernelArg::ptr(0x40), KernelArg::Ptr(0x40));
        assert_eq!(
            args.map(|a| a.c_type()),
            ["ptr", "int", "long long", "float", "CUtensorMap"]
        );
    }

    #[test]
    fn parts_are_concatenated_in_order() {
        let head = [KernelArg::I32(1), KernelArg::I64(2)];
        let tail = [KernelArg::F32(3.0)];
        let mut joined = parameter_array_of_parts(&[&head, &tail]);
        let expected: Vec<_> = head.iter().chain(&tail).map(KernelArg::address).collect();
        assert_eq!(joined.as_mut_slice(), &expected[..]);
    }

    #[test]
    fn long_lists_fall_back_to_the_heap_in_order() {
        let args: Vec<KernelArg> = (0..INLINE_PARAMETERS as i32 + 3)
            .map(KernelArg::I32)
            .collect();
        let mut heap = parameter_array(&args);
        assert_eq!(heap.heap.len(), args.len());
        let mut inline = parameter_array(&args[..INLINE_PARAMETERS]);
        assert!(inline.heap.is_empty());
        let expected: Vec<_> = args.iter().map(KernelArg::address).collect();
        assert_eq!(heap.as_mut_slice(), &expected[..]);
        assert_eq!(inline.as_mut_slice(), &expected[..INLINE_PARAMETERS]);
    }
}
