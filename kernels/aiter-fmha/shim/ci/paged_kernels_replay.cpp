// Host replay of the AITER engine's paged and sink kernels (kernels/aiter-fmha/hip/
// ragged_aiter_paged_starts.cu, ragged_aiter_paged_gather.cu, ragged_aiter_sink_finish.cu). The
// fake HIP runtime records launches but executes no kernel, and no AMD GPU is at hand, so the
// kernel sources themselves are compiled here as host C++: each block runs its threads as
// std::threads, __syncthreads is a std::barrier and __shared__ variables are statics (one block
// runs at a time). The expected values are computed independently from paged-kv-and-sinks.md
// (§2.5 addressing, §5.3 clamping and invalid ids, §6 sinks), in double precision.
//
// Usage: paged_kernels_replay (exit status 0 when every check holds)
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace replay {
struct Dim
{
    unsigned x = 0, y = 0, z = 0;
};
thread_local Dim threadIdx, blockIdx;
Dim blockDim, gridDim;
thread_local std::barrier<>* block_barrier = nullptr;

inline void syncthreads() { block_barrier->arrive_and_wait(); }

// Runs `kernel` over a (gx, gy) grid of `threads`-thread blocks, one block at a time.
inline void launch(unsigned gx, unsigned gy, unsigned threads, const std::function<void()>& kernel)
{
    gridDim  = {gx, gy, 1};
    blockDim = {threads, 1, 1};
    for(unsigned y = 0; y < gy; ++y)
        for(unsigned x = 0; x < gx; ++x)
        {
            std::barrier<> bar(threads);
            std::vector<std::thread> pool;
            for(unsigned t = 0; t < threads; ++t)
                pool.emplace_back([&, t] {
                    threadIdx     = {t, 0, 0};
                    blockIdx      = {x, y, 0};
                    block_barrier = &bar;
                    kernel();
                });
            for(auto& th : pool)
                th.join();
        }
}
} // namespace replay

