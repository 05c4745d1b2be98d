//! Paged K/V and sinks in the CPU reference (kernels/core/paged-kv-and-sinks.md).
//!
//! A paged problem gathers exactly the rows its contiguous twin holds, into the same staging
//! arrangement, so the two runs must agree bit for bit: each case scatters contiguous K and V into
//! a shuffled page pool (pages shared between K and V tables, unused pages filled with NaN that
//! must never be read) and compares O and the LSE with the contiguous run. Invalid tables and
//! lengths are refused before anything is written. Sinks are checked against the softmax
//! identity they define (LSE' = ln(e^s + e^L), O' = O·e^(L − L')), and end to end against the
//! shim's independent float64 oracle (host-shim's corpus and tests).

use ragged_core::tensor::packed_strides;
use ragged_core::{
    DenseTensor, DiagonalAlignment, KernelError, MaskBand, Role, Tensor, TensorExt, TensorMutExt,
};
use ragged_reference::{ForwardExtras, PagedInputs, SdpaParams, sdpa_forward_with};

const H_Q: i64 = 4;
const H_KV: i64 = 2;
const D: i64 = 8;
const PS: i64 = 4;

fn dense(dims: Vec<i64>) -> DenseTensor<f32> {
    let strides = packed_strides(&dims);
    DenseTensor::<f32>::new(dims, strides).unwrap()
}

fn ints(values: &[i32], dims: Vec<i64>) -> DenseTensor<i32> {
    let strides = packed_strides(&dims);
    DenseTensor::from_vec(values.to_vec(), dims, strides).unwrap()
}

/// Contiguous `[B, H, S, D]` tensors, as the padded twin of the paged problem.
struct Twin {
    lq: Vec<i32>,
    lkv: Vec<i32>,
    s_q: i64,
    q: DenseTensor<f32>,
    k: DenseTensor<f32>,
    v: DenseTensor<f32>,
}

impl Twin {
    fn new(lq: &[i32], lkv: &[i32]) -> Twin {
        let b = lq.len() as i64;
        let s_q = i64::from(*lq.iter().max().unwrap()).max(1);
        let s_kv = i64::from(*lkv.iter().max().unwrap()).max(1);
        let mut q = dense(vec![b, H_Q, s_q, D]);
        let mut k = dense(vec![b, H_KV, s_kv, D]);
        let mut v = dense(vec![b, H_KV, s_kv, D]);
        q.fill_random(11);
        k.fill_random(12);
        v.fill_random(13);
        Twin {
            lq: lq.to_vec(),
            lkv: lkv.to_vec(),
            s_q,
            q,
            k,
            v,
        }
    }

    fn batch(&self) -> i64 {
        self.lq.len() as i64
    }

    /// O and LSE of the contiguous problem.
    fn run(&self, band: MaskBand, sinks: Option<&DenseTensor<f32>>) -> (Vec<f32>, Vec<f32>) {
        let b = self.batch();
        let mut o = dense(vec![b, H_Q, self.s_q, D]);
        let mut lse = dense(vec![b, H_Q, self.s_q, 1]);
        o.fill_sentinel();
        lse.fill_sentinel();
        let (sq, skv) = (ints(&self.lq, vec![b]), ints(&self.lkv, vec![b, 1, 1, 1]));
        let extras = ForwardExtras {
            paged: None,
            sinks: sinks.map(|s| s as _),
        };
        let params = SdpaParams { scale: 0.35, band };
        sdpa_forward_with(
            &self.q,
            &self.k,
            &self.v,
            &mut o,
            Some(&mut lse),
            Some(&sq),
            Some(&skv),
            &extras,
            &params,
        )
        .unwrap();
        (o.as_slice().to_vec(), lse.as_slice().to_vec())
    }

