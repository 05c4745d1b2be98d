//! Paged K/V and attention sinks on the CUDA engine (kernels/core/paged-kv-and-sinks.md): the
//! engine's split-KV paged kernels against the host reference engine, both through the C ABI on
//! the same device buffers, and against a float64 oracle of this file that reads the pools through
//! the page tables and seeds each row's max and sum with the sink. The graphs are the shim's
//! serving graphs (`hipdnn_shim::serving_graphs`: packed Q/O, token-major pools, `[B, MP]` tables,
//! int32 lengths) with the mask band each test names; pages are shuffled over the pool, pages no
//! sequence reads and key slots past a sequence's length hold NaN (a kernel that reads one poisons
//! its output), and Q/O rows past the packed sequences keep their sentinel. Without a CUDA device
//! every test prints `skipped: <reason>` and returns.

use super::*;
use hipdnn_shim::serving_graphs::{ServingCase, uid};
use ragged_schema::NodeAttributes;

/// One paged case: the shim's serving case plus what these tests vary beyond it.
struct PagedCase {
    serving: ServingCase,
    /// The band written over the serving case's: (left, right, alignment).
    band: Option<(Option<i64>, Option<i64>, DiagonalAlignment)>,
    /// Sequence 1 reads sequence 0's first pages (same page ids in both tables' rows).
    shared_pages: bool,
    /// (sequence, entry) of K's table set to the pool's page count: outside the pool.
    bad_page: Option<(usize, usize)>,
}

impl PagedCase {
    fn new(
        name: &'static str,
        dtype: DataType,
        (hq, hkv, d): (i64, i64, i64),
        page_size: i64,
        len_q: &[i64],
        len_kv: &[i64],
    ) -> PagedCase {
        PagedCase {
            serving: ServingCase {
                name,
                io_type: dtype,
                heads_q: hq,
                heads_kv: hkv,
                head_dim: d,
                len_q: len_q.to_vec(),
                len_kv: len_kv.to_vec(),
                page_size: Some(page_size),
                bottom_right_causal: true,
                sinks: false,
                stats: true,
            },
            band: None,
            shared_pages: false,
            bad_page: None,
        }
    }
    fn bf16(&self) -> bool {
        self.serving.io_type == DataType::BFloat16
    }
    fn batch(&self) -> usize {
        self.serving.len_q.len()
    }
    fn ps(&self) -> i64 {
        self.serving.page_size.unwrap_or(1)
    }
    /// Packed rows T_q: the serving graph declares one spare row past the sequences.
    fn t_q(&self) -> i64 {
        self.serving.len_q.iter().sum::<i64>() + 1
    }
    fn columns(&self) -> i64 {
        let ps = self.ps();
        self.serving
            .len_kv
            .iter()
            .map(|l| (l + ps - 1) / ps)
            .max()
            .unwrap_or(0)
            + 1
    }
    fn pages(&self) -> i64 {
        let ps = self.ps();
        self.serving
            .len_kv
            .iter()
            .map(|l| (l + ps - 1) / ps)
            .sum::<i64>()
            + 2
    }
    fn graph(&self) -> ragged_schema::Graph {
        let mut g = self.serving.graph();
        if let Some((left, right, alignment)) = self.band {
            for node in &mut g.nodes {
                if let NodeAttributes::Sdpa(s) = &mut node.attributes {
                    s.left_bound = left;
                    s.right_bound = right;
                    s.diagonal_alignment = alignment;
                }
            }
        }
        g
    }
    fn band(&self) -> (Option<i64>, Option<i64>, DiagonalAlignment) {
        self.band.unwrap_or(if self.serving.bottom_right_causal {
            (None, Some(0), DiagonalAlignment::BottomRight)
        } else {
            (None, None, DiagonalAlignment::TopLeft)
        })
    }
    fn admits(&self, lq: i64, lkv: i64, i: i64, j: i64) -> bool {
        let (left, right, alignment) = self.band();
        let off = if alignment == DiagonalAlignment::BottomRight {
            lkv - lq
        } else {
            0
        };
        right.is_none_or(|r| j <= i + off + r) && left.is_none_or(|l| j >= i + off - l)
    }
    fn sink(&self, h: usize) -> Option<f32> {
        self.serving.sinks.then(|| [0.75, -1.5, 2.5, -40.0][h % 4])
    }
}

