"""Token layout of a packed ragged batch, shared by the device harnesses (fmha_dev.py, bwd_dev.py).

Each batch b holds L(b) real rows followed by pad(b) padding rows (seq_len padding); batches are
packed back to back. No GPU imports: the harnesses' buffers are built from these numbers.
"""

from collections import namedtuple

import numpy as np

PackedLayout = namedtuple(
    "PackedLayout", "use_sl pad_q pad_kv ext_q ext_kv s_q_max s_kv_max tok_q tok_kv tq tkv"
)


def packed_layout(lq, lkv, pad_q=None, pad_kv=None, slack=0):
    """Extents per batch, the padded maxima (+ slack rows), token starts [B+1] and token totals."""
    use_sl = pad_q is not None
    pad_q = pad_q or [0] * len(lq)
    pad_kv = pad_kv or [0] * len(lq)
    ext_q = [a + b for a, b in zip(lq, pad_q)]
    ext_kv = [a + b for a, b in zip(lkv, pad_kv)]
    tok_q = np.concatenate([[0], np.cumsum(ext_q)]).astype(np.int64)
    tok_kv = np.concatenate([[0], np.cumsum(ext_kv)]).astype(np.int64)
    return PackedLayout(
        use_sl,
        pad_q,
        pad_kv,
        ext_q,
        ext_kv,
        max(max(ext_q), 1) + slack,
        max(max(ext_kv), 1) + slack,
        tok_q,
        tok_kv,
        int(tok_q[-1]),
        int(tok_kv[-1]),
    )