    /// Token-major pools `[P, H_kv, PS, D]` (upstream's NHD strides) holding every sequence's
    /// keys in shuffled pages, and the `[B, MP]` table mapping them; unused pages hold NaN.
    fn pools(&self, columns: i64) -> (DenseTensor<f32>, DenseTensor<f32>, Vec<i32>) {
        let b = self.batch();
        let pages_of = |l: i32| (i64::from(l) + PS - 1) / PS;
        let used: i64 = self.lkv.iter().map(|&l| pages_of(l)).sum();
        // Spare pages (never referenced), and a count coprime with the shuffle's 7.
        let pages = if (used + 3) % 7 == 0 {
            used + 4
        } else {
            used + 3
        };
        let dims = vec![pages, H_KV, PS, D];
        let strides = vec![PS * H_KV * D, D, H_KV * D, 1];
        let mut pk = DenseTensor::from_vec(
            vec![f32::NAN; (pages * PS * H_KV * D) as usize],
            dims.clone(),
            strides.clone(),
        )
        .unwrap();
        let mut pv = pk.clone();
        // Page p of the allocation order goes to pool page (7·p + 2) mod P: shuffled, distinct.
        let mut table = vec![-1i32; (b * columns) as usize];
        let mut next = 0i64;
        for seq in 0..b {
            for i in 0..pages_of(self.lkv[seq as usize]) {
                let page = (7 * next + 2) % pages;
                next += 1;
                // A table too short for the sequence holds what fits.
                if i < columns {
                    table[(seq * columns + i) as usize] = page as i32;
                }
                for g in 0..H_KV {
                    for slot in 0..PS {
                        let j = i * PS + slot;
                        if j >= i64::from(self.lkv[seq as usize]) {
                            continue;
                        }
                        for d in 0..D {
                            let at = |t: &DenseTensor<f32>| t.get::<f32>(&[seq, g, j, d]).unwrap();
                            let pos = (page * strides[0] + g * D + slot * strides[2] + d) as usize;
                            pk.as_mut_slice()[pos] = at(&self.k);
                            pv.as_mut_slice()[pos] = at(&self.v);
                        }
                    }
                }
            }
        }
        (pk, pv, table)
    }

    /// The paged problem with Q and O packed `[1, H_q, T, D]` (upstream's bundles), its O and
    /// LSE re-laid as the twin's `[B, H, S, D]` for comparison (padding rows as NaN).
    fn run_paged(
        &self,
        band: MaskBand,
        sinks: Option<&DenseTensor<f32>>,
        table_columns: i64,
    ) -> Result<(Vec<f32>, Vec<f32>), KernelError> {
        let (pk, pv, table) = self.pools(table_columns);
        let b = self.batch();
        let t: i64 = self.lq.iter().map(|&l| i64::from(l)).sum::<i64>() + 2;
        // Token-major packed rows: strides {T·H·D, D, H·D, 1}.
        let packed = |width: i64| {
            let dims = vec![1, H_Q, t, width];
            let strides = vec![t * H_Q * width, width, H_Q * width, 1];
            let mut x = DenseTensor::<f32>::new(dims, strides).unwrap();
            x.fill_sentinel();
            x
        };
        let mut q = packed(D);
        let mut row = 0;
        for seq in 0..b {
            for i in 0..i64::from(self.lq[seq as usize]) {
                for h in 0..H_Q {
                    for d in 0..D {
                        let x = self.q.get::<f32>(&[seq, h, i, d]).unwrap();
                        let pos = q.get_index(&[0, h, row + i, d]).unwrap();
                        q.as_mut_slice()[pos] = x;
                    }
                }
            }
            row += i64::from(self.lq[seq as usize]);
        }
        let mut o = packed(D);
        let mut lse = packed(1);
        let tk = ints(&table, vec![b, table_columns]);
        // V's table in cuDNN's rank-4 form, over the same entries.
        let tv = ints(&table, vec![b, 1, table_columns, 1]);
        let (sq, skv) = (ints(&self.lq, vec![b]), ints(&self.lkv, vec![b]));
        let extras = ForwardExtras {
            paged: Some(PagedInputs {
                table_k: &tk,
                table_v: &tv,
                max_seq_len_kv: None,
            }),
            sinks: sinks.map(|s| s as _),
        };
        let params = SdpaParams { scale: 0.35, band };
        sdpa_forward_with(
            &q,
            &pk,
            &pv,
            &mut o,
            Some(&mut lse),
            Some(&sq),
            Some(&skv),
            &extras,
            &params,
        )?;
        let mut out_o = vec![f32::NAN; (b * H_Q * self.s_q * D) as usize];
        let mut out_l = vec![f32::NAN; (b * H_Q * self.s_q) as usize];
        let mut row = 0;
        for seq in 0..b {
            for i in 0..i64::from(self.lq[seq as usize]) {
                for h in 0..H_Q {
                    let at = ((seq * H_Q + h) * self.s_q + i) as usize;
                    for d in 0..D {
                        out_o[at * D as usize + d as usize] =
                            o.get::<f32>(&[0, h, row + i, d]).unwrap();
                    }
                    out_l[at] = lse.get::<f32>(&[0, h, row + i, 0]).unwrap();
                }
            }
            row += i64::from(self.lq[seq as usize]);
        }
        Ok((out_o, out_l))
    }
}

