//! The CPU reference backward against (1) an independent f64 oracle written here with plain
//! loops from the formulas of `kernels/src/sdpa_backward/README.md`, on random ragged, dense,
//! GQA, masked and padded problems in all three element types, and (2) central finite
//! differences of the forward reference (`sdpa_forward`), which checks the formulas themselves.
//!
//! Inputs hold NaN in every padding row, so reading one poisons the result; outputs start as the
//! sentinel, so every position the backward must not write is checked bit for bit.

// The oracle indexes by (b, h, i, j, d) on purpose: it reads like the formulas it transcribes.
#![allow(clippy::needless_range_loop)]

use std::sync::Arc;

use half::{bf16, f16};
use ragged_kernels::{
    BackwardFeature, BackwardInputs, BackwardOutputs, DenseTensor, DiagonalAlignment, Element,
    FloatElement, KernelError, MaskBand, RaggedTensor, SdpaBackwardParams, SdpaParams, Tensor,
    TensorMut, sdpa_backward, sdpa_forward,
};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// How one group of operands (the Q side or the KV side) is laid out.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    /// Ragged, dims `[B, S, H, D]`.
    RaggedBshd,
    /// Ragged, dims `[B, H, S, D]` over the same token-major memory.
    RaggedBhsd,
    /// Dense `[B, H, S, D]`, packed.
    Dense,
}

/// One operand's physical layout, computed by the test itself.
#[derive(Debug, Clone)]
struct Spec {
    kind: Kind,
    heads: usize,
    width: usize,
    s_max: usize,
    extent: Vec<usize>,
}

impl Spec {
    fn ragged(&self) -> bool {
        self.kind != Kind::Dense
    }
    fn batch_start(&self, b: usize) -> usize {
        if self.ragged() {
            self.extent[..b].iter().sum::<usize>() * self.heads * self.width
        } else {
            b * self.heads * self.s_max * self.width
        }
    }
    fn len(&self) -> usize {
        self.batch_start(self.extent.len())
    }
    fn pos(&self, b: usize, s: usize, h: usize, d: usize) -> usize {
        let (hw, w) = (self.heads * self.width, self.width);
        if self.ragged() {
            self.batch_start(b) + s * hw + h * w + d
        } else {
            self.batch_start(b) + h * self.s_max * w + s * w + d
        }
    }
    fn dims_strides(&self) -> (Vec<i64>, Vec<i64>, usize) {
        let (b, s, h, w) = (
            self.extent.len() as i64,
            self.s_max as i64,
            self.heads as i64,
            self.width as i64,
        );
        match self.kind {
            Kind::RaggedBshd => (vec![b, s, h, w], vec![s * h * w, h * w, w, 1], 1),
            Kind::RaggedBhsd => (vec![b, h, s, w], vec![s * h * w, w, h * w, 1], 2),
            Kind::Dense => (vec![b, h, s, w], vec![h * s * w, s * w, w, 1], 0),
        }
    }
    fn tensor<T: Element>(&self, data: Vec<T>) -> Box<dyn TensorMut> {
        let (dims, strides, seq_axis) = self.dims_strides();
        if !self.ragged() {
            return Box::new(DenseTensor::from_vec(data, dims, strides).unwrap());
        }
        let offsets: Vec<i64> = (0..=self.extent.len())
            .map(|b| self.batch_start(b) as i64)
            .collect();
        let n = offsets.len() as i64;
        let aux: Arc<dyn Tensor> =
            Arc::new(DenseTensor::from_vec(offsets, vec![n, 1, 1, 1], vec![1, 1, 1, 1]).unwrap());
        let mut t = RaggedTensor::<T>::new(dims, strides, seq_axis, aux, 1, None).unwrap();
        t.as_mut_slice().copy_from_slice(&data);
        Box::new(t)
    }
}

#[derive(Debug, Clone)]
struct Case {
    heads_q: usize,
    heads_kv: usize,
    dim_qk: usize,
    dim_v: usize,
    q_kind: Kind,
    kv_kind: Kind,
    ext_q: Vec<usize>,
    ext_kv: Vec<usize>,
    s_q: usize,
    s_kv: usize,
    len_q: Vec<usize>,
    len_kv: Vec<usize>,
    seq_lens: bool,
    band: MaskBand,
    scale: f32,
}

