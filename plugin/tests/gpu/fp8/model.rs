//! The float64 model of the FP8 kernel's arithmetic (see `mod.rs`) and the e4m3 values it is
//! written with.

use super::*;

/// e4m3 (OCP) code to value, written from fp8-attention.md §2 (bias 7, 0x7F NaN).
pub(super) fn e4m3_value(code: u8) -> f64 {
    let (e, m) = (i32::from((code >> 3) & 15), f64::from(code & 7));
    let magnitude = if code & 0x7F == 0x7F {
        f64::NAN
    } else if e == 0 {
        m / 8.0 * 2f64.powi(-6)
    } else {
        (1.0 + m / 8.0) * 2f64.powi(e - 7)
    };
    if code & 0x80 != 0 {
        -magnitude
    } else {
        magnitude
    }
}

/// Nearest e4m3 value of a non-negative finite x, ties to the even code, saturating at 448.
fn e4m3_round(x: f64) -> f64 {
    let mut best = (0u8, 0.0f64);
    for code in 0u8..0x7F {
        let value = e4m3_value(code);
        let (d, d_best) = ((value - x).abs(), (best.1 - x).abs());
        if d < d_best || (d == d_best && code % 2 == 0) {
            best = (code, value);
        }
    }
    best.1
}

/// One element of the model's O'.
#[derive(Clone, Copy)]
pub(super) struct ModelO {
    /// O'.
    pub(super) value: f64,
    /// The row's magnitude `δ Σ P̃ |V̂| / l`: the size of an error in the kernel's arithmetic.
    pub(super) row: f64,
    /// The largest single term `δ P̃_j |V̂_j| / l` whose weight was rounded (not the block's
    /// maximum, whose weight is exactly the P scale): one e4m3 code of that weight is at most an
    /// eighth of it, what a weight on a rounding midpoint may move by.
    pub(super) flip: f64,
}

/// The float64 model of the kernel (see the top of this file): O' per element, the LSE per
/// (batch, head, row) in the dense layout, and max |O'|. `None` where nothing may be written.
pub(super) struct Fp8Model {
    pub(super) o: Vec<Option<ModelO>>,
    pub(super) lse: Vec<Option<f64>>,
    pub(super) amax_o: f64,
    /// max over rows with an admitted key of 1 / l (exact: the normalized P's maximum).
    pub(super) amax_s: f64,
}

pub(super) fn fp8_model(case: &Fp8Case, inputs: &Fp8Inputs) -> Fp8Model {
    let (hq, hkv, d) = (case.hq as usize, case.hkv as usize, case.d as usize);
    let (qs, ks) = (case.q_starts(), case.kv_starts());
    let bn = case.block_keys();
    let scale = f64::from(DQ) * f64::from(DK) / (case.d as f64).sqrt();
    let (p_scale, o_scale) = if case.full {
        (f64::from(SS), f64::from(DS) * f64::from(DV))
    } else {
        (P_SCALE, f64::from(DV) / P_SCALE)
    };
    let per_element = if case.full { 1 } else { 2 };
    let mut model = Fp8Model {
        o: vec![None; case.o_bytes() / per_element],
        lse: vec![None; case.lse_len()],
        amax_o: 0.0,
        amax_s: 0.0,
    };
    for b in 0..case.q_tokens.len() {
        let (lq, lkv) = (case.q_tokens[b], case.kv_tokens[b]);
        for h in 0..hq {
            let g = h / (hq / hkv);
            for i in 0..lq {
                let qi = (qs[b] + i) as usize;
                let q_row = &inputs.q[(qi * hq + h) * d..][..d];
                let s: Vec<(usize, f64)> = (0..lkv)
                    .filter(|&j| case.admits(lq, lkv, i, j))
                    .map(|j| {
                        let kj = (ks[b] + j) as usize;
                        let k_row = &inputs.k[(kj * hkv + g) * d..][..d];
                        let dot: f64 = q_row
                            .iter()
                            .zip(k_row)
                            .map(|(&a, &c)| e4m3_value(a) * e4m3_value(c))
                            .sum();
                        (j as usize, dot * scale)
                    })
                    .collect();
                let m_final = s.iter().map(|x| x.1).fold(f64::NEG_INFINITY, f64::max);
                let l: f64 = s.iter().map(|x| (x.1 - m_final).exp()).sum();
                if !s.is_empty() {
                    model.amax_s = model.amax_s.max(1.0 / l);
                }
                // Weights against the running max of aligned blocks of the kernel's BN keys,
                // ascending.
                let mut weights = Vec::with_capacity(s.len());
                let mut m_run = f64::NEG_INFINITY;
                for block in s.chunk_by(|a, c| a.0 / bn == c.0 / bn) {
                    let block_max = block.iter().map(|x| x.1).fold(f64::NEG_INFINITY, f64::max);
                    m_run = m_run.max(block_max);
                    for &(j, sj) in block {
                        let p = e4m3_round((sj - m_run).exp() * p_scale);
                        weights.push((j, p * (m_run - m_final).exp(), sj != m_run));
                    }
                }
                for c in 0..d {
                    let (mut acc, mut magnitude, mut flip) = (0.0f64, 0.0f64, 0.0f64);
                    for &(j, w, rounded) in &weights {
                        let x = e4m3_value(inputs.v[((ks[b] as usize + j) * hkv + g) * d + c]);
                        acc += w * x;
                        magnitude += w * x.abs();
                        if rounded {
                            flip = flip.max(w * x.abs());
                        }
                    }
                    let norm = if s.is_empty() { 0.0 } else { o_scale / l };
                    let o = ModelO {
                        value: acc * norm,
                        row: magnitude * norm,
                        flip: flip * norm,
                    };
                    model.amax_o = model.amax_o.max(o.value.abs());
                    model.o[(qi * hq + h) * d + c] = Some(o);
                }
                if case.lse {
                    let at = (b * hq + h) * case.s_q() as usize + i as usize;
                    model.lse[at] = Some(if s.is_empty() {
                        f64::NEG_INFINITY
                    } else {
                        m_final + l.ln()
                    });
                }
            }
        }
    }
    model
}