/// The twin's outputs with its padding rows as NaN, for a comparison of logical rows only.
fn logical(twin: &Twin, (o, l): (Vec<f32>, Vec<f32>)) -> (Vec<f32>, Vec<f32>) {
    let mut out_o = vec![f32::NAN; o.len()];
    let mut out_l = vec![f32::NAN; l.len()];
    for seq in 0..twin.batch() {
        for h in 0..H_Q {
            for i in 0..i64::from(twin.lq[seq as usize]) {
                let at = ((seq * H_Q + h) * twin.s_q + i) as usize;
                out_l[at] = l[at];
                let row = at * D as usize..(at + 1) * D as usize;
                out_o[row.clone()].copy_from_slice(&o[row]);
            }
        }
    }
    (out_o, out_l)
}

fn bits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}

fn bands() -> [MaskBand; 3] {
    [
        MaskBand::none(),
        MaskBand::window(None, Some(0), DiagonalAlignment::BottomRight),
        MaskBand::window(None, Some(0), DiagonalAlignment::TopLeft),
    ]
}

/// Prefill (several query rows per sequence, a partial last page, a sequence with no key) and
/// decode (one query row per sequence, long contexts).
#[test]
fn paged_prefill_and_decode_match_the_contiguous_problem_bit_for_bit() {
    for (lq, lkv) in [
        (&[5, 3, 1, 0][..], &[9, 3, 13, 4][..]),
        (&[1, 1, 1][..], &[17, 1, 30][..]),
        (&[2, 6][..], &[0, 8][..]),
    ] {
        let twin = Twin::new(lq, lkv);
        let columns = (i64::from(*lkv.iter().max().unwrap()) + PS - 1) / PS + 1;
        for band in bands() {
            let want = logical(&twin, twin.run(band, None));
            let got = twin.run_paged(band, None, columns).unwrap();
            assert_eq!(bits(&got.0), bits(&want.0), "O, {lq:?} {lkv:?} {band:?}");
            assert_eq!(bits(&got.1), bits(&want.1), "LSE, {lq:?} {lkv:?} {band:?}");
        }
    }
}

