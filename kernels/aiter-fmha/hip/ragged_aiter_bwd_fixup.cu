// Fix-up of the AITER engine's backward (issue 15 item 6): the zero-length batches.
//
// The project's rule: a batch with Lkv(b) = 0 gets dQ = 0 for its rows, one with Lq(b) = 0 gets
// dK = dV = 0 for its key rows. AITER's group mode skips a batch whose length is 0 (its tiles are
// empty), so it may leave those rows as they were; zero-length sequences have broken kernels
// before (ragged-sdpa.md pitfalls 4 and 5). This kernel owns them, after aiter::mha_bwd on the
// same stream. Padding rows (i >= Lq, j >= Lkv) are never written.
//
// Same HIP/CUDA-common subset as the forward's kernels. One thread per (batch, row, head) over a
// grid-stride loop covering the query side (dQ) and then the key side (dK, dV); 16-bit elements
// (fp16/bf16: the engine takes nothing else).

__device__ static void ragged_bwd_zero_row(unsigned short* base, long long first, int d)
{
    for(int k = 0; k < d; ++k)
    {
        base[first + k] = 0;
    }
}

extern "C" __global__ void ragged_aiter_bwd_fixup(
    const int* seqstart_q, // [B+1] physical token starts of Q (forward pre-pass output)
    const int* seqstart_k, // [B+1] physical token starts of K
    const int* len_q,      // [B] Lq(b)
    const int* len_kv,     // [B] Lkv(b)
    int batch,
    int s_q_max,
    int s_kv_max,
    int heads_q,
    int heads_kv,
    int d_qk,
    int d_v,
    void* dq, long long dq_seq_stride, long long dq_head_stride,
    void* dk, long long dk_seq_stride, long long dk_head_stride,
    void* dv, long long dv_seq_stride, long long dv_head_stride)
{
    long long q_side = (long long)batch * s_q_max * heads_q;
    long long total  = q_side + (long long)batch * s_kv_max * heads_kv;
    long long step   = (long long)gridDim.x * blockDim.x;

    for(long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x; idx < total; idx += step)
    {
        if(idx < q_side)
        {
            long long per_batch = (long long)s_q_max * heads_q;
            long long b         = idx / per_batch;
            long long rem       = idx - b * per_batch;
            long long i         = rem / heads_q;
            long long h         = rem - i * heads_q;
            if(len_kv[b] != 0 || i >= (long long)len_q[b])
            {
                continue;
            }
            long long row = (long long)seqstart_q[b] + i;
            ragged_bwd_zero_row((unsigned short*)dq, row * dq_seq_stride + h * dq_head_stride, d_qk);
        }
        else
        {
            long long k_idx     = idx - q_side;
            long long per_batch = (long long)s_kv_max * heads_kv;
            long long b         = k_idx / per_batch;
            long long rem       = k_idx - b * per_batch;
            long long j         = rem / heads_kv;
            long long h         = rem - j * heads_kv;
            if(len_q[b] != 0 || j >= (long long)len_kv[b])
            {
                continue;
            }
            long long row = (long long)seqstart_k[b] + j;
            ragged_bwd_zero_row((unsigned short*)dk, row * dk_seq_stride + h * dk_head_stride, d_qk);
            ragged_bwd_zero_row((unsigned short*)dv, row * dv_seq_stride + h * dv_head_stride, d_v);
        }
    }
}