impl Case {
    fn spec_q(&self, heads: usize, width: usize) -> Spec {
        Spec {
            kind: self.q_kind,
            heads,
            width,
            s_max: self.s_q,
            extent: self.ext_q.clone(),
        }
    }
    fn spec_kv(&self, width: usize) -> Spec {
        Spec {
            kind: self.kv_kind,
            heads: self.heads_kv,
            width,
            s_max: self.s_kv,
            extent: self.ext_kv.clone(),
        }
    }
    fn lse_spec(&self) -> Spec {
        Spec {
            kind: if self.q_kind == Kind::Dense {
                Kind::Dense
            } else {
                Kind::RaggedBshd
            },
            ..self.spec_q(self.heads_q, 1)
        }
    }

    fn random(rng: &mut ChaCha8Rng) -> Case {
        let batch = rng.random_range(1..=3);
        let heads_kv = rng.random_range(1..=2);
        let heads_q = heads_kv * rng.random_range(1..=3);
        let dim_qk = [1, 4, 8, 16][rng.random_range(0..4)];
        let dim_v = if rng.random_bool(0.6) {
            dim_qk
        } else {
            rng.random_range(1..=9)
        };
        let kind = |rng: &mut ChaCha8Rng| {
            [Kind::RaggedBshd, Kind::RaggedBhsd, Kind::Dense][rng.random_range(0..3)]
        };
        let (q_kind, kv_kind) = (kind(rng), kind(rng));
        // Long enough now and then for several 64-row tiles.
        let max = if rng.random_bool(0.2) { 150 } else { 12 };
        let extents = |rng: &mut ChaCha8Rng, k: Kind| -> (Vec<usize>, usize) {
            if k == Kind::Dense {
                let s = rng.random_range(1..=max);
                (vec![s; batch], s)
            } else {
                let ext: Vec<usize> = (0..batch)
                    .map(|_| {
                        if rng.random_bool(0.15) {
                            0
                        } else {
                            rng.random_range(0..=max)
                        }
                    })
                    .collect();
                let s_max = ext.iter().copied().max().unwrap_or(0) + rng.random_range(0..=2);
                (ext, s_max.max(1))
            }
        };
        let (ext_q, s_q) = extents(rng, q_kind);
        let (ext_kv, s_kv) = extents(rng, kv_kind);
        let seq_lens = rng.random_bool(0.4);
        let lens = |rng: &mut ChaCha8Rng, ext: &[usize]| -> Vec<usize> {
            ext.iter()
                .map(|&e| if seq_lens { rng.random_range(0..=e) } else { e })
                .collect()
        };
        let len_q = lens(rng, &ext_q);
        let len_kv = lens(rng, &ext_kv);
        let alignment = if rng.random_bool(0.5) {
            DiagonalAlignment::BottomRight
        } else {
            DiagonalAlignment::TopLeft
        };
        let band = match rng.random_range(0..4) {
            0 => MaskBand::none(),
            1 => MaskBand::window(None, Some(0), alignment),
            2 => MaskBand::window(
                Some(rng.random_range(0..4)),
                Some(rng.random_range(0..4)),
                alignment,
            ),
            _ => MaskBand::window(Some(rng.random_range(0..6)), None, alignment),
        };
        Case {
            heads_q,
            heads_kv,
            dim_qk,
            dim_v,
            q_kind,
            kv_kind,
            ext_q,
            ext_kv,
            s_q,
            s_kv,
            len_q,
            len_kv,
            seq_lens,
            band,
            scale: 1.0 / (dim_qk as f32).sqrt(),
        }
    }
}

/// The band of ragged-sdpa.md §5 step 2, written out again from the formula.
fn admitted(band: &MaskBand, i: usize, j: usize, lq: usize, lkv: usize) -> bool {
    let offset = match band.alignment {
        DiagonalAlignment::TopLeft => 0,
        DiagonalAlignment::BottomRight => lkv as i64 - lq as i64,
    };
    let (i, j) = (i as i64, j as i64);
    let right_out = band.right.is_some_and(|r| r >= 0 && j > i + offset + r);
    let left_out = band.left.is_some_and(|l| l >= 0 && j < i + offset - l);
    j < lkv as i64 && !right_out && !left_out
}

/// Logical values of one operand: `[b][h][s][d]`, rows `s < len[b]`.
type Values = Vec<Vec<Vec<Vec<f64>>>>;

