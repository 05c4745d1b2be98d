// Paged prefill on the AITER engine, step 1 of the gathered route (kernels/core/paged-kv-and-sinks.md
// §5.3; kernels/aiter-fmha/shim/README.md, "Paged K/V and sinks").
//
// A paged graph has no ragged offsets: Q and O are packed ([1, H_q, T_q, D], sequence b owns the
// rows after the sequences before it) or padded ([B, H_q, S_q, D], sequence b at rows b * S_q),
// and K and V are page pools. This kernel writes, per sequence, the token starts that the engine's
// ordinary pre-pass then reads as if they were ragged offsets:
//
//   q_start[B + 1]   first Q / O row. Packed: the sum of the clamped Lq before it, so that
//                    q_start[b + 1] - q_start[b] is Lq(b) clamped into the rows left (the extent
//                    is the logical length; no seq_len_q goes to AITER). Padded: b * S_q.
//   kv_start[B + 1]  first row of the sequence in the gathered K and V: the sum over the earlier
//                    sequences with query rows of clamp(Lkv, 0, max_seq_len_kv). A sequence
//                    without query rows gathers nothing.
//   invalid[B]       cleared; the gather kernel sets it for a sequence with a bad page id.
//
// Written in the subset HIP and CUDA share (no headers, no warp intrinsics). Launch: exactly one
// block of RAGGED_PAGED_STARTS_THREADS threads; the batch is walked in chunks of that many
// sequences, each a Hillis-Steele scan in shared memory, with running totals between chunks.

#define RAGGED_PAGED_STARTS_THREADS 256

__device__ static long long ragged_paged_length(const void* base, int width, long long i)
{
    if(width == 8)
    {
        return ((const long long*)base)[i];
    }
    return (long long)((const int*)base)[i];
}

__device__ static long long ragged_paged_clamp(long long v, long long hi)
{
    return v < 0 ? 0 : (v > hi ? hi : v);
}

// Inclusive sum of x over the block; `total` receives the sum of the whole block.
__device__ static long long ragged_paged_scan(long long x, long long* scan, long long* total)
{
    const int t = (int)threadIdx.x;
    scan[t]     = x;
    __syncthreads();
    for(int off = 1; off < RAGGED_PAGED_STARTS_THREADS; off <<= 1)
    {
        const long long y = t >= off ? scan[t - off] : 0;
        __syncthreads();
        scan[t] += y;
        __syncthreads();
    }
    const long long inclusive = scan[t];
    *total                    = scan[RAGGED_PAGED_STARTS_THREADS - 1];
    __syncthreads(); // every thread has read scan[] before the next call writes it
    return inclusive;
}

extern "C" __global__ void ragged_aiter_paged_starts(
    const void* seq_len_q,  // [B] Lq, int32 or int64
    int seq_len_q_width,    // 4 or 8
    const void* seq_len_kv, // [B] Lkv, int32 or int64
    int seq_len_kv_width,   // 4 or 8
    int batch,
    long long q_rows,       // T_q (packed) or S_q (padded)
    int packed,             // 1: packed Q/O, 0: padded
    long long max_kv,       // max_seq_len_kv
    int* q_start,           // [B + 1] out
    int* kv_start,          // [B + 1] out
    int* invalid)           // [B] out, cleared
{
    __shared__ long long scan[RAGGED_PAGED_STARTS_THREADS];
    long long base_q  = 0;
    long long base_kv = 0;
    for(long long c0 = 0; c0 <= batch; c0 += RAGGED_PAGED_STARTS_THREADS)
    {
        const long long b = c0 + (long long)threadIdx.x;
        const bool seq    = b < batch;
        const long long a =
            seq ? ragged_paged_clamp(ragged_paged_length(seq_len_q, seq_len_q_width, b), q_rows)
                : 0;
        long long chunk_q;
        const long long before = base_q + ragged_paged_scan(a, scan, &chunk_q) - a;
        long long row0, len;
        if(packed)
        {
            row0 = before < q_rows ? before : q_rows;
            len  = a < q_rows - row0 ? a : q_rows - row0;
        }
        else
        {
            row0 = b * q_rows;
            len  = a;
        }
        const long long g =
            seq && len > 0
                ? ragged_paged_clamp(ragged_paged_length(seq_len_kv, seq_len_kv_width, b), max_kv)
                : 0;
        long long chunk_kv;
        const long long g_before = base_kv + ragged_paged_scan(g, scan, &chunk_kv) - g;
        if(b <= batch)
        {
            q_start[b]  = (int)row0;
            kv_start[b] = (int)g_before;
        }
        if(seq)
        {
            invalid[b] = 0;
        }
        base_q += chunk_q;
        base_kv += chunk_kv;
    }
}
