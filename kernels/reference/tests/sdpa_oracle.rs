//! The CPU reference against an independent, naive f64 oracle on hundreds of random problems.
//!
//! The oracle below shares nothing with the crate: it reads the logical values the test itself
//! generated, applies ragged-sdpa.md §5 literally (mask formula, max-subtracted softmax, LSE) in
//! f64 with plain loops, and knows each buffer's layout from the test's own offset arithmetic.
//! Outputs start filled with the sentinel so unwritten positions can be checked bit for bit, and
//! padding rows of the inputs hold NaN so that reading one would poison the result.

use std::sync::Arc;

use half::{bf16, f16};
use ragged_core::tensor::{Ragged, RaggedLayout, packed_strides};
use ragged_core::{
    BSHD_SEQ_AXIS, DataType, DenseTensor, DiagonalAlignment, Element, FloatElement, MaskBand,
    Tensor, TensorMut,
};
use ragged_reference::{SdpaParams, sdpa_forward};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// How one operand is laid out.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Layout {
    /// `[B, S, H, D]` packed, batch b at the ragged offset.
    Ragged,
    /// `[B, H, S, D]` packed.
    DenseBhsd,
    /// `[B, H, S, D]` dims with BSHD memory order (transposed strides) and a gap after each batch.
    DenseBshd,
    /// `[B, H, S, D]` dims with BHDS memory order: the head dim strided by S.
    DenseBhds,
}

#[derive(Debug, Clone)]
struct Case {
    batch: usize,
    heads_q: usize,
    heads_kv: usize,
    dim_qk: usize,
    dim_v: usize,
    /// Per-batch row extents of the Q side and the KV side.
    ext_q: Vec<usize>,
    ext_kv: Vec<usize>,
    /// Padded dims: S_max (ragged) or S (dense) of each side.
    s_q: usize,
    s_kv: usize,
    seq_len_q: Option<Vec<usize>>,
    seq_len_kv: Option<Vec<usize>>,
    q: Layout,
    k: Layout,
    v: Layout,
    o: Layout,
    lse: Option<Layout>,
    aux_i64: bool,
    /// Aux stores cumulative token counts and each tensor's multiplier is H·D.
    token_units: bool,
    left: Option<i64>,
    right: Option<i64>,
    bottom_right: bool,
    scale: f32,
}

impl Case {
    /// Two batches of `ext_q` queries and `ext_kv` keys, 2 Q heads over 1 KV head, Q, K, V and
    /// O ragged with token-unit offsets, padded dims as long as the longest batch, no mask.
    fn two_batch_gqa(
        (dim_qk, dim_v): (usize, usize),
        ext_q: [usize; 2],
        ext_kv: [usize; 2],
        lse: Layout,
        scale: f32,
    ) -> Case {
        Case {
            batch: 2,
            heads_q: 2,
            heads_kv: 1,
            dim_qk,
            dim_v,
            ext_q: ext_q.to_vec(),
            ext_kv: ext_kv.to_vec(),
            s_q: ext_q[0].max(ext_q[1]),
            s_kv: ext_kv[0].max(ext_kv[1]),
            seq_len_q: None,
            seq_len_kv: None,
            q: Layout::Ragged,
            k: Layout::Ragged,
            v: Layout::Ragged,
            o: Layout::Ragged,
            lse: Some(lse),
            aux_i64: false,
            token_units: true,
            left: None,
            right: None,
            bottom_right: false,
            scale,
        }
    }

