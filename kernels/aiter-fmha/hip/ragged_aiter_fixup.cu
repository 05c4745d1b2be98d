// Fix-up of the AITER engine (ragged-sdpa.md §7.4, execute step 3; pitfalls 4 and 10).
//
// AITER writes LSE as (H_q, total_q) indexed by physical token; hipDNN wants [B, H_q, S_q, 1]
// with declared strides, or a token-major ragged tensor with its own offsets. AITER also gives
// LSE = +inf (and, in some CK builds, NaN) where a batch has no keys, and the project's result
// for a row with no admitted key is O = 0, LSE = -inf (ragged-sdpa.md §5). This kernel copies
// the LSE and owns those rows, so correctness never depends on what AITER does there.
//
// Same HIP/CUDA-common subset as the pre-pass (no headers, no warp intrinsics). One thread per
// (batch, query row, head) over a grid-stride loop; rows i >= Lq(b) are padding and are never
// touched.

#define RAGGED_LSE_NONE 0
#define RAGGED_LSE_DENSE 1
#define RAGGED_LSE_RAGGED 2

__device__ static long long ragged_fixup_load_int(const void* base, int width, long long i)
{
    if(width == 8)
    {
        return ((const long long*)base)[i];
    }
    return (long long)((const int*)base)[i];
}

// True when query row i of a batch admits no key j < lkv under the band (schema.md §6.1):
// key j is excluded iff (right >= 0 and j > i + offset + right) or (left >= 0 and
// j < i + offset - left), offset = 0 (top-left) or lkv - lq (bottom-right).
__device__ static bool ragged_row_is_empty(long long i, long long lq, long long lkv, long long left,
                                           long long right, int bottom_right)
{
    if(lkv <= 0)
    {
        return true;
    }
    long long offset = bottom_right ? lkv - lq : 0;
    long long hi     = lkv - 1;
    long long lo     = 0;
    if(right >= 0 && i + offset + right < hi)
    {
        hi = i + offset + right;
    }
    if(left >= 0 && i + offset - left > lo)
    {
        lo = i + offset - left;
    }
    return lo > hi;
}

extern "C" __global__ void ragged_aiter_fixup(
    const int* seqstart_q,           // [B+1] physical token starts of Q (pre-pass output)
    const int* len_q,                // [B] Lq(b)
    const int* len_kv,               // [B] Lkv(b)
    int batch,
    int s_q_max,
    int heads_q,
    long long mask_left,             // < 0: unbounded
    long long mask_right,            // < 0: unbounded
    int mask_bottom_right,           // 1: diagonal offset Lkv - Lq, 0: top-left
    void* o_ptr,                     // O base pointer
    int o_elem_bytes,                // 2 (fp16/bf16) or 4
    long long o_seq_stride,          // elements
    long long o_head_stride,         // elements
    int d_v,
    const float* lse_scratch,        // AITER's (H_q, B*S_q_max) scratch, or null
    long long scratch_head_stride,   // elements, = B*S_q_max
    float* lse_out,                  // hipDNN stats tensor, or null
    int lse_layout,                  // RAGGED_LSE_*
    long long lse_stride_b,          // dense: strides of [B, H_q, S_q, 1], elements
    long long lse_stride_h,
    long long lse_stride_s,
    const void* lse_offsets,         // ragged: the stats tensor's own aux, [B+1]
    int lse_offset_width,
    long long lse_multiplier,
    long long lse_seq_stride,        // ragged: elements between tokens (H_q when packed)
    long long lse_head_stride)       // ragged: elements between heads (1 when packed)
{
    long long per_batch = (long long)s_q_max * heads_q;
    long long total     = per_batch * batch;
    long long step      = (long long)gridDim.x * blockDim.x;
    float neg_inf       = __int_as_float((int)0xff800000u);

    for(long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += step)
    {
        long long b   = idx / per_batch;
        long long rem = idx - b * per_batch;
        long long i   = rem / heads_q;
        long long h   = rem - i * heads_q;
        long long lq  = len_q[b];
        if(i >= lq)
        {
            continue;
        }
        long long lkv = len_kv[b];
        long long row = (long long)seqstart_q[b] + i;
        bool empty    = ragged_row_is_empty(i, lq, lkv, mask_left, mask_right, mask_bottom_right);

        if(empty)
        {
            long long first = row * o_seq_stride + h * o_head_stride;
            if(o_elem_bytes == 2)
            {
                unsigned short* o = (unsigned short*)o_ptr;
                for(int d = 0; d < d_v; ++d)
                {
                    o[first + d] = 0;
                }
            }
            else
            {
                unsigned int* o = (unsigned int*)o_ptr;
                for(int d = 0; d < d_v; ++d)
                {
                    o[first + d] = 0u;
                }
            }
        }

        if(lse_layout == RAGGED_LSE_NONE)
        {
            continue;
        }
        float value = empty ? neg_inf : lse_scratch[h * scratch_head_stride + row];
        if(lse_layout == RAGGED_LSE_DENSE)
        {
            lse_out[b * lse_stride_b + h * lse_stride_h + i * lse_stride_s] = value;
        }
        else
        {
            long long base =
                ragged_fixup_load_int(lse_offsets, lse_offset_width, b) * lse_multiplier;
            lse_out[base + i * lse_seq_stride + h * lse_head_stride] = value;
        }
    }
}