/// Device inputs of one paged case and the host copies the oracle reads.
struct PagedInputs {
    buffers: Vec<(i64, DeviceAllocation)>,
    q: Vec<u16>,
    k: Vec<u16>,
    v: Vec<u16>,
    table_k: Vec<i32>,
    table_v: Vec<i32>,
    o_elements: usize,
    lse_elements: usize,
}

/// A permutation of 0..n from a fixed seed (Fisher-Yates over an LCG).
fn shuffled(n: usize, seed: u64) -> Vec<i32> {
    let mut ids: Vec<i32> = (0..n as i32).collect();
    let mut state = seed | 1;
    for i in (1..n).rev() {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ids.swap(i, (state >> 33) as usize % (i + 1));
    }
    ids
}

fn paged_inputs(case: &PagedCase) -> PagedInputs {
    let s = &case.serving;
    let (hq, hkv, d) = (s.heads_q as usize, s.heads_kv as usize, s.head_dim as usize);
    let (ps, mp, pages) = (
        case.ps() as usize,
        case.columns() as usize,
        case.pages() as usize,
    );
    let bf16 = case.bf16();
    let nan = if bf16 { 0x7FC1 } else { 0x7E01 };
    let t_q = case.t_q() as usize;
    let mut q = uniform_bits(t_q * hq * d, 11, bf16);
    q[(t_q - 1) * hq * d..].fill(nan);
    // Each table: sequence pages in order mapped through its own permutation of the pool;
    // entries a sequence does not read hold -1.
    let mut tables = Vec::new();
    for seed in [5u64, 9] {
        let perm = shuffled(pages, seed);
        let mut table = vec![-1i32; case.batch() * mp];
        let mut next = 0;
        for (b, &len) in s.len_kv.iter().enumerate() {
            for e in 0..(len as usize).div_ceil(ps) {
                table[b * mp + e] = perm[next];
                next += 1;
            }
        }
        if case.shared_pages {
            let n = (s.len_kv[0] as usize)
                .div_ceil(ps)
                .min((s.len_kv[1] as usize).div_ceil(ps));
            for e in 0..n {
                table[mp + e] = table[e];
            }
        }
        tables.push(table);
    }
    if let Some((b, e)) = case.bad_page {
        tables[0][b * mp + e] = pages as i32;
    }
    let (table_k, table_v) = (tables[0].clone(), tables[1].clone());
    // Pools: values where some sequence reads them (slot < its length), NaN everywhere else.
    let pool = |seed: u64, table: &[i32]| {
        let values = uniform_bits(pages * ps * hkv * d, seed, bf16);
        let mut pool = vec![nan; values.len()];
        for (b, &len) in s.len_kv.iter().enumerate() {
            for j in 0..len as usize {
                let p = table[b * mp + j / ps];
                if p < 0 || p as usize >= pages {
                    continue;
                }
                let at = ((p as usize * ps + j % ps) * hkv) * d;
                pool[at..at + hkv * d].copy_from_slice(&values[at..at + hkv * d]);
            }
        }
        pool
    };
    let k = pool(12, &table_k);
    let v = pool(13, &table_v);
    let ints = |values: &[i64]| {
        le_bytes(
            &values.iter().map(|&x| x as i32).collect::<Vec<_>>(),
            i32::to_le_bytes,
        )
    };
    let mut buffers = vec![
        (uid::Q, device_with(&le_bytes(&q, u16::to_le_bytes))),
        (uid::K, device_with(&le_bytes(&k, u16::to_le_bytes))),
        (uid::V, device_with(&le_bytes(&v, u16::to_le_bytes))),
        (
            uid::PAGE_TABLE_K,
            device_with(&le_bytes(&table_k, i32::to_le_bytes)),
        ),
        (
            uid::PAGE_TABLE_V,
            device_with(&le_bytes(&table_v, i32::to_le_bytes)),
        ),
        (uid::SEQ_LEN_Q, device_with(&ints(&s.len_q))),
        (uid::SEQ_LEN_KV, device_with(&ints(&s.len_kv))),
    ];
    if s.sinks {
        let logits: Vec<f32> = (0..hq).map(|h| case.sink(h).unwrap_or(0.0)).collect();
        buffers.push((uid::SINK, device_with(&le_bytes(&logits, f32::to_le_bytes))));
    }
    PagedInputs {
        buffers,
        q,
        k,
        v,
        table_k,
        table_v,
        o_elements: t_q * hq * d,
        lse_elements: if s.stats { hq * t_q } else { 0 },
    }
}

