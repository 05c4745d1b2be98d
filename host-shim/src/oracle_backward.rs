//! The float64 oracle of the SDPA backward, written from its definition
//! (kernels/reference/src/sdpa_backward/README.md §2) with plain loops over the bundle's element buffers:
//! it shares no code with the kernels' backward, so `hipdnn-shim run BWD.json --verify` checks an
//! engine (the host reference engine included) against something other than itself.
//!
//! Per batch b, query head h (KV head g = h / (H_q / H_kv)), query row i < Lq(b), admitted key
//! j < Lkv(b): P = exp(scale·Q[i]·K[j] − LSE[i]), dP = dO[i]·V[j], Δ = dO[i]·O[i],
//! dS = P (dP − Δ); dQ[i] += scale·dS·K[j], dK[j] += scale·dS·Q[i], dV[j] += P·dO[i].

use std::collections::BTreeSet;

use ragged_core::HostData;
use ragged_core::problem::dense_stats_axes;
use ragged_core::tensor::{Tensor, TensorExt};
use ragged_schema::model::DiagonalAlignment;

use crate::backward::{BackwardHarness, element};
use crate::harness::validate::{Comparison, Tolerance, sentinel_bits};
use crate::harness::{Bundle, ValidationMode};

/// What a correct engine writes into one gradient: a value per buffer position (NaN where it
/// must write nothing), and the positions that must be exactly 0.
#[derive(Debug, Clone)]
pub struct Expected {
    pub uid: i64,
    pub values: Vec<f64>,
    pub exact_zero: BTreeSet<usize>,
}

/// One tensor read through its (b, s, h, d) coordinates.
struct View<'a> {
    uid: i64,
    t: &'a dyn Tensor,
    seq_axis: usize,
}

