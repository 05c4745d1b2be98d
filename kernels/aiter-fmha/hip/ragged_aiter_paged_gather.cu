// Paged prefill on the AITER engine, step 2 of the gathered route (kernels/core/paged-kv-and-sinks.md
// §2.5, §5.3): copies the keys each sequence reads out of the K and V page pools into contiguous
// buffers in the workspace, K as [kv_start[B], H_kv, D_qk] and V as [kv_start[B], H_kv, D_v], so
// that AITER's group-mode forward runs over them as over any ragged K/V.
//
// Block (x, b) copies keys [x * RAGGED_GATHER_ROWS, ...) of sequence b, every KV head, K then V,
// one 16-bit element per thread and step (any pool strides). Before any pool element is read the
// block checks every entry of both tables that the sequence reads (entries e < ceil(Lkv / ps));
// one outside [0, P) marks the sequence invalid (block x = 0 writes the mark) and nothing of it is
// copied. Every block of the sequence makes the same check, so none of them reads the pool
// through an unchecked id. The finish kernel turns an invalid sequence's rows into quiet NaN.
//
// Same HIP/CUDA-common subset as the pre-pass; __syncthreads and shared memory only.

#define RAGGED_GATHER_ROWS 64

extern "C" __global__ void ragged_aiter_paged_gather(
    const unsigned short* k_pool, // [P_k, H_kv, ps_k, D_qk] with the strides below
    const unsigned short* v_pool, // [P_v, H_kv, ps_v, D_v]
    const int* table_k,           // T_k[b][e] at b * tk_row + e * tk_col
    const int* table_v,
    const int* kv_start,          // [B + 1] from the starts kernel
    int* invalid,                 // [B]
    unsigned short* k_out,        // gathered K
    unsigned short* v_out,        // gathered V
    long long k_page,             // pool strides in elements: page, head, slot, dim
    long long k_head,
    long long k_slot,
    long long k_dim,
    long long v_page,
    long long v_head,
    long long v_slot,
    long long v_dim,
    long long tk_row,             // table strides in elements
    long long tk_col,
    long long tv_row,
    long long tv_col,
    int pages_k,                  // P_k
    int pages_v,                  // P_v
    int page_size_k,              // ps_k
    int page_size_v,              // ps_v
    int heads_kv,
    int d_k,
    int d_v)
{
    __shared__ int bad;
    const long long b     = blockIdx.y;
    const long long start = kv_start[b];
    const long long lkv   = kv_start[b + 1] - start;
    const long long t0    = (long long)blockIdx.x * RAGGED_GATHER_ROWS;
    if(t0 >= lkv)
    {
        return; // uniform over the block
    }
    const int* tk = table_k + b * tk_row;
    const int* tv = table_v + b * tv_row;
    if(threadIdx.x == 0)
    {
        bad = 0;
    }
    __syncthreads();
    const long long nk = (lkv + page_size_k - 1) / page_size_k;
    const long long nv = (lkv + page_size_v - 1) / page_size_v;
    for(long long e = threadIdx.x; e < nk; e += blockDim.x)
    {
        const int p = tk[e * tk_col];
        if(p < 0 || p >= pages_k)
        {
            bad = 1;
        }
    }
    for(long long e = threadIdx.x; e < nv; e += blockDim.x)
    {
        const int p = tv[e * tv_col];
        if(p < 0 || p >= pages_v)
        {
            bad = 1;
        }
    }
    __syncthreads();
    if(bad != 0)
    {
        if(blockIdx.x == 0 && threadIdx.x == 0)
        {
            invalid[b] = 1;
        }
        return;
    }
    const long long rows  = lkv - t0 < RAGGED_GATHER_ROWS ? lkv - t0 : RAGGED_GATHER_ROWS;
    const long long per_k = (long long)heads_kv * d_k;
    const long long per_v = (long long)heads_kv * d_v;
    const long long row   = per_k + per_v;
    for(long long idx = threadIdx.x; idx < rows * row; idx += blockDim.x)
    {
        const long long r = idx / row;
        const long long c = idx - r * row;
        const long long t = t0 + r;
        if(c < per_k)
        {
            const long long h = c / d_k;
            const long long d = c - h * d_k;
            const long long p = tk[(t / page_size_k) * tk_col];
            k_out[(start + t) * per_k + c] =
                k_pool[p * k_page + h * k_head + (t % page_size_k) * k_slot + d * k_dim];
        }
        else
        {
            const long long j = c - per_k;
            const long long h = j / d_v;
            const long long d = j - h * d_v;
            const long long p = tv[(t / page_size_v) * tv_col];
            v_out[(start + t) * per_v + j] =
                v_pool[p * v_page + h * v_head + (t % page_size_v) * v_slot + d * v_dim];
        }
    }
}