/// What a row of the oracle is: values, NaN (an invalid page id), or never written.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Want {
    Value(f64),
    Nan,
    Untouched,
}

/// Float64 attention over the uploaded bits, pools read through the tables, each row's max and
/// sum seeded with the sink (paged-kv-and-sinks.md §6.2): O `[T_q, H_q, D]` and LSE `[H_q, T_q]`.
fn paged_oracle(case: &PagedCase, inputs: &PagedInputs) -> (Vec<Want>, Vec<Want>) {
    let s = &case.serving;
    let (hq, hkv, d) = (s.heads_q as usize, s.heads_kv as usize, s.head_dim as usize);
    let (ps, mp) = (case.ps() as usize, case.columns() as usize);
    let bf16 = case.bf16();
    let t_q = case.t_q() as usize;
    let value = |bits: u16| f64::from(element_value(bits, bf16));
    let mut o = vec![Want::Untouched; inputs.o_elements];
    let mut lse = vec![Want::Untouched; inputs.lse_elements];
    let mut row0 = 0usize;
    for b in 0..case.batch() {
        let (lq, lkv) = (s.len_q[b], s.len_kv[b]);
        let invalid = case
            .bad_page
            .is_some_and(|(bb, e)| bb == b && (e as i64) * (ps as i64) < lkv);
        for h in 0..hq {
            let g = h / (hq / hkv);
            for i in 0..lq {
                let row = row0 + i as usize;
                if invalid {
                    o[(row * hq + h) * d..][..d].fill(Want::Nan);
                    if s.stats {
                        lse[h * t_q + row] = Want::Nan;
                    }
                    continue;
                }
                let q_row = &inputs.q[(row * hq + h) * d..][..d];
                let at = |table: &[i32], j: i64| {
                    let p = table[b * mp + j as usize / ps] as usize;
                    ((p * ps + j as usize % ps) * hkv + g) * d
                };
                let scores: Vec<(i64, f64)> = (0..lkv)
                    .filter(|&j| case.admits(lq, lkv, i, j))
                    .map(|j| {
                        let k_row = &inputs.k[at(&inputs.table_k, j)..][..d];
                        let dot: f64 = q_row
                            .iter()
                            .zip(k_row)
                            .map(|(&x, &y)| value(x) * value(y))
                            .sum();
                        (j, dot / (d as f64).sqrt())
                    })
                    .collect();
                let sink = case.sink(h).map(f64::from);
                let m = scores
                    .iter()
                    .map(|s| s.1)
                    .chain(sink)
                    .fold(f64::NEG_INFINITY, f64::max);
                let sum: f64 = scores.iter().map(|s| (s.1 - m).exp()).sum::<f64>()
                    + sink.map_or(0.0, |x| (x - m).exp());
                let mut out = vec![0.0; d];
                for &(j, score) in &scores {
                    let p = (score - m).exp() / sum;
                    let v_row = &inputs.v[at(&inputs.table_v, j)..][..d];
                    for (acc, &x) in out.iter_mut().zip(v_row) {
                        *acc += p * value(x);
                    }
                }
                for (c, x) in out.into_iter().enumerate() {
                    o[(row * hq + h) * d + c] = Want::Value(x);
                }
                if s.stats {
                    lse[h * t_q + row] = Want::Value(if m == f64::NEG_INFINITY {
                        f64::NEG_INFINITY
                    } else {
                        m + sum.ln()
                    });
                }
            }
        }
        row0 += lq as usize;
    }
    (o, lse)
}