using replay::blockDim;
using replay::blockIdx;
using replay::gridDim;
using replay::threadIdx;
#define __global__
#define __device__
#define __shared__ static
#define __syncthreads() replay::syncthreads()
static inline float __uint_as_float(unsigned int u)
{
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
static inline unsigned int __float_as_uint(float f)
{
    unsigned int u;
    std::memcpy(&u, &f, 4);
    return u;
}

#include "ragged_aiter_paged_starts.cu"
#include "ragged_aiter_paged_gather.cu"
#include "ragged_aiter_sink_finish.cu"

namespace {

int g_failures = 0;

void expect(bool ok, const std::string& what)
{
    if(!ok && g_failures++ < 20)
        std::printf("  FAIL %s\n", what.c_str());
}

constexpr int B = 5, HKV = 2, DK = 8, DV = 16, PSK = 8, PSV = 16, MP_K = 8, MP_V = 4;
constexpr int PAGES_K = 12, PAGES_V = 6, MAX_KV = 48, T_Q = 24;

// Sequence 0's Lkv is clamped to max_kv, sequence 1 has no query rows (gathers nothing),
// sequence 2 no keys, sequence 3 reads a page id outside V's pool, sequence 4's Lq is cut to the
// rows left in the packed Q.
const int kLq[B]  = {5, 0, 7, 3, 40};
const int kLkv[B] = {60, 9, 0, 40, 17};

void check_starts_and_gather()
{
    std::printf("case starts_and_gather (B %d, ps %d/%d, max_seq_len_kv %d)\n", B, PSK, PSV, MAX_KV);
    std::mt19937 rng(7);
    // K pool token-major [P, H, ps, D] strides {ps*H*D, D, H*D, 1}; V pool head-major
    // {H*ps*D, ps*D, D, 1}: the kernel takes any strides.
    const long long k_page = PSK * HKV * DK, k_head = DK, k_slot = HKV * DK, k_dim = 1;
    const long long v_page = HKV * PSV * DV, v_head = PSV * DV, v_slot = DV, v_dim = 1;
    std::vector<unsigned short> kpool(PAGES_K * k_page), vpool(PAGES_V * v_page);
    for(auto& x : kpool)
        x = (unsigned short)rng();
    for(auto& x : vpool)
        x = (unsigned short)rng();
    // Tables with a row stride wider than MP (any strides).
    const long long tk_row = MP_K + 3, tv_row = MP_V + 1;
    std::vector<int> tk(B * tk_row, -7), tv(B * tv_row, 99);
    for(int b = 0; b < B; ++b)
    {
        for(int e = 0; e < MP_K; ++e)
            tk[b * tk_row + e] = (int)(rng() % PAGES_K);
        for(int e = 0; e < MP_V; ++e)
            tv[b * tv_row + e] = (int)(rng() % PAGES_V);
    }
    tv[3 * tv_row + 2] = PAGES_V; // read by sequence 3 (Lkv 40 reads entries 0..2)
    tk[2 * tk_row + 0] = -1;      // sequence 2 reads nothing: never checked
    tv[1 * tv_row + 0] = -1;      // sequence 1 has no rows: never checked

    std::vector<int> q_start(B + 1, -5), kv_start(B + 1, -5), invalid(B, 42);
    replay::launch(1, 1, RAGGED_PAGED_STARTS_THREADS, [&] {
        ragged_aiter_paged_starts(kLq, 4, kLkv, 4, B, T_Q, 1, MAX_KV, q_start.data(),
                                  kv_start.data(), invalid.data());
    });
    // Expected, per §5.3: Lq clamped into the rows left, Lkv into [0, max_kv], only sequences
    // with rows gathering.
    long long row = 0, key = 0;
    for(int b = 0; b <= B; ++b)
    {
        expect(q_start[b] == row, "q_start[" + std::to_string(b) + "] = " +
                                      std::to_string(q_start[b]) + ", want " + std::to_string(row));
        expect(kv_start[b] == key, "kv_start[" + std::to_string(b) + "] = " +
                                       std::to_string(kv_start[b]) + ", want " + std::to_string(key));
        if(b == B)
            break;
        expect(invalid[b] == 0, "invalid cleared");
        const long long lq = std::min<long long>(std::max(kLq[b], 0), T_Q - row);
        row += lq;
        key += lq > 0 ? std::min(std::max(kLkv[b], 0), MAX_KV) : 0;
    }
    std::printf("  q_start:");
    for(int v : q_start)
        std::printf(" %d", v);
    std::printf("; kv_start:");
    for(int v : kv_start)
        std::printf(" %d", v);
    std::printf("\n");

    const long long total = kv_start[B];
    const unsigned short sentinel = 0xdead;
    std::vector<unsigned short> kout(total * HKV * DK, sentinel), vout(total * HKV * DV, sentinel);
    replay::launch((MAX_KV + RAGGED_GATHER_ROWS - 1) / RAGGED_GATHER_ROWS, B, 64, [&] {
        ragged_aiter_paged_gather(kpool.data(), vpool.data(), tk.data(), tv.data(), kv_start.data(),
                                  invalid.data(), kout.data(), vout.data(), k_page, k_head, k_slot,
                                  k_dim, v_page, v_head, v_slot, v_dim, tk_row, 1, tv_row, 1,
                                  PAGES_K, PAGES_V, PSK, PSV, HKV, DK, DV);
    });
    for(int b = 0; b < B; ++b)
        expect(invalid[b] == (b == 3 ? 1 : 0), "invalid[" + std::to_string(b) + "]");
    long long checked = 0;
    for(int b = 0; b < B; ++b)
        for(long long j = 0; j < kv_start[b + 1] - kv_start[b]; ++j)
            for(int g = 0; g < HKV; ++g)
            {
                const long long r = kv_start[b] + j;
                for(int d = 0; d < DK; ++d)
                {
                    const unsigned short got = kout[(r * HKV + g) * DK + d];
                    const unsigned short want =
                        b == 3 ? sentinel
                               : kpool[tk[b * tk_row + j / PSK] * k_page + g * k_head +
                                       (j % PSK) * k_slot + d];
                    expect(got == want, "K b " + std::to_string(b) + " j " + std::to_string(j));
                    ++checked;
                }
                for(int d = 0; d < DV; ++d)
                {
                    const unsigned short got = vout[(r * HKV + g) * DV + d];
                    const unsigned short want =
                        b == 3 ? sentinel
                               : vpool[tv[b * tv_row + j / PSV] * v_page + g * v_head +
                                       (j % PSV) * v_slot + d];
                    expect(got == want, "V b " + std::to_string(b) + " j " + std::to_string(j));
                    ++checked;
                }
            }
    std::printf("  gathered %lld keys, %lld elements checked; invalid:", total, checked);
    for(int v : invalid)
        std::printf(" %d", v);
    std::printf("\n");
}

unsigned short half_bits(float f)
{
    const _Float16 h = (_Float16)f;
    unsigned short u;
    std::memcpy(&u, &h, 2);
    return u;
}

void check_conversions()
{
    std::printf("case conversions (half <-> float, bf16)\n");
    int bad = 0;
    for(unsigned h = 0; h < 65536; ++h)
    {
        const float f = ragged_half_to_float(h);
        const _Float16 ref = [&] {
            _Float16 r;
            unsigned short u = (unsigned short)h;
            std::memcpy(&r, &u, 2);
            return r;
        }();
        const bool nan = std::isnan(f);
        if(nan != std::isnan((float)ref) || (!nan && f != (float)ref))
            ++bad;
        const unsigned back = ragged_float_to_half(f);
        if(!nan && back != h)
            ++bad;
        if(nan && back != ((h & 0x8000u) | 0x7e00u))
            ++bad;
    }
    std::mt19937 rng(11);
    for(int n = 0; n < 2000000; ++n)
    {
        const unsigned u = (unsigned)rng();
        const float f    = __uint_as_float(u);
        if(std::isnan(f))
            continue;
        if(ragged_float_to_half(f) != half_bits(f))
            ++bad;
    }
    expect(bad == 0, std::to_string(bad) + " half conversions differ from the compiler's");
    expect(ragged_float_to_bf16(1.0f + 1.0f / 256.0f) == 0x3f80u, "bf16 tie to even (down)");
    expect(ragged_float_to_bf16(1.0f + 3.0f / 256.0f) == 0x3f82u, "bf16 tie to even (up)");
    std::printf("  65536 half values round-tripped, 2000000 random floats against _Float16\n");
}

// One finish run over a packed problem: B 3 sequences of Lq {2, 0, 3} in 6 rows, H_q 4, D_v 8,
// an LSE [1, H_q, T_q, 1] addressed through the starts (ragged layout), sequence 2 invalid.
void check_finish(bool bf16)
{
    std::printf("case finish_%s\n", bf16 ? "bf16" : "fp16");
    constexpr int FB = 3, FT = 6, FH = 4, FD = 8;
    const int seqstart[FB + 1] = {0, 2, 2, 5};
    const int lens[FB]         = {2, 0, 3};
    const int inval[FB]        = {0, 0, 1};
    const float inf            = INFINITY;
    // Per head: an ordinary sink, -inf, +inf, NaN.
    const float sinks[FH * 2] = {0.75f, 0, -inf, 0, inf, 0, NAN, 0};
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> uni(-2.f, 2.f);
    std::vector<unsigned short> o(FT * FH * FD);
    std::vector<float> lse(FT * FH);
    for(auto& x : o)
        x = bf16 ? (unsigned short)ragged_float_to_bf16(uni(rng))
                 : (unsigned short)ragged_float_to_half(uni(rng));
    for(auto& x : lse)
        x = uni(rng);
    lse[1 * FH + 0] = -inf; // row 1, head 0: no admitted key, O row 0
    for(int d = 0; d < FD; ++d)
        o[(1 * FH + 0) * FD + d] = 0;
    o[(5 * FH + 1) * FD] = 0x1234; // row 5 belongs to no sequence: untouched
    lse[5 * FH + 1]     = 9.f;
    const std::vector<unsigned short> o0 = o;
    const std::vector<float> lse0        = lse;
    const int offsets[FB + 1]            = {0, 2, 2, 5};
    replay::launch(1, 1, 32, [&] {
        ragged_aiter_sink_finish(seqstart, lens, inval, FB, FT, FH, sinks, 2, o.data(), bf16 ? 1 : 0,
                                 FH * FD, FD, FD, lse.data(), RAGGED_FINISH_LSE_RAGGED, 0, 0, 0,
                                 offsets, 4, FH, FH, 1);
    });
    auto to_f = [&](unsigned short x) {
        return bf16 ? __uint_as_float((unsigned)x << 16) : ragged_half_to_float(x);
    };
    for(int r = 0; r < FT; ++r)
        for(int h = 0; h < FH; ++h)
        {
            const int b        = r < 2 ? 0 : (r < 5 ? 2 : -1);
            const float l      = lse0[r * FH + h];
            const std::string at = "row " + std::to_string(r) + " head " + std::to_string(h);
            if(b < 0)
            {
                expect(lse[r * FH + h] == l, at + ": padding LSE untouched");
                for(int d = 0; d < FD; ++d)
                    expect(o[(r * FH + h) * FD + d] == o0[(r * FH + h) * FD + d], at + ": padding O");
                continue;
            }
            if(b == 2)
            {
                expect(std::isnan(lse[r * FH + h]), at + ": invalid sequence, LSE NaN");
                for(int d = 0; d < FD; ++d)
                    expect(o[(r * FH + h) * FD + d] == (bf16 ? 0x7fc0 : 0x7e00), at + ": O NaN");
                continue;
            }
            const double s = sinks[h * 2];
            double want_l, factor;
            if(std::isnan(s))
                want_l = NAN, factor = NAN;
            else if(s == inf)
                want_l = inf, factor = 0;
            else if(s == -inf)
                want_l = l, factor = 1;
            else if(l == -inf)
                want_l = s, factor = 0;
            else
            {
                want_l = std::log(std::exp((double)l) + std::exp(s));
                factor = std::exp((double)l - want_l);
            }
            const float got_l = lse[r * FH + h];
            expect(std::isnan(want_l) ? std::isnan(got_l)
                                      : (got_l == (float)want_l ||
                                         std::fabs(got_l - want_l) <= 4e-7 * std::fabs(want_l)),
                   at + ": LSE " + std::to_string(got_l) + ", want " + std::to_string(want_l));
            for(int d = 0; d < FD; ++d)
            {
                const double x   = to_f(o0[(r * FH + h) * FD + d]);
                const float got  = to_f(o[(r * FH + h) * FD + d]);
                const double y   = x * factor;
                const float ulp  = bf16 ? 1.f / 128.f : 1.f / 1024.f;
                const bool match = std::isnan(y) ? std::isnan(got)
                                                 : std::fabs(got - y) <= ulp * std::fabs(y) + 1e-30;
                expect(match, at + " d " + std::to_string(d) + ": O " + std::to_string(got) +
                                  ", want " + std::to_string(y));
            }
        }
    std::printf("  sinks folded (ordinary, -inf, +inf, NaN; an empty row), NaN rows, padding kept\n");
}

} // namespace

int main()
{
    check_starts_and_gather();
    check_conversions();
    check_finish(true);
    check_finish(false);
    std::printf("paged kernel replay: %s\n", g_failures == 0 ? "ok" : "FAILED");
    return g_failures == 0 ? 0 : 1;
}