impl<'a> View<'a> {
    fn new(bundle: &'a Bundle, uid: i64) -> Result<View<'a>, String> {
        let t = bundle.get(uid).map_err(|e| e.to_string())?;
        if t.dims().len() != 4 {
            return Err(format!("tensor uid {uid} has rank {}", t.dims().len()));
        }
        let seq_axis = t.ragged_iteration_info().map_or(2, |i| i.seq_axis);
        Ok(View { uid, t, seq_axis })
    }

    fn heads(&self) -> usize {
        self.t.dims()[3 - self.seq_axis] as usize
    }

    fn dim(&self) -> usize {
        self.t.dims()[3] as usize
    }

    fn position(&self, b: usize, s: usize, h: usize, d: usize) -> Result<usize, String> {
        let mut index = [b as i64, 0, 0, d as i64];
        index[self.seq_axis] = s as i64;
        index[3 - self.seq_axis] = h as i64;
        self.t
            .get_index(&index)
            .map_err(|e| format!("tensor uid {} index {index:?}: {e}", self.uid))
    }

    fn row(&self, b: usize, s: usize, h: usize) -> Result<Vec<f64>, String> {
        (0..self.dim())
            .map(|d| {
                let at = self.position(b, s, h, d)?;
                element(self.t.host_data(), at)
                    .ok_or_else(|| format!("tensor uid {} position {at} out of range", self.uid))
            })
            .collect()
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// dQ, dK and dV of the harness's reference bundle inputs.
pub fn evaluate(h: &BackwardHarness) -> Result<Vec<Expected>, String> {
    let r = &h.reference;
    let n = &h.node;
    let err = |e: crate::HostError| e.to_string();
    let lq = h.forward.query_lengths(r).map_err(err)?;
    let lkv = h.forward.key_lengths(r).map_err(err)?;
    let scale = f64::from(h.forward.params(&h.graph, r).map_err(err)?.scale);
    let band = n.resolve_diagonal_band().map_err(|e| e.to_string())?;
    let [q, k, v, o, d_o, dq, dk, dv] = [
        n.q_tensor_uid,
        n.k_tensor_uid,
        n.v_tensor_uid,
        n.o_tensor_uid,
        n.do_tensor_uid,
        n.dq_tensor_uid,
        n.dk_tensor_uid,
        n.dv_tensor_uid,
    ]
    .map(|uid| View::new(r, uid));
    let (q, k, v, o, d_o, dq, dk, dv) = (q?, k?, v?, o?, d_o?, dq?, dk?, dv?);
    let (hq, hkv) = (q.heads(), k.heads());
    if hkv == 0 || hq % hkv != 0 {
        return Err(format!("H_q {hq} is not a multiple of H_kv {hkv}"));
    }
    let mut lse = View::new(r, n.stats_tensor_uid)?;
    if lse.t.ragged_iteration_info().is_none() {
        let dims: [i64; 4] = lse.t.dims().try_into().map_err(|_| "LSE rank".to_owned())?;
        let s_q = q.t.dims()[q.seq_axis];
        lse.seq_axis = dense_stats_axes(&dims, s_q, hq as i64)
            .map(|a| a.seq)
            .ok_or_else(|| format!("LSE dims {dims:?} match neither order of Q's"))?;
    }

    let mut out = [&dq, &dk, &dv].map(|t| Expected {
        uid: t.uid,
        values: vec![f64::NAN; t.t.host_data().len()],
        exact_zero: BTreeSet::new(),
    });
    for b in 0..lq.len() {
        let (lq, lkv) = (lq[b], lkv[b]);
        // Every logical row is written: start at 0, remember which ever receive a term.
        let mut q_touched = vec![false; lq * hq];
        let mut k_touched = vec![false; lkv * hkv];
        for (e, t, rows, heads) in [(0, &dq, lq, hq), (1, &dk, lkv, hkv), (2, &dv, lkv, hkv)] {
            for s in 0..rows {
                for hh in 0..heads {
                    for d in 0..t.dim() {
                        out[e].values[t.position(b, s, hh, d)?] = 0.0;
                    }
                }
            }
        }
        let offset = match band.alignment {
            DiagonalAlignment::BottomRight => lkv as i64 - lq as i64,
            _ => 0,
        };
        let admits = |i: usize, j: usize| {
            let diagonal = i as i64 + offset;
            let j = j as i64;
            let right_ok = band
                .right
                .filter(|r| *r >= 0)
                .is_none_or(|r| j <= diagonal + r);
            let left_ok = band
                .left
                .filter(|l| *l >= 0)
                .is_none_or(|l| j >= diagonal - l);
            right_ok && left_ok
        };
        for head in 0..hq {
            let g = head / (hq / hkv);
            for i in 0..lq {
                let qi = q.row(b, i, head)?;
                let doi = d_o.row(b, i, head)?;
                let delta = dot(&doi, &o.row(b, i, head)?);
                let lse_i = element(lse.t.host_data(), lse.position(b, i, head, 0)?)
                    .ok_or("LSE position out of range")?;
                for j in (0..lkv).filter(|&j| admits(i, j)) {
                    q_touched[i * hq + head] = true;
                    k_touched[j * hkv + g] = true;
                    let kj = k.row(b, j, g)?;
                    let p = (scale * dot(&qi, &kj) - lse_i).exp();
                    let ds = p * (dot(&doi, &v.row(b, j, g)?) - delta);
                    for (d, kjd) in kj.iter().enumerate() {
                        out[0].values[dq.position(b, i, head, d)?] += scale * ds * kjd;
                        out[1].values[dk.position(b, j, g, d)?] += scale * ds * qi[d];
                    }
                    for (d, dod) in doi.iter().enumerate() {
                        out[2].values[dv.position(b, j, g, d)?] += p * dod;
                    }
                }
            }
        }
        for (s, head) in (0..lq).flat_map(|s| (0..hq).map(move |hh| (s, hh))) {
            if !q_touched[s * hq + head] {
                for d in 0..dq.dim() {
                    out[0].exact_zero.insert(dq.position(b, s, head, d)?);
                }
            }
        }
        for (s, g) in (0..lkv).flat_map(|s| (0..hkv).map(move |g| (s, g))) {
            if !k_touched[s * hkv + g] {
                for (e, t) in [(1, &dk), (2, &dv)] {
                    for d in 0..t.dim() {
                        out[e].exact_zero.insert(t.position(b, s, g, d)?);
                    }
                }
            }
        }
    }
    Ok(out.into())
}

/// The engine bundle's gradients against `expected`: positions to leave alone must still hold
/// the sentinel (coverage mode) or are skipped (sentinel-skip), exact zeros must be ±0, the rest
/// within the forward output's tolerance for the element type.
pub fn compare(
    h: &BackwardHarness,
    expected: &[Expected],
    mode: ValidationMode,
) -> Result<Vec<Comparison>, String> {
    let mut out = Vec::new();
    for e in expected {
        let t = h.engine.get(e.uid).map_err(|x| x.to_string())?;
        let data = t.host_data();
        let tol: Tolerance = h.tolerance(e.uid).map_err(|x| x.to_string())?;
        let sentinel = sentinel_bits(data.data_type());
        let mut c = Comparison {
            uid: e.uid,
            ..Comparison::default()
        };
        let fail = |c: &mut Comparison, message: String| {
            c.failure_count += 1;
            if c.failures.len() < 8 {
                c.failures.push(message);
            }
        };
        for (i, want) in e.values.iter().enumerate() {
            let got = element(data, i).ok_or("engine buffer shorter than expected")?;
            if want.is_nan() {
                c.skipped += 1;
                if mode == ValidationMode::Coverage && bits(data, i) != sentinel {
                    fail(
                        &mut c,
                        format!("position {i}: {got} written where nothing may be"),
                    );
                }
                continue;
            }
            c.compared += 1;
            let abs = (got - want).abs();
            c.max_abs_error = c.max_abs_error.max(abs);
            if want.abs() > 0.0 {
                c.max_rel_error = c.max_rel_error.max(abs / want.abs());
            }
            if e.exact_zero.contains(&i) {
                if got != 0.0 {
                    fail(&mut c, format!("position {i}: {got}, must be exactly 0"));
                }
            } else if abs.is_nan() || abs > tol.atol + tol.rtol * want.abs() {
                fail(&mut c, format!("position {i}: {got}, oracle {want}"));
            }
        }
        out.push(c);
    }
    Ok(out)
}

fn bits(data: HostData<'_>, i: usize) -> u64 {
    match data {
        HostData::F32(s) => u64::from(s[i].to_bits()),
        HostData::F16(s) => u64::from(s[i].to_bits()),
        HostData::BF16(s) => u64::from(s[i].to_bits()),
        HostData::I32(s) => s[i] as u32 as u64,
        HostData::I64(s) => s[i] as u64,
        HostData::Fp8(_, s) => u64::from(s[i]),
    }
}