    fn random(rng: &mut ChaCha8Rng) -> Case {
        let batch = if rng.random_bool(0.2) {
            1
        } else {
            rng.random_range(2..=4)
        };
        let heads_kv = rng.random_range(1..=2);
        let heads_q = heads_kv * [1, 1, 2, 3][rng.random_range(0..4)];
        let dim_qk = [1, 3, 4, 8, 16][rng.random_range(0..5)];
        let dim_v = if rng.random_bool(0.7) {
            dim_qk
        } else {
            rng.random_range(1..=12)
        };
        let layout = |rng: &mut ChaCha8Rng| match rng.random_range(0..5) {
            0 => Layout::DenseBhsd,
            1 => Layout::DenseBshd,
            2 => Layout::DenseBhds,
            _ => Layout::Ragged,
        };
        let extents = |rng: &mut ChaCha8Rng, dense: bool| -> Vec<usize> {
            let tiny = rng.random_bool(0.2);
            let max = if tiny { 1 } else { 24 };
            if dense {
                vec![rng.random_range(usize::from(!tiny)..=max); batch]
            } else {
                (0..batch)
                    .map(|_| {
                        if rng.random_bool(0.15) {
                            0
                        } else {
                            rng.random_range(0..=max)
                        }
                    })
                    .collect()
            }
        };
        let q = layout(rng);
        let k = layout(rng);
        let ext_q = extents(rng, q != Layout::Ragged);
        let ext_kv = extents(rng, k != Layout::Ragged);
        let pad = |rng: &mut ChaCha8Rng, ext: &[usize]| {
            ext.iter().copied().max().unwrap_or(0) + rng.random_range(0..=2)
        };
        let s_q = if q == Layout::Ragged {
            pad(rng, &ext_q)
        } else {
            ext_q[0]
        };
        let s_kv = if k == Layout::Ragged {
            pad(rng, &ext_kv)
        } else {
            ext_kv[0]
        };
        let lens = |rng: &mut ChaCha8Rng, ext: &[usize]| -> Option<Vec<usize>> {
            rng.random_bool(0.4)
                .then(|| ext.iter().map(|&e| rng.random_range(0..=e)).collect())
        };
        let seq_len_q = lens(rng, &ext_q);
        let seq_len_kv = lens(rng, &ext_kv);
        let (left, right, bottom_right) = match rng.random_range(0..5) {
            0 => (None, None, false),
            1 => (None, Some(0), false),
            2 => (None, Some(0), true),
            3 => (
                Some(rng.random_range(0..4)),
                Some(rng.random_range(0..4)),
                rng.random_bool(0.5),
            ),
            _ => (Some(rng.random_range(0..6)), None, rng.random_bool(0.5)),
        };
        Case {
            batch,
            heads_q,
            heads_kv,
            dim_qk,
            dim_v,
            ext_q,
            ext_kv,
            s_q,
            s_kv,
            seq_len_q,
            seq_len_kv,
            q,
            k,
            v: layout(rng),
            o: layout(rng),
            lse: match rng.random_range(0..3) {
                0 => None,
                1 => Some(Layout::Ragged),
                _ => Some(Layout::DenseBhsd),
            },
            aux_i64: rng.random_bool(0.5),
            token_units: rng.random_bool(0.5),
            left,
            right,
            bottom_right,
            scale: rng.random_range(0.05..1.5),
        }
    }

    /// Dense dims on each side pad to the ragged S_max so mixed layouts are legal; ragged
    /// operands use the side's extents; a dense Q (or K) forces uniform extents.
    fn extents_for(&self, layout: Layout, q_side: bool) -> Vec<usize> {
        let (ext, s) = if q_side {
            (&self.ext_q, self.s_q)
        } else {
            (&self.ext_kv, self.s_kv)
        };
        if layout == Layout::Ragged {
            ext.clone()
        } else {
            vec![s; self.batch]
        }
    }
}

/// A buffer as the test lays it out, with its own addressing.
struct Buffer {
    data: Vec<f64>,
    layout: Layout,
    heads: usize,
    dim: usize,
    seq: usize,
    /// Element offset of each batch (ragged) or batch stride (dense).
    batch_start: Vec<usize>,
    stored_offsets: Vec<i64>,
    multiplier: i64,
}

impl Buffer {
    fn new(
        layout: Layout,
        batch: usize,
        seq: usize,
        heads: usize,
        dim: usize,
        extents: &[usize],
        token_units: bool,
    ) -> Buffer {
        let row = heads * dim;
        let (batch_start, len, stored, multiplier) = match layout {
            Layout::Ragged => {
                let mut starts = vec![0usize];
                for &e in extents {
                    starts.push(starts.last().unwrap() + e * row);
                }
                let len = *starts.last().unwrap();
                let (stored, multiplier) = if token_units {
                    (
                        starts.iter().map(|&s| (s / row.max(1)) as i64).collect(),
                        row as i64,
                    )
                } else {
                    (starts.iter().map(|&s| s as i64).collect(), 1)
                };
                (starts, len, stored, multiplier)
            }
            Layout::DenseBhsd | Layout::DenseBhds => {
                let stride = seq * row;
                (
                    (0..batch).map(|b| b * stride).collect(),
                    batch * stride,
                    vec![],
                    1,
                )
            }
            Layout::DenseBshd => {
                let stride = seq * row + 3;
                (
                    (0..batch).map(|b| b * stride).collect(),
                    batch * stride,
                    vec![],
                    1,
                )
            }
        };
        Buffer {
            data: vec![f64::NAN; len],
            layout,
            heads,
            dim,
            seq,
            batch_start,
            stored_offsets: stored,
            multiplier,
        }
    }

