"""Where one call's output departs from a reference, bit for bit (plugin_timeline.py's hand-over
check through the C ABI).

A deterministic forward returns the same bits for the same inputs, so any difference is a race
(bench/DECISIONS.md); a NaN anywhere is a row left unwritten (the outputs are filled with NaN before
each call), even where the reference has one too.
"""


def describe(torch, i, out, ref):
    """'same', or one line on call i: how many (token, head) rows differ, the largest difference,
    NaN, the token range and the heads."""
    bits, ref_bits = out.view(torch.int16), ref.view(torch.int16)
    nan = bool(torch.isnan(out).any().item())
    if not nan and torch.equal(bits, ref_bits):
        return "same"
    bad = (bits != ref_bits).any(dim=-1) | torch.isnan(out).any(dim=-1)  # [T, H]
    toks, heads = bad.nonzero(as_tuple=True)
    diff = (out.float() - ref.float()).abs().nan_to_num(float("inf"))
    return (f"call {i} DIFFERS in {int(bad.sum())} rows (max {diff.max().item():.1e}{' NaN' if nan else ''}; "
            f"tokens {toks.min().item()}..{toks.max().item()}, heads {sorted(set(heads.tolist()))[:6]})")
