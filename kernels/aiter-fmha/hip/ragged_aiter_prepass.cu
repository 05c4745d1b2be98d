// Pre-pass of the AITER engine (ragged-sdpa.md §7.4, execute step 1).
//
// AITER's group mode wants int32 *token* starts and, for padded batches, cumulative *logical*
// lengths; hipDNN hands us element offsets (int32 or int64, times a multiplier) and optional
// per-batch lengths. Reading them on the host would force a stream synchronisation, so this
// kernel converts them on the device, in the caller's stream.
//
// Written in the subset that HIP (hipRTC) and CUDA (NVRTC) share: no headers, no warp
// intrinsics (the wavefront is 64 wide on AMD, 32 on NVIDIA), only __syncthreads, shared
// memory and atomicOr. The same source is compiled by hipRTC at run time on AMD and by NVRTC
// in bench/aiter/check_device_kernels.py, which checks it against a NumPy model.
//
// Launch: exactly one block of RAGGED_PREPASS_THREADS threads. Each thread owns a contiguous
// chunk of batches; the cumulative lengths are a chunk-sum scan in shared memory.

#define RAGGED_PREPASS_THREADS 256

// Bits of *status. Offsets are a caller precondition for GPU engines (ragged-sdpa.md §3); the
// bits let a debug build or a conformance run see which one was broken, without a host sync.
#define RAGGED_STATUS_FIRST_OFFSET_NONZERO 1u
#define RAGGED_STATUS_OFFSETS_DECREASE 2u
#define RAGGED_STATUS_PARTIAL_ROW 4u
#define RAGGED_STATUS_EXTENT_OVER_MAX 8u
#define RAGGED_STATUS_OFFSET_OVERFLOW 16u
#define RAGGED_STATUS_SEQ_LEN_CLAMPED 32u

#define RAGGED_INT32_MAX 2147483647LL

__device__ static long long ragged_load_int(const void* base, int width, long long i)
{
    if(width == 8)
    {
        return ((const long long*)base)[i];
    }
    return (long long)((const int*)base)[i];
}

// Element offset of batch boundary b, in int64 (pitfall 6: token × stride overflows int32).
__device__ static long long ragged_element_offset(
    const void* offsets, int width, long long multiplier, long long b, unsigned int* flags)
{
    long long stored = ragged_load_int(offsets, width, b);
    if(stored < 0)
    {
        *flags |= RAGGED_STATUS_OFFSETS_DECREASE;
        return 0;
    }
    if(stored != 0 && multiplier > 9223372036854775807LL / stored)
    {
        *flags |= RAGGED_STATUS_OFFSET_OVERFLOW;
        return 9223372036854775807LL;
    }
    return stored * multiplier;
}

// Token start of boundary b, clamped into int32 (the engine declines graphs that could need more).
__device__ static int ragged_token_start(long long element_offset, long long seq_stride,
                                         unsigned int* flags)
{
    if(element_offset % seq_stride != 0)
    {
        *flags |= RAGGED_STATUS_PARTIAL_ROW;
    }
    long long token = element_offset / seq_stride;
    if(token > RAGGED_INT32_MAX)
    {
        *flags |= RAGGED_STATUS_OFFSET_OVERFLOW;
        token = RAGGED_INT32_MAX;
    }
    return (int)token;
}

// One side (Q or K) for batch b: writes the physical token start, returns the logical length.
__device__ static int ragged_side(const void* offsets, int offset_width, long long multiplier,
                                  long long seq_stride, long long s_max,
                                  const void* seq_lens, int seq_len_width, int b, int batch,
                                  int* seqstart, int* lens, unsigned int* flags)
{
    long long lo = ragged_element_offset(offsets, offset_width, multiplier, b, flags);
    long long hi = ragged_element_offset(offsets, offset_width, multiplier, b + 1, flags);
    if(b == 0 && lo != 0)
    {
        *flags |= RAGGED_STATUS_FIRST_OFFSET_NONZERO;
    }
    if(hi < lo)
    {
        *flags |= RAGGED_STATUS_OFFSETS_DECREASE;
    }
    int start = ragged_token_start(lo, seq_stride, flags);
    int end   = ragged_token_start(hi, seq_stride, flags);
    seqstart[b] = start;
    if(b == batch - 1)
    {
        seqstart[batch] = end;
    }
    long long extent = (long long)end - (long long)start;
    if(extent < 0)
    {
        extent = 0;
    }
    if(extent > s_max)
    {
        *flags |= RAGGED_STATUS_EXTENT_OVER_MAX;
    }
    long long len = extent;
    if(seq_len_width != 0)
    {
        long long wanted = ragged_load_int(seq_lens, seq_len_width, b);
        len = wanted < 0 ? 0 : (wanted > extent ? extent : wanted);
        if(len != wanted)
        {
            *flags |= RAGGED_STATUS_SEQ_LEN_CLAMPED;
        }
    }
    lens[b] = (int)len;
    return (int)len;
}

