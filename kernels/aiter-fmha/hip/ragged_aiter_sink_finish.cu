// Finish of the AITER engine's paged and sink routes (kernels/core/paged-kv-and-sinks.md §5.3, §6),
// after the fix-up, on the same stream. Per (sequence b, query row i < Lq(b), query head h):
//
//   - a sequence the gather kernel marked invalid (a page id outside its pool) gets quiet NaN in
//     every element of its O rows and in its LSE rows;
//   - with sinks, the row's O and natural-log LSE over its admitted keys (what AITER and the
//     fix-up wrote) become the sink-inclusive ones of §6.2-§6.3:
//         LSE' = ln(e^LSE + e^s_h),   O' = O * e^(LSE - LSE'),
//     with §6.4's edge cases: a row with no admitted key (LSE = -inf) gets LSE' = s_h and keeps
//     O = 0; s_h = -inf changes nothing; s_h = +inf gives O = 0, LSE = +inf; NaN propagates.
//     O is rounded once more (to nearest even) in its own type.
//
// The LSE is addressed as the fix-up addresses the stats tensor (dense [B, H_q, S_q] strides, or
// ragged with its own offsets); on a graph without stats the engine points it at an f32 LSE in
// the workspace, which the fix-up filled. Padding rows (i >= Lq(b)) are never touched.
//
// Same HIP/CUDA-common subset as the fix-up (exp and log through the compiler builtins, which
// need no math header): one thread per (b, i, h) over a grid-stride loop.

#define RAGGED_FINISH_LSE_NONE 0
#define RAGGED_FINISH_LSE_DENSE 1
#define RAGGED_FINISH_LSE_RAGGED 2

__device__ static long long ragged_finish_load_int(const void* base, int width, long long i)
{
    if(width == 8)
    {
        return ((const long long*)base)[i];
    }
    return (long long)((const int*)base)[i];
}

__device__ static float ragged_half_to_float(unsigned int h)
{
    const unsigned int sign = (h & 0x8000u) << 16;
    const unsigned int e    = (h >> 10) & 0x1fu;
    const unsigned int m    = h & 0x3ffu;
    if(e == 0)
    {
        // Zero or subnormal: m * 2^-24, exact in float.
        const float v = (float)m * 5.9604644775390625e-8f;
        return __uint_as_float(__float_as_uint(v) | sign);
    }
    if(e == 31)
    {
        return __uint_as_float(sign | 0x7f800000u | (m << 13));
    }
    return __uint_as_float(sign | ((e + 112u) << 23) | (m << 13));
}

// Round to nearest, ties to even, of the `shift` low bits dropped from `value`.
__device__ static unsigned int ragged_round_shift(unsigned int value, unsigned int shift)
{
    const unsigned int kept = value >> shift;
    const unsigned int rest = value & ((1u << shift) - 1u);
    const unsigned int half = 1u << (shift - 1u);
    return kept + ((rest > half || (rest == half && (kept & 1u) != 0)) ? 1u : 0u);
}

__device__ static unsigned int ragged_float_to_half(float f)
{
    const unsigned int x    = __float_as_uint(f);
    const unsigned int sign = (x >> 16) & 0x8000u;
    const unsigned int ax   = x & 0x7fffffffu;
    if(ax > 0x7f800000u)
    {
        return sign | 0x7e00u; // quiet NaN
    }
    if(ax >= 0x477ff000u)
    {
        return sign | 0x7c00u; // 65520 and above round to infinity
    }
    const unsigned int e = ax >> 23;
    if(e < 113u)
    {
        // Below 2^-14: a half subnormal, units of 2^-24 (a carry into 0x400 is the smallest
        // normal, which is the right encoding).
        if(e < 102u)
        {
            return sign; // below 2^-25: rounds to zero
        }
        const unsigned int m = (ax & 0x7fffffu) | 0x800000u;
        return sign | ragged_round_shift(m, 126u - e);
    }
    // Normal: rebias the exponent and keep ten mantissa bits; a carry may reach the exponent.
    return sign | ragged_round_shift(((e - 112u) << 23) | (ax & 0x7fffffu), 13u);
}