/// Sinks on paged and contiguous problems: the same bits on both, and the identity they define.
#[test]
fn sinks_enlarge_the_denominator_and_only_that() {
    let twin = Twin::new(&[3, 2, 1], &[6, 0, 9]);
    let sinks = DenseTensor::from_vec(
        vec![0.5f32, -1.0, 3.0, f32::NEG_INFINITY],
        vec![H_Q],
        vec![1],
    )
    .unwrap();
    let band = MaskBand::window(None, Some(0), DiagonalAlignment::BottomRight);
    let plain = logical(&twin, twin.run(band, None));
    let with = logical(&twin, twin.run(band, Some(&sinks)));
    let paged = twin.run_paged(band, Some(&sinks), 4).unwrap();
    assert_eq!(bits(&paged.0), bits(&with.0));
    assert_eq!(bits(&paged.1), bits(&with.1));
    for (at, (&l, &l_sink)) in plain.1.iter().zip(&with.1).enumerate() {
        if l.is_nan() {
            continue;
        }
        let h = (at as i64 / twin.s_q % H_Q) as usize;
        let s = f64::from(sinks.as_slice()[h]);
        let l = f64::from(l);
        // ln(e^s + e^L), directly in f64.
        let want = if l == f64::NEG_INFINITY {
            s
        } else {
            (s.exp() + l.exp()).ln()
        };
        if want == f64::NEG_INFINITY {
            assert_eq!(l_sink, f32::NEG_INFINITY, "row {at}");
        } else {
            assert!(
                (f64::from(l_sink) - want).abs() < 1e-5,
                "row {at}: {l_sink} vs {want}"
            );
        }
        let ratio = if l == f64::NEG_INFINITY {
            0.0
        } else {
            (l - want).exp()
        };
        for d in 0..D as usize {
            let (o, o_sink) = (plain.0[at * 8 + d], with.0[at * 8 + d]);
            let expect = f64::from(o) * ratio;
            assert!((f64::from(o_sink) - expect).abs() < 1e-5, "row {at} d {d}");
        }
    }
}

#[test]
fn a_table_too_short_for_a_length_is_refused_naming_the_length() {
    let twin = Twin::new(&[2, 1], &[5, 7]);
    // Two columns reach 8 keys; a table of one column reaches 4, short of 5 and 7.
    let short = twin.run_paged(MaskBand::none(), None, 1).unwrap_err();
    assert!(
        matches!(
            short,
            KernelError::PagedLengthAboveMax {
                role: Role::SeqLenKv,
                batch: 0,
                value: 5,
                max: 4,
                ..
            }
        ),
        "{short}"
    );
    assert!(short.to_string().contains("seq_len_kv[0] = 5"), "{short}");
}

#[test]
fn page_ids_are_range_checked() {
    let twin = Twin::new(&[1, 1], &[3, 2]);
    // Entries past a sequence's pages hold -1 here (never read, so never refused).
    let (pk, pv, mut table) = twin.pools(2);
    let pages = pk.dims()[0] as i32;
    for bad in [pages, -1] {
        table[2] = bad; // sequence 1, entry 0
        let tk = ints(&table, vec![2, 2]);
        let q = {
            let mut q = dense(vec![1, H_Q, 2, D]);
            q.fill_random(3);
            q
        };
        let mut o = dense(vec![1, H_Q, 2, D]);
        o.fill_sentinel();
        let before = o.as_slice().to_vec();
        let (sq, skv) = (ints(&[1, 1], vec![2]), ints(&[3, 2], vec![2]));
        let extras = ForwardExtras {
            paged: Some(PagedInputs {
                table_k: &tk,
                table_v: &tk,
                max_seq_len_kv: Some(8),
            }),
            sinks: None,
        };
        let e = sdpa_forward_with(
            &q,
            &pk,
            &pv,
            &mut o,
            None,
            Some(&sq),
            Some(&skv),
            &extras,
            &SdpaParams::default(),
        )
        .unwrap_err();
        assert_eq!(
            e,
            KernelError::PageIdOutOfRange {
                role: Role::PageTableK,
                batch: 1,
                entry: 0,
                value: i64::from(bad),
                pages: i64::from(pages),
            }
        );
        assert_eq!(bits(o.as_slice()), bits(&before), "nothing written");
    }
}