    fn pos(&self, b: usize, s: usize, h: usize, d: usize) -> usize {
        let (heads, dim, seq) = (self.heads, self.dim, self.seq);
        match self.layout {
            Layout::Ragged | Layout::DenseBshd => self.batch_start[b] + (s * heads + h) * dim + d,
            Layout::DenseBhsd => self.batch_start[b] + (h * seq + s) * dim + d,
            Layout::DenseBhds => self.batch_start[b] + (h * dim + d) * seq + s,
        }
    }

    /// dims and strides as the tensor API wants them.
    fn geometry(&self, batch: usize) -> (Vec<i64>, Vec<i64>) {
        let (b, s, h, d) = (
            batch as i64,
            self.seq as i64,
            self.heads as i64,
            self.dim as i64,
        );
        let bs = if batch > 1 {
            (self.batch_start[1] - self.batch_start[0]) as i64
        } else {
            s * h * d
        };
        match self.layout {
            Layout::Ragged => (vec![b, s, h, d], vec![s * h * d, h * d, d, 1]),
            Layout::DenseBhsd => (vec![b, h, s, d], packed_strides(&[b, h, s, d])),
            Layout::DenseBshd => (vec![b, h, s, d], vec![bs, d, h * d, 1]),
            Layout::DenseBhds => (vec![b, h, s, d], vec![h * d * s, d * s, 1, s]),
        }
    }
}

/// Builds the tensor under test over a copy of `buffer` (converted to `T`).
fn make_tensor<T: FloatElement>(
    buffer: &Buffer,
    batch: usize,
    aux: Option<(Arc<dyn Tensor>, i64)>,
    fill: Option<T>,
) -> Box<dyn TensorMut> {
    let data: Vec<T> = buffer
        .data
        .iter()
        .map(|&x| fill.unwrap_or_else(|| T::from_f64(x)))
        .collect();
    let (dims, strides) = buffer.geometry(batch);
    match buffer.layout {
        Layout::Ragged => {
            let (aux, multiplier) = aux.expect("ragged operand needs an aux");
            let layout = RaggedLayout::new(dims, strides, BSHD_SEQ_AXIS, aux, multiplier).unwrap();
            Box::new(Ragged::from_layout(data, layout).unwrap())
        }
        _ => Box::new(DenseTensor::from_vec(data, dims, strides).unwrap()),
    }
}

fn make_aux(stored: &[i64], as_i64: bool) -> Arc<dyn Tensor> {
    let dims = vec![stored.len() as i64, 1, 1, 1];
    let strides = packed_strides(&dims);
    if as_i64 {
        Arc::new(DenseTensor::from_vec(stored.to_vec(), dims, strides).unwrap())
    } else {
        let narrow = stored.iter().map(|&v| i32::try_from(v).unwrap()).collect();
        Arc::new(DenseTensor::<i32>::from_vec(narrow, dims, strides).unwrap())
    }
}

fn make_lens(lens: &[usize]) -> DenseTensor<i32> {
    let dims = vec![lens.len() as i64, 1, 1, 1];
    DenseTensor::from_vec(
        lens.iter().map(|&l| l as i32).collect(),
        dims.clone(),
        packed_strides(&dims),
    )
    .unwrap()
}

