//! The ordered fused kernel's schedule of dQ contributions, replayed on the host
//! (`fmha_bwd/dq_order.cuh`, with the band helpers of `fmha/mask.cuh` and `fmha_bwd/common.cuh`
//! transcribed: change them together). For every blob (a 64-row query block) the key tiles that
//! visit it must hold the turns 0 .. count - 1, each once, and be exactly the tiles the band
//! admits for it; and the walks must finish with the residency the kernel relies on: one block at
//! a time in launch order for a band with a bound (descending tiles) and for more than
//! `ROT_MAX` tiles, all of a (batch, head)'s tiles at once for the rotated walks. A wrong turn
//! would hang a block until the 0.2 s timeout (and flag `ERR_DQ_ORDER`) or add a contribution
//! twice; the device tests see that only for the lengths they run.

const BM: i64 = 64;
/// The fused kernels' key tiles: 128 keys, 64 for the column-split kernel of D 256.
const BLOCK_N: [i64; 2] = [128, 64];
/// `RAGGED_BWD_WS_ROT_MAX`.
const ROT_MAX: i64 = 32;

/// `RaggedBand` / `make_band` (-1 is an unbounded side), with the kernel's key tile `bn`.
#[derive(Clone, Copy, Debug)]
struct Band {
    off: i64,
    left: i64,
    right: i64,
    lkv: i64,
    bn: i64,
}

impl Band {
    fn new(lq: i64, lkv: i64, (left, right): (i64, i64), bottom_right: bool, bn: i64) -> Self {
        Self {
            off: if bottom_right { lkv - lq } else { 0 },
            left,
            right,
            lkv,
            bn,
        }
    }

    /// `RaggedBand::admits`: row i sees key j.
    fn admits(&self, i: i64, j: i64) -> bool {
        j < self.lkv
            && (self.right < 0 || j <= i + self.off + self.right)
            && (self.left < 0 || j >= i + self.off - self.left)
    }

    fn bounded(&self) -> bool {
        self.left >= 0 || self.right >= 0
    }
}

/// `key_block_range`: key blocks [first, last) with an admitted key for some row of the rows.
fn key_block_range(band: &Band, i0: i64, rows: i64, block_n: i64) -> (i64, i64) {
    let mut j_end = band.lkv;
    if band.right >= 0 {
        j_end = j_end.min(i0 + rows - 1 + band.off + band.right + 1);
    }
    let mut j_begin = 0;
    if band.left >= 0 {
        j_begin = (i0 + band.off - band.left).max(0);
    }
    if rows <= 0 || j_end <= j_begin {
        return (0, 0);
    }
    (j_begin / block_n, (j_end + block_n - 1) / block_n)
}

/// `query_block_range`: query blocks [first, last) with a row admitting some key of the keys.
fn query_block_range(band: &Band, lq: i64, j0: i64, cols: i64, block_m: i64) -> (i64, i64) {
    let mut i_begin = 0;
    let mut i_end = lq;
    if band.right >= 0 {
        i_begin = (j0 - band.off - band.right).max(0);
    }
    if band.left >= 0 {
        i_end = i_end.min(j0 + cols - 1 - band.off + band.left + 1);
    }
    if cols <= 0 || i_end <= i_begin {
        return (0, 0);
    }
    (i_begin / block_m, (i_end + block_m - 1) / block_m)
}

/// `bwd_ws_rotation`.
fn rotation(band: &Band, n: i64, tiles: i64, nq: i64) -> i64 {
    if band.bounded() || tiles > ROT_MAX {
        0
    } else {
        n * nq / tiles
    }
}

/// `bwd_ws_turn`.
fn turn(band: &Band, lq: i64, m: i64, n: i64, tiles: i64) -> i64 {
    let i0 = m * BM;
    let rows = (lq - i0).min(BM);
    if !band.bounded() && tiles <= ROT_MAX {
        let blocks = (lq + BM - 1) / BM;
        let first = ((m + 1) * tiles - 1) / blocks;
        return (first - n + tiles) % tiles;
    }
    let (_, hi) = key_block_range(band, i0, rows, band.bn);
    hi - 1 - n
}

/// Each key tile's walk: the query blocks it visits, in its order (`item_block`).
fn walks(band: &Band, lq: i64) -> Vec<Vec<i64>> {
    let bn = band.bn;
    let tiles = (band.lkv + bn - 1) / bn;
    (0..tiles)
        .map(|n| {
            let j0 = n * bn;
            let cols = (band.lkv - j0).min(bn);
            let (first, last) = query_block_range(band, lq, j0, cols, BM);
            let nq = last - first;
            let rot = rotation(band, n, tiles, nq);
            (0..nq).map(|s| first + (s + rot) % nq).collect()
        })
        .collect()
}

/// A turn rule: (band, Lq, query block, key tile, key tiles) to the contributions before it.
type TurnRule = fn(&Band, i64, i64, i64, i64) -> i64;

