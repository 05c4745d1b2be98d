//! Fixtures and the f64 oracle of `tests/sdpa_backward.rs`: operand layouts computed by the test
//! itself, random problems, and the backward written out again from the formulas of
//! `kernels/reference/src/sdpa_backward/README.md` with plain loops, sharing nothing with the crate.

// The oracle indexes by (b, h, i, j, d) on purpose: it reads like the formulas it transcribes.
#![allow(clippy::needless_range_loop)]

use std::sync::Arc;

use ragged_core::{
    DenseTensor, DiagonalAlignment, Element, FloatElement, MaskBand, RaggedTensor, Tensor,
    TensorMut,
};
use rand::RngExt;
use rand_chacha::ChaCha8Rng;

/// How one group of operands (the Q side or the KV side) is laid out.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    /// Ragged, dims `[B, S, H, D]`.
    RaggedBshd,
    /// Ragged, dims `[B, H, S, D]` over the same token-major memory.
    RaggedBhsd,
    /// Dense `[B, H, S, D]`, packed.
    Dense,
}

/// One operand's physical layout, computed by the test itself.
#[derive(Debug, Clone)]
pub struct Spec {
    pub kind: Kind,
    pub heads: usize,
    pub width: usize,
    pub s_max: usize,
    pub extent: Vec<usize>,
}

impl Spec {
    pub fn ragged(&self) -> bool {
        self.kind != Kind::Dense
    }
    pub fn batch_start(&self, b: usize) -> usize {
        if self.ragged() {
            self.extent[..b].iter().sum::<usize>() * self.heads * self.width
        } else {
            b * self.heads * self.s_max * self.width
        }
    }
    pub fn len(&self) -> usize {
        self.batch_start(self.extent.len())
    }
    pub fn pos(&self, b: usize, s: usize, h: usize, d: usize) -> usize {
        let (hw, w) = (self.heads * self.width, self.width);
        if self.ragged() {
            self.batch_start(b) + s * hw + h * w + d
        } else {
            self.batch_start(b) + h * self.s_max * w + s * w + d
        }
    }
    pub fn dims_strides(&self) -> (Vec<i64>, Vec<i64>, usize) {
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
    pub fn tensor<T: Element>(&self, data: Vec<T>) -> Box<dyn TensorMut> {
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
pub struct Case {
    pub heads_q: usize,
    pub heads_kv: usize,
    pub dim_qk: usize,
    pub dim_v: usize,
    pub q_kind: Kind,
    pub kv_kind: Kind,
    pub ext_q: Vec<usize>,
    pub ext_kv: Vec<usize>,
    pub s_q: usize,
    pub s_kv: usize,
    pub len_q: Vec<usize>,
    pub len_kv: Vec<usize>,
    pub seq_lens: bool,
    pub band: MaskBand,
    pub scale: f32,
}

impl Case {
    pub fn spec_q(&self, heads: usize, width: usize) -> Spec {
        Spec {
            kind: self.q_kind,
            heads,
            width,
            s_max: self.s_q,
            extent: self.ext_q.clone(),
        }
    }
    pub fn spec_kv(&self, width: usize) -> Spec {
        Spec {
            kind: self.kv_kind,
            heads: self.heads_kv,
            width,
            s_max: self.s_kv,
            extent: self.ext_kv.clone(),
        }
    }
    pub fn lse_spec(&self) -> Spec {
        Spec {
            kind: if self.q_kind == Kind::Dense {
                Kind::Dense
            } else {
                Kind::RaggedBshd
            },
            ..self.spec_q(self.heads_q, 1)
        }
    }

    pub fn random(rng: &mut ChaCha8Rng) -> Case {
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
pub fn admitted(band: &MaskBand, i: usize, j: usize, lq: usize, lkv: usize) -> bool {
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
pub type Values = Vec<Vec<Vec<Vec<f64>>>>;

pub fn random_values(rng: &mut ChaCha8Rng, lens: &[usize], heads: usize, width: usize) -> Values {
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
pub fn place<T: FloatElement>(spec: &Spec, values: &mut Values) -> Vec<T> {
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

pub fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// The forward in f64 (O and LSE), as the backward's inputs.
pub fn oracle_forward(c: &Case, q: &Values, k: &Values, v: &Values) -> (Values, Values) {
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
pub fn oracle_backward(c: &Case, [q, k, v, o, d_o, lse]: [&Values; 6]) -> (Values, Values, Values) {
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

pub fn seq_len_tensor(lens: &[usize]) -> DenseTensor<i32> {
    let n = lens.len() as i64;
    DenseTensor::from_vec(
        lens.iter().map(|&l| l as i32).collect(),
        vec![n, 1, 1, 1],
        vec![1, 1, 1, 1],
    )
    .unwrap()
}

/// Checks written rows against the oracle and every other position against the sentinel.
pub fn check<T: FloatElement>(
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