/// Naive f64 attention, ragged-sdpa.md §5, on the logical values.
#[allow(clippy::type_complexity)]
fn oracle(
    case: &Case,
    q: &Buffer,
    k: &Buffer,
    v: &Buffer,
    len_q: &[usize],
    len_kv: &[usize],
) -> Vec<Vec<Vec<(Vec<f64>, f64)>>> {
    let group = case.heads_q / case.heads_kv;
    let scale = f64::from(case.scale);
    let mut result = Vec::new();
    for b in 0..case.batch {
        let (lq, lkv) = (len_q[b] as i64, len_kv[b] as i64);
        let offset = if case.bottom_right { lkv - lq } else { 0 };
        let mut heads = Vec::new();
        for h in 0..case.heads_q {
            let g = h / group;
            let mut rows = Vec::new();
            for i in 0..lq {
                let mut scores = Vec::new();
                for j in 0..lkv {
                    let masked_right =
                        matches!(case.right, Some(r) if r >= 0 && j > i + offset + r);
                    let masked_left = matches!(case.left, Some(l) if l >= 0 && j < i + offset - l);
                    if masked_right || masked_left {
                        continue;
                    }
                    let mut dot = 0.0;
                    for d in 0..case.dim_qk {
                        dot +=
                            q.data[q.pos(b, i as usize, h, d)] * k.data[k.pos(b, j as usize, g, d)];
                    }
                    scores.push((j as usize, scale * dot));
                }
                if scores.is_empty() {
                    rows.push((vec![0.0; case.dim_v], f64::NEG_INFINITY));
                    continue;
                }
                let m = scores.iter().map(|s| s.1).fold(f64::NEG_INFINITY, f64::max);
                let denom: f64 = scores.iter().map(|s| (s.1 - m).exp()).sum();
                let mut out = vec![0.0; case.dim_v];
                for &(j, s) in &scores {
                    let p = (s - m).exp() / denom;
                    for (d, o) in out.iter_mut().enumerate() {
                        *o += p * v.data[v.pos(b, j, g, d)];
                    }
                }
                rows.push((out, m + denom.ln()));
            }
            heads.push(rows);
        }
        result.push(heads);
    }
    result
}

fn tolerances<T: FloatElement>() -> (f64, f64) {
    // ragged-sdpa.md §8: (O atol = rtol, LSE atol = rtol) per input type.
    match T::DATA_TYPE {
        DataType::F32 => (1e-4, 1e-4),
        DataType::F16 => (2e-3, 1e-3),
        _ => (1e-2, 1e-3),
    }
}

