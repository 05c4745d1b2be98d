//! Tensor SDK (dense, shallow, ragged), CPU reference SDPA and GPU FMHA engines (issues 3, 6, 7).