/// Runs `engine` on the case through the C ABI: (status, last error, O bits, LSE bits).
fn paged_execute(
    engine: i64,
    case: &PagedCase,
    inputs: &PagedInputs,
) -> (Status, String, Vec<u16>, Vec<u32>) {
    let graph = encode_graph(&case.graph());
    let sentinel = if case.bf16() { 0x7FC1 } else { 0x7E01 };
    let o = device_with(&le_bytes(
        &vec![sentinel; inputs.o_elements],
        u16::to_le_bytes,
    ));
    let lse = device_with(&le_bytes(
        &vec![LSE_SENTINEL; inputs.lse_elements.max(1)],
        u32::to_le_bytes,
    ));
    let mut pack: Vec<DeviceBuffer> = inputs
        .buffers
        .iter()
        .map(|(uid, b)| DeviceBuffer {
            uid: *uid,
            ptr: b.address() as *mut _,
        })
        .collect();
    pack.push(DeviceBuffer {
        uid: uid::O,
        ptr: o.address() as *mut _,
    });
    if case.serving.stats {
        pack.push(DeviceBuffer {
            uid: uid::STATS,
            ptr: lse.address() as *mut _,
        });
    }
    let read = || {
        let o_bits = read_back(&o)
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect();
        let lse_bits: Vec<u32> = read_back(&lse)
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        (o_bits, lse_bits[..inputs.lse_elements].to_vec())
    };
    // SAFETY: the pack's device buffers outlive the call.
    let (status, error, (o_bits, lse_bits)) =
        unsafe { execute_on_device(engine, &graph, &pack, 0, read) };
    (status, error, o_bits, lse_bits)
}

/// Checks `got` (O bits, LSE bits) against the oracle; returns the number of O values compared.
fn against_oracle(
    name: &str,
    what: &str,
    case: &PagedCase,
    got: &(Vec<u16>, Vec<u32>),
    want: &(Vec<Want>, Vec<Want>),
) -> usize {
    let bf16 = case.bf16();
    let sentinel = if bf16 { 0x7FC1 } else { 0x7E01 };
    let (atol, rtol) = if bf16 { (1e-2, 1e-2) } else { (2e-3, 2e-3) };
    let mut compared = 0;
    for (i, (&bits, w)) in got.0.iter().zip(&want.0).enumerate() {
        let x = f64::from(element_value(bits, bf16));
        match *w {
            Want::Untouched => assert_eq!(
                bits, sentinel,
                "{name}: {what} wrote O[{i}], a row no sequence owns"
            ),
            Want::Nan => assert!(
                x.is_nan(),
                "{name}: {what} O[{i}] = {x}, NaN expected (invalid page id)"
            ),
            Want::Value(r) => {
                compared += 1;
                assert!(
                    (x - r).abs() <= atol + rtol * r.abs(),
                    "{name}: {what} O[{i}] = {x}, float64 oracle {r}"
                );
            }
        }
    }
    for (i, (&bits, w)) in got.1.iter().zip(&want.1).enumerate() {
        let x = f64::from(f32::from_bits(bits));
        match *w {
            Want::Untouched => assert_eq!(bits, LSE_SENTINEL, "{name}: {what} wrote LSE[{i}]"),
            Want::Nan => assert!(x.is_nan(), "{name}: {what} LSE[{i}] = {x}, NaN expected"),
            Want::Value(r) if r == f64::NEG_INFINITY => {
                assert_eq!(
                    x, r,
                    "{name}: {what} LSE[{i}] of a row without keys or sink"
                )
            }
            Want::Value(r) => assert!(
                (x - r).abs() <= 1e-3 + 1e-3 * r.abs(),
                "{name}: {what} LSE[{i}] = {x}, float64 oracle {r}"
            ),
        }
    }
    compared
}