/// Runs one case through the reference and checks it against the oracle.
fn check_case<T: FloatElement>(case: &Case, rng: &mut ChaCha8Rng) {
    let (b, hq, hkv, dqk, dv) = (
        case.batch,
        case.heads_q,
        case.heads_kv,
        case.dim_qk,
        case.dim_v,
    );
    let ext = |layout, q_side| case.extents_for(layout, q_side);
    // One operand: the Q side (Q, O, LSE) or the KV side (K, V) of the case.
    let buffer = |layout, q_side: bool, heads, dim| {
        let seq = if q_side { case.s_q } else { case.s_kv };
        let extents = ext(layout, q_side);
        Buffer::new(layout, b, seq, heads, dim, &extents, case.token_units)
    };
    let mut q = buffer(case.q, true, hq, dqk);
    let mut k = buffer(case.k, false, hkv, dqk);
    let mut v = buffer(case.v, false, hkv, dv);
    let o = buffer(case.o, true, hq, dv);
    let lse = case.lse.map(|l| buffer(l, true, hq, 1));

    let len_q: Vec<usize> = case.seq_len_q.clone().unwrap_or_else(|| ext(case.q, true));
    let len_kv: Vec<usize> = case
        .seq_len_kv
        .clone()
        .unwrap_or_else(|| ext(case.k, false));
    // Logical values, rounded to T; everything else stays NaN.
    for (buffer, heads, dim, lens) in [
        (&mut q, hq, dqk, &len_q),
        (&mut k, hkv, dqk, &len_kv),
        (&mut v, hkv, dv, &len_kv),
    ] {
        for (bi, &len) in lens.iter().enumerate() {
            for s in 0..len {
                for h in 0..heads {
                    for d in 0..dim {
                        let value = T::from_f64(rng.random_range(-1.0..1.0)).to_f64();
                        let p = buffer.pos(bi, s, h, d);
                        buffer.data[p] = value;
                    }
                }
            }
        }
    }

    // Q and O share one aux whenever their element offsets agree (always in token units).
    let aux_q = (case.q == Layout::Ragged)
        .then(|| (make_aux(&q.stored_offsets, case.aux_i64), q.multiplier));
    let aux_for = |buffer: &Buffer,
                   share: &Option<(Arc<dyn Tensor>, i64)>,
                   owner_row: usize|
     -> Option<(Arc<dyn Tensor>, i64)> {
        if buffer.layout != Layout::Ragged {
            return None;
        }
        match share {
            Some((aux, _)) if case.token_units || buffer.heads * buffer.dim == owner_row => {
                Some((Arc::clone(aux), buffer.multiplier))
            }
            _ => Some((
                make_aux(&buffer.stored_offsets, case.aux_i64),
                buffer.multiplier,
            )),
        }
    };
    let aux_k = (case.k == Layout::Ragged)
        .then(|| (make_aux(&k.stored_offsets, case.aux_i64), k.multiplier));
    let aux_o = aux_for(&o, &aux_q, hq * dqk);
    let aux_v = aux_for(&v, &aux_k, hkv * dqk);
    let aux_lse = lse.as_ref().and_then(|l| aux_for(l, &aux_q, hq * dqk));

    let qt = make_tensor::<T>(&q, b, aux_q, None);
    let kt = make_tensor::<T>(&k, b, aux_k, None);
    let vt = make_tensor::<T>(&v, b, aux_v, None);
    let mut ot = make_tensor::<T>(&o, b, aux_o, Some(T::sentinel()));
    let mut lset = lse
        .as_ref()
        .map(|l| make_tensor::<f32>(l, b, aux_lse, Some(f32::sentinel())));
    let slq = case.seq_len_q.as_deref().map(make_lens);
    let slkv = case.seq_len_kv.as_deref().map(make_lens);
    let params = SdpaParams {
        scale: case.scale,
        band: MaskBand::window(
            case.left,
            case.right,
            if case.bottom_right {
                DiagonalAlignment::BottomRight
            } else {
                DiagonalAlignment::TopLeft
            },
        ),
    };
    sdpa_forward(
        qt.as_ref(),
        kt.as_ref(),
        vt.as_ref(),
        ot.as_mut(),
        lset.as_mut().map(|t| t.as_mut() as &mut dyn TensorMut),
        slq.as_ref().map(|t| t as &dyn Tensor),
        slkv.as_ref().map(|t| t as &dyn Tensor),
        &params,
    )
    .unwrap_or_else(|e| panic!("{case:?}: {e}"));

    let expected = oracle(case, &q, &k, &v, &len_q, &len_kv);
    let (atol, lse_tol) = tolerances::<T>();
    let o_data = T::slice(ot.host_data()).unwrap();
    let mut written = vec![false; o_data.len()];
    let lse_data = lset.as_ref().map(|t| f32::slice(t.host_data()).unwrap());
    let mut lse_written = vec![false; lse_data.map_or(0, <[f32]>::len)];
    for (bi, heads) in expected.iter().enumerate() {
        for (h, rows) in heads.iter().enumerate() {
            for (i, (out, ref_lse)) in rows.iter().enumerate() {
                for (d, &want) in out.iter().enumerate() {
                    let p = o.pos(bi, i, h, d);
                    written[p] = true;
                    let got = o_data[p].to_f64();
                    let ok = if *ref_lse == f64::NEG_INFINITY {
                        got == 0.0
                    } else {
                        (got - want).abs() <= atol + atol * want.abs()
                    };
                    assert!(
                        ok,
                        "{case:?}\nO[b={bi}, s={i}, h={h}, d={d}] = {got}, oracle {want}"
                    );
                }
                if let (Some(lse_data), Some(lse)) = (lse_data, &lse) {
                    let p = lse.pos(bi, i, h, 0);
                    lse_written[p] = true;
                    let got = f64::from(lse_data[p]);
                    let ok = if *ref_lse == f64::NEG_INFINITY {
                        got == f64::NEG_INFINITY
                    } else {
                        (got - ref_lse).abs() <= lse_tol + lse_tol * ref_lse.abs()
                    };
                    assert!(
                        ok,
                        "{case:?}\nLSE[b={bi}, s={i}, h={h}] = {got}, oracle {ref_lse}"
                    );
                }
            }
        }
    }
    let sentinel = T::sentinel().to_f64().to_bits();
    for (p, &was_written) in written.iter().enumerate() {
        if !was_written {
            assert_eq!(
                o_data[p].to_f64().to_bits(),
                sentinel,
                "{case:?}\nO position {p} written"
            );
        }
    }
    if let Some(lse_data) = lse_data {
        for (p, &was_written) in lse_written.iter().enumerate() {
            if !was_written {
                assert_eq!(
                    lse_data[p].to_bits(),
                    f32::sentinel().to_bits(),
                    "{case:?}\nLSE position {p} written"
                );
            }
        }
    }
}

/// What the random cases covered; the test fails if the generator drifts away from a category.
#[derive(Debug, Default)]
struct Coverage {
    single_batch: usize,
    single_row: usize,
    empty_batch: usize,
    padding_tail: usize,
    shared_q_o_aux: usize,
    int64_aux: usize,
    multiplier: usize,
    gqa: usize,
    masks: [usize; 5],
    mixed_layouts: usize,
}