// Exclusive scan of the per-thread chunk sums, in place, by the whole block (Hillis-Steele:
// log2(256) = 8 steps; B is at most a few thousand, so a work-efficient scan buys nothing).
__device__ static void ragged_block_exclusive_scan(long long* sums)
{
    unsigned int t = threadIdx.x;
    for(unsigned int step = 1; step < RAGGED_PREPASS_THREADS; step *= 2)
    {
        long long add = t >= step ? sums[t - step] : 0;
        __syncthreads();
        sums[t] += add;
        __syncthreads();
    }
    long long exclusive = t == 0 ? 0 : sums[t - 1];
    __syncthreads();
    sums[t] = exclusive;
    __syncthreads();
}

extern "C" __global__ void ragged_aiter_prepass(
    const void* q_offsets,   // Q's ragged_offset aux, [B+1]
    int q_offset_width,      // 4 or 8 bytes
    long long q_multiplier,  // ragged_offset_multiplier of Q
    long long q_seq_stride,  // seqStride of Q, elements
    long long q_s_max,       // S_q_max from Q's dims
    const void* k_offsets,   // K's ragged_offset aux, [B+1]
    int k_offset_width,
    long long k_multiplier,
    long long k_seq_stride,
    long long k_s_max,
    const void* seq_len_q,   // [B] or null
    int seq_len_q_width,     // 0 when absent, else 4 or 8
    const void* seq_len_kv,  // [B] or null
    int seq_len_kv_width,
    int batch,
    int* seqstart_q,         // out [B+1]: physical token starts of Q
    int* seqstart_k,         // out [B+1]: physical token starts of K
    int* len_q,              // out [B]: Lq(b), clamped
    int* len_kv,             // out [B]: Lkv(b), clamped
    int* cu_seqlen_q,        // out [B+1] cumulative Lq, or null
    int* cu_seqlen_k,        // out [B+1] cumulative Lkv, or null
    unsigned int* status)    // out: RAGGED_STATUS_* bits, OR-ed in
{
    __shared__ long long sum_q[RAGGED_PREPASS_THREADS];
    __shared__ long long sum_k[RAGGED_PREPASS_THREADS];

    int t     = (int)threadIdx.x;
    int chunk = (batch + RAGGED_PREPASS_THREADS - 1) / RAGGED_PREPASS_THREADS;
    int first = t * chunk;
    int last  = first + chunk < batch ? first + chunk : batch;

    unsigned int flags = 0;
    long long local_q  = 0;
    long long local_k  = 0;
    for(int b = first; b < last; ++b)
    {
        local_q += ragged_side(q_offsets, q_offset_width, q_multiplier, q_seq_stride, q_s_max,
                               seq_len_q, seq_len_q_width, b, batch, seqstart_q, len_q, &flags);
        local_k += ragged_side(k_offsets, k_offset_width, k_multiplier, k_seq_stride, k_s_max,
                               seq_len_kv, seq_len_kv_width, b, batch, seqstart_k, len_kv, &flags);
    }
    if(flags != 0)
    {
        atomicOr(status, flags);
    }

    sum_q[t] = local_q;
    sum_k[t] = local_k;
    __syncthreads();
    ragged_block_exclusive_scan(sum_q);
    ragged_block_exclusive_scan(sum_k);

    long long run_q = sum_q[t];
    long long run_k = sum_k[t];
    for(int b = first; b < last; ++b)
    {
        if(cu_seqlen_q != 0)
        {
            cu_seqlen_q[b] = (int)run_q;
        }
        if(cu_seqlen_k != 0)
        {
            cu_seqlen_k[b] = (int)run_k;
        }
        run_q += len_q[b];
        run_k += len_kv[b];
        if(b == batch - 1)
        {
            if(cu_seqlen_q != 0)
            {
                cu_seqlen_q[batch] = (int)run_q;
            }
            if(cu_seqlen_k != 0)
            {
                cu_seqlen_k[batch] = (int)run_k;
            }
        }
    }
}