/// The CUDA engine against the float64 oracle and (for valid tables) the host reference engine,
/// all through the C ABI; `repeats` further CUDA executes must give the same bits. Returns CUDA's
/// (O, LSE) bits, `None` when skipped.
fn check_paged(case: &PagedCase, repeats: usize) -> Option<(Vec<u16>, Vec<u32>)> {
    let name = case.serving.name;
    if !device_present(name) {
        return None;
    }
    // SAFETY: a valid callback that outlives the plugin.
    unsafe { (plugin().SetLoggingCallback)(Some(print_line)) };
    let handle = OwnedHandle::new();
    let (status, ids) = applicable(&handle, &encode_graph(&case.graph()));
    assert_eq!(status, SUCCESS, "{}", last_error());
    assert_eq!(
        ids,
        vec![CUDA_FMHA_ID, HOST_REFERENCE_ID],
        "{name}: the CUDA engine plans paged graphs"
    );
    let inputs = paged_inputs(case);
    let want = paged_oracle(case, &inputs);
    let (status, error, o, lse) = paged_execute(CUDA_FMHA_ID, case, &inputs);
    assert_eq!(status, SUCCESS, "{name}: {error}");
    let cuda = (o, lse);
    let compared = against_oracle(name, "CUDA", case, &cuda, &want);
    let (status, error, host_o, host_lse) = paged_execute(HOST_REFERENCE_ID, case, &inputs);
    if case.bad_page.is_some() {
        assert_eq!(
            status, INVALID_VALUE,
            "{name}: the host reference refuses an invalid page id: {error}"
        );
        assert!(
            error.contains("is not a page of the pool"),
            "{name}: {error}"
        );
    } else {
        assert_eq!(status, SUCCESS, "{name}: {error}");
        // The host reference meets the same oracle; the two engines then agree within twice the
        // tolerance, and write the same positions.
        against_oracle(name, "host reference", case, &(host_o, host_lse), &want);
    }
    for call in 0..repeats {
        let (status, error, o, lse) = paged_execute(CUDA_FMHA_ID, case, &inputs);
        assert_eq!(status, SUCCESS, "{name}: {error}");
        assert!(
            o == cuda.0 && lse == cuda.1,
            "{name}: call {} gave other bits than the first",
            call + 2
        );
    }
    eprintln!("test {name}: CUDA paged kernels match the float64 oracle on {compared} O values");
    Some(cuda)
}

#[test]
fn paged_decode_bf16_d128_gqa4_page16_sinks_split() {
    // Contexts up to 2100 keys over 5 x 2 (sequence, KV head) pairs: nine splits of 240 keys,
    // so the combine kernel merges them; one sequence has no keys (O = 0, LSE = its sink).
    let mut case = PagedCase::new(
        "paged_decode_bf16_d128_gqa4_page16_sinks_split",
        DataType::BFloat16,
        (8, 2, 128),
        16,
        &[1, 1, 1, 1, 1],
        &[1000, 1, 513, 0, 2100],
    );
    case.serving.sinks = true;
    check_paged(&case, 2);
}

#[test]
fn paged_decode_f16_d64_mqa_page32_split() {
    // 32 query heads on one KV head: two 16-row tiles per block.
    check_paged(
        &PagedCase::new(
            "paged_decode_f16_d64_mqa_page32_split",
            DataType::Half,
            (32, 1, 64),
            32,
            &[1, 1, 1],
            &[700, 1500, 33],
        ),
        1,
    );
}

#[test]
fn paged_decode_few_tokens_bf16_d64_page8_bottom_right() {
    // Speculative decode: 3 and 4 query tokens per sequence.
    check_paged(
        &PagedCase::new(
            "paged_decode_few_tokens_bf16_d64_page8_bottom_right",
            DataType::BFloat16,
            (4, 2, 64),
            8,
            &[3, 4, 1],
            &[90, 301, 8],
        ),
        0,
    );
}

#[test]
fn paged_prefill_f16_d128_page48_top_left_causal() {
    let mut case = PagedCase::new(
        "paged_prefill_f16_d128_page48_top_left_causal",
        DataType::Half,
        (4, 2, 128),
        48,
        &[7, 33, 3],
        &[7, 140, 19],
    );
    case.band = Some((None, Some(0), DiagonalAlignment::TopLeft));
    check_paged(&case, 0);
}

#[test]
fn paged_prefill_bf16_d64_page16_sliding_window_sinks() {
    let mut case = PagedCase::new(
        "paged_prefill_bf16_d64_page16_sliding_window_sinks",
        DataType::BFloat16,
        (6, 3, 64),
        16,
        &[20, 1, 9],
        &[60, 600, 9],
    );
    case.band = Some((Some(24), Some(0), DiagonalAlignment::BottomRight));
    case.serving.sinks = true;
    check_paged(&case, 0);
}

#[test]
fn paged_prefill_no_mask_f16_d256_page16() {
    let mut case = PagedCase::new(
        "paged_prefill_no_mask_f16_d256_page16",
        DataType::Half,
        (2, 1, 256),
        16,
        &[5, 17],
        &[40, 70],
    );
    case.serving.bottom_right_causal = false;
    check_paged(&case, 0);
}