__device__ static unsigned int ragged_float_to_bf16(float f)
{
    const unsigned int x = __float_as_uint(f);
    if((x & 0x7fffffffu) > 0x7f800000u)
    {
        return (x >> 16) | 0x40u; // quiet NaN, sign kept
    }
    return (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
}

extern "C" __global__ void ragged_aiter_sink_finish(
    const int* seqstart_q,         // [B+1] physical token starts of Q and O (pre-pass output)
    const int* len_q,              // [B] Lq(b) (pre-pass output)
    const int* invalid,            // [B] from the gather kernel, or null (no page tables)
    int batch,
    int s_q_max,
    int heads_q,
    const float* sinks,            // one logit per query head, or null
    long long sink_stride,         // elements between heads
    unsigned short* o_ptr,         // O, fp16 or bf16
    int o_bf16,                    // 1: bfloat16, 0: half
    long long o_seq_stride,        // elements
    long long o_head_stride,       // elements
    int d_v,
    float* lse,                    // the LSE the fix-up wrote, or null
    int lse_layout,                // RAGGED_FINISH_LSE_*
    long long lse_stride_b,        // dense: strides of [B, H_q, S_q, 1], elements
    long long lse_stride_h,
    long long lse_stride_s,
    const void* lse_offsets,       // ragged: its aux, [B+1]
    int lse_offset_width,
    long long lse_multiplier,
    long long lse_seq_stride,      // ragged: elements between tokens
    long long lse_head_stride)     // ragged: elements between heads
{
    const long long per_batch = (long long)s_q_max * heads_q;
    const long long total     = per_batch * batch;
    const long long step      = (long long)gridDim.x * blockDim.x;
    const float nan_f         = __uint_as_float(0x7fc00000u);
    const float inf_f         = __uint_as_float(0x7f800000u);
    const unsigned short nan_o = o_bf16 ? (unsigned short)0x7fc0u : (unsigned short)0x7e00u;

    for(long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += step)
    {
        const long long b   = idx / per_batch;
        const long long rem = idx - b * per_batch;
        const long long i   = rem / heads_q;
        const long long h   = rem - i * heads_q;
        if(i >= len_q[b])
        {
            continue;
        }
        const bool bad = invalid != 0 && invalid[b] != 0;
        if(!bad && sinks == 0)
        {
            continue;
        }
        unsigned short* o = o_ptr + ((long long)seqstart_q[b] + i) * o_seq_stride + h * o_head_stride;
        float* lp         = 0;
        if(lse_layout == RAGGED_FINISH_LSE_DENSE)
        {
            lp = lse + b * lse_stride_b + h * lse_stride_h + i * lse_stride_s;
        }
        else if(lse_layout == RAGGED_FINISH_LSE_RAGGED)
        {
            lp = lse + ragged_finish_load_int(lse_offsets, lse_offset_width, b) * lse_multiplier +
                 i * lse_seq_stride + h * lse_head_stride;
        }
        if(bad)
        {
            for(int d = 0; d < d_v; ++d)
            {
                o[d] = nan_o;
            }
            if(lp != 0)
            {
                *lp = nan_f;
            }
            continue;
        }
        if(lp == 0)
        {
            continue; // sinks always come with an LSE (the engine's plan); nothing to fold
        }
        const float l = *lp;
        const float s = sinks[h * sink_stride];
        float out, factor;
        if(l != l || s != s)
        {
            out    = nan_f;
            factor = nan_f;
        }
        else if(s == inf_f)
        {
            out    = inf_f;
            factor = 0.f;
        }
        else if(s == -inf_f)
        {
            out    = l;
            factor = 1.f;
        }
        else if(l == -inf_f)
        {
            out    = s;
            factor = 0.f;
        }
        else
        {
            const float m = l > s ? l : s;
            out           = m + __builtin_logf(__builtin_expf(l - m) + __builtin_expf(s - m));
            factor        = __builtin_expf(l - out);
        }
        for(int d = 0; d < d_v; ++d)
        {
            const float x = o_bf16 ? __uint_as_float((unsigned int)o[d] << 16)
                                   : ragged_half_to_float(o[d]);
            const float y = x * factor;
            o[d] = (unsigned short)(o_bf16 ? ragged_float_to_bf16(y) : ragged_float_to_half(y));
        }
        *lp = out;
    }
}