/// Checks one (batch, head)'s schedule under `turn` with key tiles of `bn`; panics naming the case.
fn check(
    turn: TurnRule,
    lq: i64,
    lkv: i64,
    (left, right): (i64, i64),
    bottom_right: bool,
    bn: i64,
) {
    let case =
        format!("Lq {lq}, Lkv {lkv}, band ({left}, {right}), bottom-right {bottom_right}, BN {bn}");
    let band = Band::new(lq, lkv, (left, right), bottom_right, bn);
    let tiles = (lkv + bn - 1) / bn;
    let walks = walks(&band, lq);
    let blocks = (lq + BM - 1) / BM;
    // Turns: a permutation of 0 .. count per blob, over exactly the tiles the band admits for it.
    let mut turns = vec![Vec::new(); blocks as usize];
    for (n, walk) in walks.iter().enumerate() {
        for &m in walk {
            turns[m as usize].push((turn(&band, lq, m, n as i64, tiles), n as i64));
        }
    }
    for (m, list) in turns.iter_mut().enumerate() {
        let m = m as i64;
        let (lo, hi) = key_block_range(&band, m * BM, (lq - m * BM).min(BM), bn);
        let mut visitors: Vec<i64> = list.iter().map(|&(_, n)| n).collect();
        visitors.sort_unstable();
        assert_eq!(
            visitors,
            (lo..hi).collect::<Vec<_>>(),
            "{case}: the tiles visiting block {m}"
        );
        if lq * lkv <= 1 << 20 {
            // The same set from the mask itself, pair by pair, independent of the range helpers.
            let admitted: Vec<i64> = (0..tiles)
                .filter(|&n| {
                    (m * BM..(m * BM + BM).min(lq))
                        .any(|i| (n * bn..(n * bn + bn).min(lkv)).any(|j| band.admits(i, j)))
                })
                .collect();
            assert_eq!(
                visitors, admitted,
                "{case}: the tiles the mask admits for block {m}"
            );
        }
        list.sort_unstable();
        let order: Vec<i64> = list.iter().map(|&(t, _)| t).collect();
        assert_eq!(
            order,
            (0..hi - lo).collect::<Vec<_>>(),
            "{case}: block {m}'s turns"
        );
    }
    // Progress: tiles start in launch order (descending), `resident` at a time, and a tile's next
    // step waits for its turn at that step's blob (the strictest model: no steps run ahead).
    let resident = if band.bounded() || tiles > ROT_MAX {
        1
    } else {
        tiles.max(1)
    };
    let mut counter = vec![0i64; blocks as usize];
    let mut step = vec![0usize; tiles as usize];
    let launch: Vec<usize> = (0..tiles as usize).rev().collect();
    let (mut started, mut running) = (0usize, Vec::new());
    loop {
        while running.len() < resident as usize && started < launch.len() {
            running.push(launch[started]);
            started += 1;
        }
        if running.is_empty() {
            break;
        }
        let mut moved = false;
        running.retain(|&n| {
            let walk = &walks[n];
            while let Some(&m) = walk.get(step[n]) {
                if counter[m as usize] != turn(&band, lq, m, n as i64, tiles) {
                    return true;
                }
                counter[m as usize] += 1;
                step[n] += 1;
                moved = true;
            }
            moved = true;
            false
        });
        assert!(
            moved,
            "{case}: the walks wait on each other (tiles {running:?} stuck)"
        );
    }
}

#[test]
fn every_blob_adds_each_admitted_key_tile_once_in_an_order_the_walks_reach() {
    let lengths = [1, 63, 64, 65, 128, 129, 300, 640, 1000, 2049, 4100, 4500];
    // Causal both ways, windows (left only, right only, both, right of the diagonal), none.
    let bands = [
        (-1, 0),
        (-1, -1),
        (20, 0),
        (300, 40),
        (0, -1),
        (5, 130),
        (-1, 200),
        (1000, 1000),
    ];
    let mut cases = 0;
    for bn in BLOCK_N {
        for &lq in &lengths {
            for &lkv in &lengths {
                for &band in &bands {
                    for bottom_right in [false, true] {
                        check(self::turn, lq, lkv, band, bottom_right, bn);
                        cases += 1;
                    }
                }
            }
        }
    }
    assert_eq!(cases, 2 * 12 * 12 * 8 * 2);
}

/// The replay can fail: turns counted from 1, or a rotated walk's blobs taken in descending order
/// from its last tile while the band's descending order makes the later tiles wait on tiles that
/// have not started (one resident block, as for a bounded band).
#[test]
#[should_panic(expected = "turns")]
fn turns_off_by_one_are_caught() {
    check(
        |b, lq, m, n, t| turn(b, lq, m, n, t) + 1,
        300,
        300,
        (-1, -1),
        false,
        BLOCK_N[1],
    );
}

#[test]
#[should_panic(expected = "wait on each other")]
fn an_ascending_order_under_descending_launches_is_caught() {
    // Causal: tile n first, not last; with one block resident in descending launch order, the
    // first tile launched waits for a tile that cannot start.
    check(
        |b, lq, m, n, _| {
            let (lo, _) = key_block_range(b, m * BM, (lq - m * BM).min(BM), b.bn);
            n - lo
        },
        500,
        500,
        (-1, 0),
        false,
        BLOCK_N[0],
    );
}