#[test]
fn paged_decode_windows_bf16_d64_page1_unsplit() {
    // 26 row tiles per (sequence, KV head) on average: 20 pairs fill the card unsplit, so a block
    // walks up to 5000 keys at page size 1, in three windows of 2048 keys' page ids, reloaded into
    // shared memory between them (the only case that crosses a window).
    check_paged(
        &PagedCase::new(
            "paged_decode_windows_bf16_d64_page1_unsplit",
            DataType::BFloat16,
            (32, 4, 64),
            1,
            &[63, 63, 1, 63, 63],
            &[5000, 2100, 4097, 0, 3000],
        ),
        1,
    );
}

#[test]
fn paged_prefill_gathered_bf16_d128_gqa4_page16_bottom_right() {
    // 98 query rows per sequence on average: the gathered route (pages copied into the workspace,
    // then the ragged forward). A sequence without queries (its keys are not copied), one without
    // keys (O = 0, LSE = -inf), sequence 1 reading sequence 0's pages.
    let mut case = PagedCase::new(
        "paged_prefill_gathered_bf16_d128_gqa4_page16_bottom_right",
        DataType::BFloat16,
        (8, 2, 128),
        16,
        &[200, 70, 0, 130, 90],
        &[1000, 333, 50, 130, 0],
    );
    case.shared_pages = true;
    check_paged(&case, 2);
}

#[test]
fn paged_prefill_gathered_f16_d64_page32_sliding_window_invalid_page() {
    // The gathered route with a band and an invalid page id in sequence 1: its rows are NaN, the
    // others exact.
    let mut case = PagedCase::new(
        "paged_prefill_gathered_f16_d64_page32_sliding_window_invalid_page",
        DataType::Half,
        (4, 4, 64),
        32,
        &[100, 90, 80],
        &[300, 200, 80],
    );
    case.band = Some((Some(40), Some(0), DiagonalAlignment::BottomRight));
    case.bad_page = Some((1, 1));
    check_paged(&case, 1);
}

#[test]
fn paged_prefill_gathered_sinks_with_and_without_stats() {
    // Sinks on the gathered route are folded into the forward's rows by the finish kernel, from
    // the LSE: the graph's, or (stats off) one the route writes into its workspace. A sequence
    // without keys gets O = 0 and LSE = its sink.
    for (name, stats) in [
        ("paged_prefill_gathered_sinks_bf16_d128_stats", true),
        ("paged_prefill_gathered_sinks_f16_d64_no_stats", false),
    ] {
        let (dtype, d) = if stats {
            (DataType::BFloat16, 128)
        } else {
            (DataType::Half, 64)
        };
        let mut case = PagedCase::new(name, dtype, (6, 2, d), 16, &[150, 64, 100], &[400, 0, 100]);
        case.serving.sinks = true;
        case.serving.stats = stats;
        check_paged(&case, 1);
    }
}

#[test]
fn paged_shared_pages_and_zero_lengths_bf16_d128() {
    // Sequence 1 reads sequence 0's pages; sequence 2 has no queries, sequence 3 no keys.
    let mut case = PagedCase::new(
        "paged_shared_pages_and_zero_lengths_bf16_d128",
        DataType::BFloat16,
        (4, 1, 128),
        16,
        &[1, 2, 0, 1],
        &[80, 64, 30, 0],
    );
    case.shared_pages = true;
    case.serving.sinks = true;
    check_paged(&case, 1);
}

#[test]
fn paged_invalid_page_id_gives_nan_rows_of_that_sequence_only() {
    for (name, lens) in [
        ("paged_invalid_page_id_one_split", [30, 20, 45]),
        ("paged_invalid_page_id_split", [3000, 2000, 450]),
    ] {
        let mut case = PagedCase::new(name, DataType::BFloat16, (4, 2, 64), 16, &[1, 2, 1], &lens);
        case.bad_page = Some((1, 1));
        check_paged(&case, 0);
    }
}

/// The shim's own serving cases that the CUDA engine plans (paged ones), unchanged.
#[test]
fn paged_shim_serving_cases() {
    for serving in hipdnn_shim::serving_graphs::cases() {
        if serving.page_size.is_none() {
            continue;
        }
        check_paged(
            &PagedCase {
                serving,
                band: None,
                shared_pages: false,
                bad_page: None,
            },
            0,
        );
    }
}