fn random_values(rng: &mut ChaCha8Rng, lens: &[usize], heads: usize, width: usize) -> Values {
    lens.iter()
        .map(|&l| {
            (0..heads)
                .map(|_| {
                    (0..l)
                        .map(|_| (0..width).map(|_| rng.random_range(-1.0..1.0)).collect())
                        .collect()
                })
                .collect()
        })
        .collect()
}

/// Rounds the values to T (what the kernel will read) and writes them into a NaN-filled buffer.
fn place<T: FloatElement>(spec: &Spec, values: &mut Values) -> Vec<T> {
    let mut data = vec![T::from_f32(f32::NAN); spec.len()];
    for (b, heads) in values.iter_mut().enumerate() {
        for (h, rows) in heads.iter_mut().enumerate() {
            for (s, row) in rows.iter_mut().enumerate() {
                for (d, x) in row.iter_mut().enumerate() {
                    let t = T::from_f64(*x);
                    *x = t.to_f64();
                    data[spec.pos(b, s, h, d)] = t;
                }
            }
        }
    }
    data
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// The forward in f64 (O and LSE), as the backward's inputs.
fn oracle_forward(c: &Case, q: &Values, k: &Values, v: &Values) -> (Values, Values) {
    let group = c.heads_q / c.heads_kv;
    let mut o = Vec::new();
    let mut lse = Vec::new();
    for b in 0..c.len_q.len() {
        let (lq, lkv) = (c.len_q[b], c.len_kv[b]);
        let (mut ob, mut lb) = (Vec::new(), Vec::new());
        for h in 0..c.heads_q {
            let g = h / group;
            let (mut oh, mut lh) = (Vec::new(), Vec::new());
            for i in 0..lq {
                let keys: Vec<usize> = (0..lkv)
                    .filter(|&j| admitted(&c.band, i, j, lq, lkv))
                    .collect();
                let s: Vec<f64> = keys
                    .iter()
                    .map(|&j| f64::from(c.scale) * dot(&q[b][h][i], &k[b][g][j]))
                    .collect();
                if keys.is_empty() {
                    oh.push(vec![0.0; c.dim_v]);
                    lh.push(vec![f64::NEG_INFINITY]);
                    continue;
                }
                let m = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let sum: f64 = s.iter().map(|x| (x - m).exp()).sum();
                let mut row = vec![0.0; c.dim_v];
                for (x, &j) in s.iter().zip(&keys) {
                    let p = (x - m).exp() / sum;
                    for (r, vv) in row.iter_mut().zip(&v[b][g][j]) {
                        *r += p * vv;
                    }
                }
                oh.push(row);
                lh.push(vec![m + sum.ln()]);
            }
            ob.push(oh);
            lb.push(lh);
        }
        o.push(ob);
        lse.push(lb);
    }
    (o, lse)
}

/// dQ, dK, dV in f64 straight from the formulas, over the values the kernel reads.
fn oracle_backward(c: &Case, [q, k, v, o, d_o, lse]: [&Values; 6]) -> (Values, Values, Values) {
    let group = c.heads_q / c.heads_kv;
    let zeros = |lens: &[usize], heads: usize, width: usize| -> Values {
        lens.iter()
            .map(|&l| vec![vec![vec![0.0; width]; l]; heads])
            .collect()
    };
    let mut dq = zeros(&c.len_q, c.heads_q, c.dim_qk);
    let mut dk = zeros(&c.len_kv, c.heads_kv, c.dim_qk);
    let mut dv = zeros(&c.len_kv, c.heads_kv, c.dim_v);
    let scale = f64::from(c.scale);
    for b in 0..c.len_q.len() {
        let (lq, lkv) = (c.len_q[b], c.len_kv[b]);
        for h in 0..c.heads_q {
            let g = h / group;
            for i in 0..lq {
                let di = dot(&d_o[b][h][i], &o[b][h][i]);
                for j in (0..lkv).filter(|&j| admitted(&c.band, i, j, lq, lkv)) {
                    let p = (scale * dot(&q[b][h][i], &k[b][g][j]) - lse[b][h][i][0]).exp();
                    let dp = dot(&d_o[b][h][i], &v[b][g][j]);
                    let ds = p * (dp - di);
                    for d in 0..c.dim_qk {
                        dq[b][h][i][d] += scale * ds * k[b][g][j][d];
                        dk[b][g][j][d] += scale * ds * q[b][h][i][d];
                    }
                    for d in 0..c.dim_v {
                        dv[b][g][j][d] += p * d_o[b][h][i][d];
                    }
                }
            }
        }
    }
    (dq, dk, dv)
}

fn seq_len_tensor(lens: &[usize]) -> DenseTensor<i32> {
    let n = lens.len() as i64;
    DenseTensor::from_vec(
        lens.iter().map(|&l| l as i32).collect(),
        vec![n, 1, 1, 1],
        vec![1, 1, 1, 1],
    )
    .unwrap()
}

/// Checks written rows against the oracle and every other position against the sentinel.
fn check<T: FloatElement>(
    what: &str,
    out: &dyn Tensor,
    spec: &Spec,
    lens: &[usize],
    expected: &Values,
    tol: f64,
) {
    let data = T::slice(out.host_data()).unwrap();
    let mut written = vec![false; spec.len()];
    for (b, heads) in expected.iter().enumerate() {
        for (h, rows) in heads.iter().enumerate() {
            for (s, row) in rows.iter().enumerate().take(lens[b]) {
                for (d, &e) in row.iter().enumerate() {
                    let at = spec.pos(b, s, h, d);
                    written[at] = true;
                    let got = data[at].to_f64();
                    assert!(
                        (got - e).abs() <= tol * (1.0 + e.abs()),
                        "{what}[b{b}, s{s}, h{h}, d{d}] = {got}, oracle {e}"
                    );
                }
            }
        }
    }
    for (at, w) in written.iter().enumerate() {
        if !w {
            // Widening keeps the NaN payload, so any write (even of another NaN) shows.
            assert_eq!(
                data[at].to_f64().to_bits(),
                T::sentinel().to_f64().to_bits(),
                "{what}: position {at} was written"
            );
        }
    }
}

fn run_case<T: FloatElement>(c: &Case, rng: &mut ChaCha8Rng, tol: f64) {
    let (sq, sk, sv) = (
        c.spec_q(c.heads_q, c.dim_qk),
        c.spec_kv(c.dim_qk),
        c.spec_kv(c.dim_v),
    );
    let so = c.spec_q(c.heads_q, c.dim_v);
    let sl = c.lse_spec();
    let mut q = random_values(rng, &c.len_q, c.heads_q, c.dim_qk);
    let mut k = random_values(rng, &c.len_kv, c.heads_kv, c.dim_qk);
    let mut v = random_values(rng, &c.len_kv, c.heads_kv, c.dim_v);
    let mut d_o = random_values(rng, &c.len_q, c.heads_q, c.dim_v);
    let (qt, kt, vt) = (
        sq.tensor(place::<T>(&sq, &mut q)),
        sk.tensor(place::<T>(&sk, &mut k)),
        sv.tensor(place::<T>(&sv, &mut v)),
    );
    let (mut o, mut lse) = oracle_forward(c, &q, &k, &v);
    let ot = so.tensor(place::<T>(&so, &mut o));
    let dot_t = so.tensor(place::<T>(&so, &mut d_o));
    let lt = sl.tensor(place::<f32>(&sl, &mut lse));
    let (slq, slk) = (seq_len_tensor(&c.len_q), seq_len_tensor(&c.len_kv));
    let mut dq = sq.tensor(vec![T::sentinel(); sq.len()]);
    let mut dk = sk.tensor(vec![T::sentinel(); sk.len()]);
    let mut dv = sv.tensor(vec![T::sentinel(); sv.len()]);
    let inputs = BackwardInputs {
        q: &*qt,
        k: &*kt,
        v: &*vt,
        o: &*ot,
        d_o: &*dot_t,
        lse: &*lt,
        seq_len_q: c.seq_lens.then_some(&slq as &dyn Tensor),
        seq_len_kv: c.seq_lens.then_some(&slk as &dyn Tensor),
    };
    let params = SdpaBackwardParams {
        scale: c.scale,
        band: c.band,
        ..SdpaBackwardParams::default()
    };
    sdpa_backward(
        &inputs,
        BackwardOutputs {
            dq: &mut *dq,
            dk: &mut *dk,
            dv: &mut *dv,
        },
        &params,
    )
    .unwrap_or_else(|e| panic!("{c:?}: {e}"));
    let (eq, ek, ev) = oracle_backward(c, [&q, &k, &v, &o, &d_o, &lse]);
    check::<T>("dQ", &*dq, &sq, &c.len_q, &eq, tol);
    check::<T>("dK", &*dk, &sk, &c.len_kv, &ek, tol);
    check::<T>("dV", &*dv, &sv, &c.len_kv, &ev, tol);
}

#[test]
fn random_problems_match_the_f64_oracle_in_every_element_type() {
    let mut rng = ChaCha8Rng::seed_from_u64(0x005D_BAC4);
    for n in 0..60 {
        let c = Case::random(&mut rng);
        match n % 3 {
            0 => run_case::<f32>(&c, &mut rng, 2e-5),
            1 => run_case::<f16>(&c, &mut rng, 4e-3),
            _ => run_case::<bf16>(&c, &mut rng, 3e-2),
        }
    }
}

fn fixed_case(len_q: Vec<usize>, len_kv: Vec<usize>, band: MaskBand) -> Case {
    let s_q = len_q.iter().copied().max().unwrap_or(0).max(1);
    let s_kv = len_kv.iter().copied().max().unwrap_or(0).max(1);
    Case {
        heads_q: 4,
        heads_kv: 2,
        dim_qk: 4,
        dim_v: 3,
        q_kind: Kind::RaggedBshd,
        kv_kind: Kind::RaggedBhsd,
        ext_q: len_q.clone(),
        ext_kv: len_kv.clone(),
        s_q,
        s_kv,
        len_q,
        len_kv,
        seq_lens: false,
        band,
        scale: 0.5,
    }
}

#[test]
fn zero_lengths_and_fully_masked_rows_give_exact_zeros() {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    // Batch 0: no keys (dQ = 0); batch 1: no queries (dK = dV = 0); batch 2: bottom-right
    // causal with more queries than keys, so its first two rows admit nothing.
    let c = fixed_case(
        vec![3, 0, 4],
        vec![0, 5, 2],
        MaskBand::causal_bottom_right(),
    );
    let (sq, sk, sv) = (c.spec_q(4, 4), c.spec_kv(4), c.spec_kv(3));
    let (so, sl) = (c.spec_q(4, 3), c.lse_spec());
    let mut q = random_values(&mut rng, &c.len_q, 4, 4);
    let mut k = random_values(&mut rng, &c.len_kv, 2, 4);
    let mut v = random_values(&mut rng, &c.len_kv, 2, 3);
    let mut d_o = random_values(&mut rng, &c.len_q, 4, 3);
    let (qt, kt, vt) = (
        sq.tensor(place::<f32>(&sq, &mut q)),
        sk.tensor(place::<f32>(&sk, &mut k)),
        sv.tensor(place::<f32>(&sv, &mut v)),
    );
    let (mut o, mut lse) = oracle_forward(&c, &q, &k, &v);
    let (ot, dot_t, lt) = (
        so.tensor(place::<f32>(&so, &mut o)),
        so.tensor(place::<f32>(&so, &mut d_o)),
        sl.tensor(place::<f32>(&sl, &mut lse)),
    );
    let mut dq = sq.tensor(vec![f32::sentinel(); sq.len()]);
    let mut dk = sk.tensor(vec![f32::sentinel(); sk.len()]);
    let mut dv = sv.tensor(vec![f32::sentinel(); sv.len()]);
    sdpa_backward(
        &BackwardInputs {
            q: &*qt,
            k: &*kt,
            v: &*vt,
            o: &*ot,
            d_o: &*dot_t,
            lse: &*lt,
            seq_len_q: None,
            seq_len_kv: None,
        },
        BackwardOutputs {
            dq: &mut *dq,
            dk: &mut *dk,
            dv: &mut *dv,
        },
        &SdpaBackwardParams {
            scale: c.scale,
            band: c.band,
            ..SdpaBackwardParams::default()
        },
    )
    .unwrap();
    let dq_data = f32::slice(dq.host_data()).unwrap();
    for h in 0..4 {
        for s in 0..3 {
            for d in 0..4 {
                assert_eq!(dq_data[sq.pos(0, s, h, d)].to_bits(), 0, "batch 0 dQ");
            }
        }
        for s in 0..2 {
            for d in 0..4 {
                assert_eq!(dq_data[sq.pos(2, s, h, d)].to_bits(), 0, "masked row {s}");
            }
        }
    }
    for (t, spec, width) in [(&dk, &sk, 4), (&dv, &sv, 3)] {
        let data = f32::slice(t.host_data()).unwrap();
        for g in 0..2 {
            for j in 0..5 {
                for d in 0..width {
                    assert_eq!(data[spec.pos(1, j, g, d)].to_bits(), 0, "batch 1 dK/dV");
                }
            }
        }
    }
    // Everything else against the oracle, and nothing outside the logical rows written.
    let (eq, ek, ev) = oracle_backward(&c, [&q, &k, &v, &o, &d_o, &lse]);
    check::<f32>("dQ", &*dq, &sq, &c.len_q, &eq, 2e-5);
    check::<f32>("dK", &*dk, &sk, &c.len_kv, &ek, 2e-5);
    check::<f32>("dV", &*dv, &sv, &c.len_kv, &ev, 2e-5);
}

/// `Σ W ∘ O` for the forward reference run on the given (f32, ragged BSHD) Q, K, V.
fn loss(c: &Case, tensors: [&dyn Tensor; 3], weights: &[f32], so: &Spec) -> f64 {
    let mut o = so.tensor(vec![0f32; so.len()]);
    let params = SdpaParams {
        scale: c.scale,
        band: c.band,
    };
    sdpa_forward(
        tensors[0], tensors[1], tensors[2], &mut *o, None, None, None, &params,
    )
    .unwrap();
    let data = f32::slice(o.host_data()).unwrap();
    data.iter()
        .zip(weights)
        .map(|(&x, &w)| f64::from(x) * f64::from(w))
        .sum()
}

#[test]
fn gradients_match_finite_differences_of_the_forward() {
    for band in [
        MaskBand::none(),
        MaskBand::causal_top_left(),
        MaskBand::window(Some(1), Some(1), DiagonalAlignment::BottomRight),
    ] {
        let mut rng = ChaCha8Rng::seed_from_u64(11);
        let c = Case {
            kv_kind: Kind::RaggedBshd,
            ..fixed_case(vec![3, 4], vec![4, 2], band)
        };
        let (sq, sk, sv, so) = (c.spec_q(4, 4), c.spec_kv(4), c.spec_kv(3), c.spec_q(4, 3));
        let random = |rng: &mut ChaCha8Rng, n: usize| -> Vec<f32> {
            (0..n).map(|_| rng.random_range(-1.0..1.0)).collect()
        };
        let buffers = [
            random(&mut rng, sq.len()),
            random(&mut rng, sk.len()),
            random(&mut rng, sv.len()),
        ];
        let specs = [&sq, &sk, &sv];
        let weights = random(&mut rng, so.len());
        let tensors: Vec<Box<dyn TensorMut>> = buffers
            .iter()
            .zip(specs)
            .map(|(data, spec)| spec.tensor(data.clone()))
            .collect();

        // Forward for O and LSE, then the backward with dO = W.
        let mut o = so.tensor(vec![0f32; so.len()]);
        let sl = c.lse_spec();
        let mut lse = sl.tensor(vec![0f32; sl.len()]);
        sdpa_forward(
            &*tensors[0],
            &*tensors[1],
            &*tensors[2],
            &mut *o,
            Some(&mut *lse),
            None,
            None,
            &SdpaParams {
                scale: c.scale,
                band: c.band,
            },
        )
        .unwrap();
        let w = so.tensor(weights.clone());
        let mut grads: Vec<Box<dyn TensorMut>> = specs
            .iter()
            .map(|spec| spec.tensor(vec![f32::NAN; spec.len()]))
            .collect();
        let [dq, dk, dv] = &mut grads[..] else {
            unreachable!()
        };
        sdpa_backward(
            &BackwardInputs {
                q: &*tensors[0],
                k: &*tensors[1],
                v: &*tensors[2],
                o: &*o,
                d_o: &*w,
                lse: &*lse,
                seq_len_q: None,
                seq_len_kv: None,
            },
            BackwardOutputs {
                dq: &mut **dq,
                dk: &mut **dk,
                dv: &mut **dv,
            },
            &SdpaBackwardParams {
                scale: c.scale,
                band: c.band,
                ..SdpaBackwardParams::default()
            },
        )
        .unwrap();

        let eps = 1e-2f32;
        for which in 0..3 {
            let analytic = f32::slice(grads[which].host_data()).unwrap().to_vec();
            for at in 0..buffers[which].len() {
                let shifted = |delta: f32| {
                    let mut data = buffers[which].clone();
                    data[at] += delta;
                    let moved = specs[which].tensor(data);
                    let mut three: [&dyn Tensor; 3] = [&*tensors[0], &*tensors[1], &*tensors[2]];
                    three[which] = &*moved;
                    loss(&c, three, &weights, &so)
                };
                let numeric = (shifted(eps) - shifted(-eps)) / (2.0 * f64::from(eps));
                let got = f64::from(analytic[at]);
                assert!(
                    (got - numeric).abs() <= 2e-3,
                    "{band:?}: operand {which} element {at}: backward {got}, finite difference {numeric}"
                );
            }
        }
    }
}

fn tiny_operands() -> (Case, Vec<Box<dyn TensorMut>>) {
    let c = fixed_case(vec![2], vec![2], MaskBand::none());
    let specs = [
        c.spec_q(4, 4),
        c.spec_kv(4),
        c.spec_kv(3),
        c.spec_q(4, 3),
        c.spec_q(4, 3),
        c.lse_spec(),
        c.spec_q(4, 4),
        c.spec_kv(4),
        c.spec_kv(3),
    ];
    let tensors = specs
        .iter()
        .map(|s| s.tensor(vec![f32::sentinel(); s.len()]))
        .collect();
    (c, tensors)
}

fn call(t: &mut [Box<dyn TensorMut>], params: &SdpaBackwardParams) -> Result<(), KernelError> {
    let (inputs, outputs) = t.split_at_mut(6);
    let [dq, dk, dv] = outputs else {
        unreachable!()
    };
    sdpa_backward(
        &BackwardInputs {
            q: &*inputs[0],
            k: &*inputs[1],
            v: &*inputs[2],
            o: &*inputs[3],
            d_o: &*inputs[4],
            lse: &*inputs[5],
            seq_len_q: None,
            seq_len_kv: None,
        },
        BackwardOutputs {
            dq: &mut **dq,
            dk: &mut **dk,
            dv: &mut **dv,
        },
        params,
    )
}

fn untouched(t: &[Box<dyn TensorMut>]) -> bool {
    t[6..].iter().all(|g| {
        f32::slice(g.host_data())
            .unwrap()
            .iter()
            .all(|x| x.to_bits() == f32::sentinel().to_bits())
    })
}

#[test]
fn unsupported_features_are_declined_with_typed_errors_and_write_nothing() {
    let (_, mut t) = tiny_operands();
    let base = SdpaBackwardParams::default();
    for (params, feature) in [
        (
            SdpaBackwardParams {
                dropout_probability: Some(0.2),
                ..base
            },
            BackwardFeature::Dropout { probability: 0.2 },
        ),
        (
            SdpaBackwardParams {
                attn_bias: true,
                ..base
            },
            BackwardFeature::AttnBias,
        ),
        (
            SdpaBackwardParams {
                alibi: true,
                ..base
            },
            BackwardFeature::Alibi,
        ),
        (
            SdpaBackwardParams {
                dbias: true,
                ..base
            },
            BackwardFeature::DBias,
        ),
        (
            SdpaBackwardParams { fp8: true, ..base },
            BackwardFeature::Fp8,
        ),
    ] {
        let err = call(&mut t, &params).unwrap_err();
        assert_eq!(err, KernelError::BackwardUnsupported { feature });
        assert!(err.to_string().contains("not supported"), "{err}");
        assert!(untouched(&t));
    }
}

#[test]
fn a_gradient_of_the_wrong_shape_is_an_error_and_nothing_is_written() {
    let (c, mut t) = tiny_operands();
    // dK with D = 3 instead of D_qk = 4.
    let wrong = c.spec_kv(3);
    t[7] = wrong.tensor(vec![f32::sentinel(); wrong.len()]);
    let err = call(&mut t, &SdpaBackwardParams::default()).unwrap_err();
    assert!(
        matches!(
            err,
            KernelError::SdpaDim {
                field: "head_dim",
                value: 3,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().starts_with("dK: head_dim = 3"), "{err}");
    assert!(untouched(&t));
}
