// LSE pre-pass of the AITER engine's backward (issue 15 item 6; ragged-sdpa.md pitfall 10).
//
// aiter::mha_bwd reads the forward's LSE in its group layout, fp32 (H_q, total_q) indexed by the
// physical token row seqstart_q[b] + i; hipDNN hands the stats in its own layout (dense
// [B, H_q, S_q, 1] with any strides, or token-major ragged with their own offsets). This kernel
// gathers them into the scratch AITER reads, on the caller's stream, after the forward pre-pass
// has written seqstart_q and Lq. A row with no admitted key carries LSE = -inf (ragged-sdpa.md
// §5); AITER recomputes P = exp(s - LSE), which is NaN there (s = -inf too), so such rows are
// sent as +inf: P = 0, and the row contributes nothing to dK and dV and gets dQ = 0, which is the
// project's rule. Padding rows (i >= Lq) are never read.
//
// Same HIP/CUDA-common subset as the forward's kernels (no headers, no warp intrinsics). One
// thread per (batch, query row, head) over a grid-stride loop.

#define RAGGED_BWD_LSE_DENSE 1
#define RAGGED_BWD_LSE_RAGGED 2

__device__ static long long ragged_bwd_lse_load_int(const void* base, int width, long long i)
{
    if(width == 8)
    {
        return ((const long long*)base)[i];
    }
    return (long long)((const int*)base)[i];
}

extern "C" __global__ void ragged_aiter_bwd_lse(
    const int* seqstart_q,         // [B+1] physical token starts of Q (forward pre-pass output)
    const int* len_q,              // [B] Lq(b)
    int batch,
    int s_q_max,
    int heads_q,
    const float* stats,            // hipDNN stats tensor (the forward's LSE, natural log)
    int stats_layout,              // RAGGED_BWD_LSE_*
    long long stride_b,            // dense: strides of [B, H_q, S_q, 1], elements
    long long stride_h,
    long long stride_s,
    const void* stats_offsets,     // ragged: the stats tensor's own aux, [B+1]
    int stats_offset_width,        // 4 or 8
    long long stats_multiplier,
    long long stats_seq_stride,    // ragged: elements between tokens (H_q when packed)
    long long stats_head_stride,   // ragged: elements between heads (1 when packed)
    float* scratch,                // AITER's (H_q, B*S_q_max) LSE
    long long scratch_head_stride) // elements, = B*S_q_max
{
    long long per_batch = (long long)s_q_max * heads_q;
    long long total     = per_batch * batch;
    long long step      = (long long)gridDim.x * blockDim.x;
    float pos_inf       = __int_as_float(0x7f800000);

    for(long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += step)
    {
        long long b   = idx / per_batch;
        long long rem = idx - b * per_batch;
        long long i   = rem / heads_q;
        long long h   = rem - i * heads_q;
        if(i >= (long long)len_q[b])
        {
            continue;
        }
        float value;
        if(stats_layout == RAGGED_BWD_LSE_DENSE)
        {
            value = stats[b * stride_b + h * stride_h + i * stride_s];
        }
        else
        {
            long long base = ragged_bwd_lse_load_int(stats_offsets, stats_offset_width, b) *
                             stats_multiplier;
            value = stats[base + i * stats_seq_stride + h * stats_head_stride];
        }
        if(value == -pos_inf)
        {
            value = pos_inf;
        }
        scratch[h * scratch_head_stride + (long long)seqstart_q[b] + i] = value;
    }
}