impl Coverage {
    fn record(&mut self, c: &Case) {
        self.single_batch += usize::from(c.batch == 1);
        self.single_row += usize::from(c.ext_q.contains(&1) || c.ext_kv.contains(&1));
        self.empty_batch += usize::from(c.ext_q.contains(&0) || c.ext_kv.contains(&0));
        let tail = |lens: &Option<Vec<usize>>, ext: &[usize]| {
            lens.as_ref()
                .is_some_and(|l| l.iter().zip(ext).any(|(l, e)| l < e))
        };
        self.padding_tail +=
            usize::from(tail(&c.seq_len_q, &c.ext_q) || tail(&c.seq_len_kv, &c.ext_kv));
        self.shared_q_o_aux += usize::from(
            c.q == Layout::Ragged
                && c.o == Layout::Ragged
                && (c.token_units || c.dim_qk == c.dim_v),
        );
        let ragged_any = [c.q, c.k, c.v, c.o].contains(&Layout::Ragged);
        self.int64_aux += usize::from(ragged_any && c.aux_i64);
        self.multiplier += usize::from(ragged_any && c.token_units);
        self.gqa += usize::from(c.heads_q > c.heads_kv);
        let mask = match (c.left, c.right, c.bottom_right) {
            (None, None, _) => 0,
            (None, Some(0), false) => 1,
            (None, Some(0), true) => 2,
            (Some(_), Some(_), _) => 3,
            _ => 4,
        };
        self.masks[mask] += 1;
        self.mixed_layouts += usize::from(
            [c.q, c.k, c.v, c.o].contains(&Layout::Ragged)
                && [c.q, c.k, c.v, c.o].iter().any(|&l| l != Layout::Ragged),
        );
    }
}

fn run_random<T: FloatElement>(seed: u64, cases: usize) -> Coverage {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut coverage = Coverage::default();
    for _ in 0..cases {
        let case = Case::random(&mut rng);
        coverage.record(&case);
        check_case::<T>(&case, &mut rng);
    }
    coverage
}

#[test]
fn f32_matches_the_oracle_on_random_problems() {
    let c = run_random::<f32>(0x5eed_0001, 400);
    let counts = [
        c.single_batch,
        c.single_row,
        c.empty_batch,
        c.padding_tail,
        c.shared_q_o_aux,
        c.int64_aux,
        c.multiplier,
        c.gqa,
        c.mixed_layouts,
    ];
    assert!(counts.iter().all(|&n| n >= 10), "{c:?}");
    assert!(c.masks.iter().all(|&n| n >= 20), "{c:?}");
}

#[test]
fn f16_matches_the_oracle_on_random_problems() {
    run_random::<f16>(0x5eed_0002, 150);
}

#[test]
fn bf16_matches_the_oracle_on_random_problems() {
    run_random::<bf16>(0x5eed_0003, 150);
}

/// Sequences longer than one query and one key tile, so the online rescaling across key tiles
/// and tile skipping under causal masks are exercised.
#[test]
fn multi_tile_sequences_match_the_oracle() {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    for (left, right, bottom_right) in [
        (None, None, false),
        (None, Some(0), false),
        (None, Some(0), true),
        (Some(70), Some(5), false),
    ] {
        let case = Case {
            left,
            right,
            bottom_right,
            ..Case::two_batch_gqa((64, 64), [150, 70], [300, 1], Layout::DenseBhsd, 0.125)
        };
        check_case::<f32>(&case, &mut rng);
    }
}

/// DeepSeek-style prefill head dims, Q/K 192 with V/O 128 (issue 14 item 1), over more than one
/// key tile, ragged with token-unit offsets (Q and O, K and V share one aux at different widths)
/// and a causal band, in every element type.
#[test]
fn distinct_qk_and_v_head_dims_match_the_oracle() {
    let mut rng = ChaCha8Rng::seed_from_u64(192);
    for bottom_right in [false, true] {
        let case = Case {
            right: Some(0),
            bottom_right,
            ..Case::two_batch_gqa(
                (192, 128),
                [140, 9],
                [260, 30],
                Layout::Ragged,
                1.0 / 192f32.sqrt(),
            )
        };
        check_case::<f32>(&case, &mut rng);
        check_case::<bf16>(&case, &mut rng);
    }
}
