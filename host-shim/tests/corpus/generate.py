#!/usr/bin/env python3
"""Writes the project's SDPA test corpus in upstream hipDNN's integration-test bundle format.

Run from this directory: `python3 generate.py`. It rewrites bundles/ and expectations.json.
The corpus covers every SDPA feature the plugin's host engine accepts, each ragged case in both
of upstream's dims orders over the same BSHD memory ([B, S, H, D] and [B, H, S, D]) and both
offset units (elements: multiplier 1; tokens: multiplier = sequence stride). Cases the plugin does
not accept yet are marked in expectations.json with the issue item that will make them pass.
Inputs not pinned in the metadata are random; outputs are checked against hipdnn-shim's float64
oracle, so no golden data is stored.
"""

import json
import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "bundles" / "quick" / "SdpaFwd"
GENERATOR = "host-shim/tests/corpus/generate.py"
REFERENCE = "graph-only: verified at run time against hipdnn-shim's float64 oracle"

Q, K, V, O, LSE = 0, 1, 2, 3, 4
OFF_Q, OFF_KV, OFF_LSE, SEQ_Q, SEQ_KV, SCALE = 10, 11, 12, 13, 14, 15
OFF_K, OFF_O = 16, 17

INPUT_KEYS = [
    "q_tensor_uid", "k_tensor_uid", "v_tensor_uid", "attn_mask_tensor_uid", "scale_tensor_uid",
    "seq_len_q_tensor_uid", "seq_len_kv_tensor_uid", "seed_tensor_uid", "offset_tensor_uid",
    "dropout_mask_tensor_uid", "dropout_scale_tensor_uid", "page_table_k_tensor_uid",
    "page_table_v_tensor_uid", "block_mask_tensor_uid", "sink_token_tensor_uid",
    "descale_q_tensor_uid", "descale_k_tensor_uid", "descale_v_tensor_uid",
    "descale_s_tensor_uid", "scale_s_tensor_uid", "scale_o_tensor_uid",
]
OUTPUT_KEYS = [
    "o_tensor_uid", "stats_tensor_uid", "max_tensor_uid", "sum_exp_tensor_uid",
    "rng_dump_tensor_uid", "amax_s_tensor_uid", "amax_o_tensor_uid",
]

expectations = {}


def attributes(**given):
    a = {
        "generate_stats": None, "alibi_mask": False, "padding_mask": False,
        "causal_mask": False, "causal_mask_bottom_right": False, "dropout_probability": None,
        "attn_scale_value": None, "left_bound": None, "right_bound": None,
        "max_seq_len_kv": None, "diagonal_alignment": "TOP_LEFT", "mma_core_mode": "float",
        "implementation": "AUTO",
    }
    a.update(given)
    return a


def node(ports, attrs):
    """An SDPA node in the SDK writer's nested form, every port present."""
    return {
        "type": "SdpaAttributes",
        "compute_data_type": "float",
        "name": "sdpa",
        "inputs": {k: ports.get(k) for k in INPUT_KEYS},
        "outputs": {k: ports.get(k) for k in OUTPUT_KEYS},
        "attributes": attrs,
    }


def graph(name, io, tensors, nodes):
    return {"nodes": nodes, "tensors": tensors, "io_data_type": io,
            "compute_data_type": "float", "intermediate_data_type": "float", "name": name}


def tensor(uid, name, dims, strides, data_type, aux=None, multiplier=None, **extra):
    t = {"uid": uid, "name": name, "dims": dims, "strides": strides, "data_type": data_type,
         "virtual": False}
    if aux is not None:
        t["ragged_offset_tensor_uid"] = aux
        t["ragged_offset_multiplier"] = multiplier
    t.update(extra)
    return t


def metadata(seed, inputs):
    return {"format_version": 1, "generator": GENERATOR, "reference_source": REFERENCE,
            "seed": seed, "inputs": {str(uid): {"values": v} for uid, v in inputs.items()}}


def cumsum(extents, unit):
    out = [0]
    for e in extents:
        out.append(out[-1] + e * unit)
    return out


def ragged(form, b, s, h, d):
    """Dims and strides of a packed BSHD ragged tensor: form 'bshd' or 'bhsd' dims order."""
    strides_bshd = [s * h * d, h * d, d, 1]
    if form == "bshd":
        return [b, s, h, d], strides_bshd
    return [b, h, s, d], [s * h * d, d, h * d, 1]


def offsets(extents, row, unit):
    """Stored offsets and multiplier: element units (multiplier 1) or token units."""
    if unit == "elements":
        return cumsum(extents, row), 1
    return cumsum(extents, 1), row


def write(path, value):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=2) + "\n")


def expect(name, outcome, why=None):
    expectations[name] = {"expect": outcome, **({"until": why} if why else {})}


# ---------------------------------------------------------------------------------------------
# Sweep 1: packed ragged Q/K/V/O, dense head-major LSE; masks, data types, GQA/MQA.

def packed_sweep(family="ragged_packed", d=8, half_only=False):
    """The packed sweep at head dim `d`; `half_only` keeps the fp16/bf16 variants (a GPU engine's
    data types), for the head-dim-64 family the CUDA engine also runs (`bundle --cuda`)."""
    root = OUT / family
    ports = {"q_tensor_uid": Q, "k_tensor_uid": K, "v_tensor_uid": V, "o_tensor_uid": O,
             "stats_tensor_uid": LSE}
    attrs = attributes(
        generate_stats=True,
        attn_scale_value="${case.attributes.attn_scale_value}",
        left_bound="${case.attributes.left_bound}",
        right_bound="${case.attributes.right_bound}",
        diagonal_alignment="${case.attributes.diagonal_alignment}",
    )

    def t(uid, name, aux):
        return {"uid": uid, "name": name, "dims": "${case.dims}", "strides": "${case.strides}",
                "data_type": "${case.data_type}", "virtual": False,
                "ragged_offset_tensor_uid": aux,
                "ragged_offset_multiplier": "${case.ragged_offset_multiplier}"}

    def index(uid, name):
        return {"uid": uid, "name": name, "dims": [4, 1, 1, 1], "strides": [1, 1, 1, 1],
                "data_type": "${case.data_type}", "virtual": False}

    template = graph(family, "${case.io_data_type}", [
        t(Q, "Q", OFF_Q), t(K, "K", OFF_KV), t(V, "V", OFF_KV), t(O, "O", OFF_Q),
        {"uid": LSE, "name": "LSE", "dims": "${case.dims}", "strides": "${case.strides}",
         "data_type": "float", "virtual": False},
        index(OFF_Q, "RAGGED_OFFSET_Q"), index(OFF_KV, "RAGGED_OFFSET_KV"),
    ], [node(ports, attrs)])
    write(root / "graph.template.json", template)

    b = 3
    ext_q, ext_kv = [2, 5, 3], [4, 6, 1]
    sq, skv = max(ext_q), max(ext_kv)
    variants = [
        ("float", "fp32", 4, 2, "nomask", None, None, "TOP_LEFT"),
        ("half", "fp16", 4, 2, "causal_tl", None, 0, "TOP_LEFT"),
        ("bfloat16", "bf16", 4, 2, "causal_br", -1, 0, "BOTTOM_RIGHT"),
        ("bfloat16", "bf16", 4, 1, "window_l2_br", 2, 0, "BOTTOM_RIGHT"),
    ]
    if half_only:
        variants = [v for v in variants if v[0] != "float"]
    cases = []
    seed = 100 if d == 8 else 100 + d
    for form in ["bshd", "bhsd"]:
        for unit in ["elements", "tokens"]:
            for io, short, hq, hkv, mask, left, right, align in variants:
                seed += 1
                qd, qs = ragged(form, b, sq, hq, d)
                kd, ks = ragged(form, b, skv, hkv, d)
                off_q, mul_q = offsets(ext_q, hq * d, unit)
                off_kv, mul_kv = offsets(ext_kv, hkv * d, unit)
                idx = "int32" if unit == "elements" else "int64"
                cid = f"b3_hq{hq}_kv{hkv}_d{d}_{short}_{form}_{unit}_{mask}"
                per = [
                    {"uid": Q, "dims": qd, "strides": qs, "data_type": io,
                     "ragged_offset_multiplier": mul_q},
                    {"uid": K, "dims": kd, "strides": ks, "data_type": io,
                     "ragged_offset_multiplier": mul_kv},
                    {"uid": V, "dims": kd, "strides": ks, "data_type": io,
                     "ragged_offset_multiplier": mul_kv},
                    {"uid": O, "dims": qd, "strides": qs, "data_type": io,
                     "ragged_offset_multiplier": mul_q},
                    {"uid": LSE, "dims": [b, hq, sq, 1], "strides": [hq * sq, sq, 1, 1]},
                    {"uid": OFF_Q, "data_type": idx},
                    {"uid": OFF_KV, "data_type": idx},
                ]
                cases.append({
                    "id": cid,
                    "values": {
                        "io_data_type": io,
                        "tensors": per,
                        "attributes": {"attn_scale_value": 1 / d ** 0.5, "left_bound": left,
                                       "right_bound": right, "diagonal_alignment": align},
                    },
                    "metadata": metadata(seed, {OFF_Q: off_q, OFF_KV: off_kv}),
                })
                name = f"quick/SdpaFwd/{family}#{cid}"
                expect(name, "pass")
    if half_only:
        write(root / "sweep.json", {"version": 1, "cases": cases})
        write(root / "support.json", {"claims": {}, "version": 1})
        return
    # Upstream sometimes writes the multiplier as strides[1]: in the [B, H, S, D] order that is
    # D, which does not make whole tokens; such a graph must be rejected, now and later.
    qd, qs = ragged("bhsd", b, sq, 4, d)
    kd, ks = ragged("bhsd", b, skv, 2, d)
    cid = "b3_hq4_kv2_d8_fp32_bhsd_multiplier_is_strides1"
    cases.append({
        "id": cid,
        "values": {
            "io_data_type": "float",
            "tensors": [
                {"uid": Q, "dims": qd, "strides": qs, "data_type": "float",
                 "ragged_offset_multiplier": qs[1]},
                {"uid": K, "dims": kd, "strides": ks, "data_type": "float",
                 "ragged_offset_multiplier": ks[1]},
                {"uid": V, "dims": kd, "strides": ks, "data_type": "float",
                 "ragged_offset_multiplier": ks[1]},
                {"uid": O, "dims": qd, "strides": qs, "data_type": "float",
                 "ragged_offset_multiplier": qs[1]},
                {"uid": LSE, "dims": [b, 4, sq, 1], "strides": [4 * sq, sq, 1, 1]},
                {"uid": OFF_Q, "data_type": "int32"},
                {"uid": OFF_KV, "data_type": "int32"},
            ],
            "attributes": {"attn_scale_value": 1 / d ** 0.5, "left_bound": None,
                           "right_bound": None, "diagonal_alignment": "TOP_LEFT"},
        },
        "metadata": metadata(99, {OFF_Q: cumsum(ext_q, 1), OFF_KV: cumsum(ext_kv, 1)}),
    })
    expect(f"quick/SdpaFwd/ragged_packed#{cid}", "declined")
    write(root / "sweep.json", {"version": 1, "cases": cases})
    write(root / "support.json", {"claims": {}, "version": 1})


# ---------------------------------------------------------------------------------------------
# Sweep 2: configuration 2 (seq_len_q / seq_len_kv [B, 1, 1, 1]), zero-length batches, ragged LSE
# with its own offsets.

def padded_sweep(family="ragged_padded", d=8):
    """The padded sweep at head dim `d` (fp16/bf16 already: the CUDA engine runs the D = 64 one)."""
    root = OUT / family
    ports = {"q_tensor_uid": Q, "k_tensor_uid": K, "v_tensor_uid": V, "o_tensor_uid": O,
             "stats_tensor_uid": LSE, "seq_len_q_tensor_uid": SEQ_Q,
             "seq_len_kv_tensor_uid": SEQ_KV}
    attrs = attributes(
        generate_stats=True, padding_mask=True,
        attn_scale_value=0.35355339059327373,
        right_bound="${case.attributes.right_bound}",
        diagonal_alignment="BOTTOM_RIGHT",
    )

    def t(uid, name, aux, data_type="${case.data_type}"):
        return {"uid": uid, "name": name, "dims": "${case.dims}", "strides": "${case.strides}",
                "data_type": data_type, "virtual": False, "ragged_offset_tensor_uid": aux,
                "ragged_offset_multiplier": "${case.ragged_offset_multiplier}"}

    def index(uid, name, dims):
        return {"uid": uid, "name": name, "dims": dims, "strides": [1] * len(dims),
                "data_type": "${case.data_type}", "virtual": False}

    b, hq, hkv = 3, 2, 1
    template = graph(family, "${case.io_data_type}", [
        t(Q, "Q", OFF_Q), t(K, "K", OFF_KV), t(V, "V", OFF_KV), t(O, "O", OFF_Q),
        t(LSE, "LSE", OFF_LSE, "float"),
        index(OFF_Q, "RAGGED_OFFSET_Q", [b + 1, 1, 1, 1]),
        index(OFF_KV, "RAGGED_OFFSET_KV", [b + 1, 1, 1, 1]),
        index(OFF_LSE, "RAGGED_OFFSET_LSE", [b + 1, 1, 1, 1]),
        index(SEQ_Q, "SEQ_LEN_Q", [b, 1, 1, 1]),
        index(SEQ_KV, "SEQ_LEN_KV", [b, 1, 1, 1]),
    ], [node(ports, attrs)])
    write(root / "graph.template.json", template)

    # Batch 1 has no query row; batch 2 has queries but no key (O = 0, LSE = -inf); padding rows
    # trail batches 0 and 2.
    ext_q, len_q = [3, 2, 4], [3, 0, 2]
    ext_kv, len_kv = [5, 3, 2], [4, 3, 0]
    sq, skv = max(ext_q), max(ext_kv)
    cases = []
    seed = 200 if d == 8 else 200 + d
    for form in ["bshd", "bhsd"]:
        for unit, idx, io, short, right in [("elements", "int32", "half", "fp16", 0),
                                            ("tokens", "int64", "bfloat16", "bf16", -1)]:
            seed += 1
            qd, qs = ragged(form, b, sq, hq, d)
            kd, ks = ragged(form, b, skv, hkv, d)
            ld, ls = ragged(form, b, sq, hq, 1)
            off_q, mul_q = offsets(ext_q, hq * d, unit)
            off_kv, mul_kv = offsets(ext_kv, hkv * d, unit)
            off_l, mul_l = offsets(ext_q, hq, unit)
            mask = "causal_br" if right == 0 else "nomask"
            cid = f"b3_hq{hq}_kv{hkv}_d{d}_{short}_{form}_{unit}_{idx}_{mask}"
            per = [
                {"uid": Q, "dims": qd, "strides": qs, "data_type": io,
                 "ragged_offset_multiplier": mul_q},
                {"uid": K, "dims": kd, "strides": ks, "data_type": io,
                 "ragged_offset_multiplier": mul_kv},
                {"uid": V, "dims": kd, "strides": ks, "data_type": io,
                 "ragged_offset_multiplier": mul_kv},
                {"uid": O, "dims": qd, "strides": qs, "data_type": io,
                 "ragged_offset_multiplier": mul_q},
                {"uid": LSE, "dims": ld, "strides": ls, "ragged_offset_multiplier": mul_l},
            ] + [{"uid": u, "data_type": idx} for u in (OFF_Q, OFF_KV, OFF_LSE, SEQ_Q, SEQ_KV)]
            cases.append({
                "id": cid,
                "values": {"io_data_type": io, "tensors": per,
                           "attributes": {"right_bound": right}},
                "metadata": metadata(seed, {OFF_Q: off_q, OFF_KV: off_kv, OFF_LSE: off_l,
                                            SEQ_Q: len_q, SEQ_KV: len_kv}),
            })
            name = f"quick/SdpaFwd/{family}#{cid}"
            expect(name, "pass")
    write(root / "sweep.json", {"version": 1, "cases": cases})
    write(root / "support.json", {"claims": {}, "version": 1})


# ---------------------------------------------------------------------------------------------
# Single-graph bundles: one feature each.

def single(name, g, inputs, outcome, why=None, seed=300):
    d = OUT / "single" / name / "Small"
    write(d / "Small.json", g)
    write(d / "Small.meta.json", metadata(seed, inputs))
    write(d / "Small.support.json", {"claims": {}, "version": 1})
    expect(f"quick/SdpaFwd/single/{name}/Small/Small", outcome, why)


def base_ragged(io="float", hq=4, hkv=2, d=8, ext_q=(3, 1, 4), ext_kv=(2, 5, 3), unit="tokens",
                idx="int32", stats=True, lse_dims=None, lse_strides=None):
    b = len(ext_q)
    sq, skv = max(ext_q), max(ext_kv)
    qd, qs = ragged("bshd", b, sq, hq, d)
    kd, ks = ragged("bshd", b, skv, hkv, d)
    off_q, mul_q = offsets(ext_q, hq * d, unit)
    off_kv, mul_kv = offsets(ext_kv, hkv * d, unit)
    tensors = [
        tensor(Q, "Q", qd, qs, io, OFF_Q, mul_q), tensor(K, "K", kd, ks, io, OFF_KV, mul_kv),
        tensor(V, "V", kd, ks, io, OFF_KV, mul_kv), tensor(O, "O", qd, qs, io, OFF_Q, mul_q),
        tensor(OFF_Q, "RAGGED_OFFSET_Q", [b + 1, 1, 1, 1], [1, 1, 1, 1], idx),
        tensor(OFF_KV, "RAGGED_OFFSET_KV", [b + 1, 1, 1, 1], [1, 1, 1, 1], idx),
    ]
    ports = {"q_tensor_uid": Q, "k_tensor_uid": K, "v_tensor_uid": V, "o_tensor_uid": O}
    if stats:
        tensors.append(tensor(LSE, "LSE", lse_dims or [b, hq, sq, 1],
                              lse_strides or [hq * sq, sq, 1, 1], "float"))
        ports["stats_tensor_uid"] = LSE
    return tensors, ports, {OFF_Q: off_q, OFF_KV: off_kv}, (b, sq, skv, hq, hkv, d)


def singles():
    # Dense Q/K/V/O in hipDNN's [B, H, S, D] order over BSHD memory, as upstream's dense bundles.
    b, hq, hkv, sq, skv, d = 2, 4, 2, 5, 7, 8
    dense = lambda h, s: ([b, h, s, d], [s * h * d, d, h * d, 1])
    qd, qs = dense(hq, sq)
    kd, ks = dense(hkv, skv)
    g = graph("dense_bshd", "half", [
        tensor(Q, "Q", qd, qs, "half"), tensor(K, "K", kd, ks, "half"),
        tensor(V, "V", kd, ks, "half"), tensor(O, "O", qd, qs, "half"),
    ], [node({"q_tensor_uid": Q, "k_tensor_uid": K, "v_tensor_uid": V, "o_tensor_uid": O},
             attributes(attn_scale_value=1 / d ** 0.5, left_bound=-1, right_bound=0,
                        diagonal_alignment="BOTTOM_RIGHT"))])
    single("dense_bshd_strides_causal_br_gqa", g, {}, "pass", seed=301)

    # The paged bundles' dialect: port uids flat in attributes, numpy data-type names, no
    # 'virtual' key; seq_len [B, 1, 1, 1] (configuration 2) and token-unit offsets.
    tensors, ports, inputs, (b, sq, skv, hq, hkv, d) = base_ragged(io="half", stats=False)
    for t in tensors:
        t.pop("virtual")
        t["data_type"] = {"half": "float16", "float": "float32"}.get(t["data_type"], t["data_type"])
    tensors += [
        {"name": "SEQ_LEN_Q", "uid": SEQ_Q, "dims": [b, 1, 1, 1], "strides": [1, 1, 1, 1],
         "data_type": "int32"},
        {"name": "SEQ_LEN_KV", "uid": SEQ_KV, "dims": [b, 1, 1, 1], "strides": [1, 1, 1, 1],
         "data_type": "int32"},
    ]
    flat = dict(ports, seq_len_q_tensor_uid=SEQ_Q, seq_len_kv_tensor_uid=SEQ_KV)
    flat.update(attributes(attn_scale_value=0.3, left_bound=1, right_bound=0,
                           diagonal_alignment="TOP_LEFT"))
    g = {"nodes": [{"type": "SdpaAttributes", "attributes": flat}], "tensors": tensors,
         "io_data_type": "float16", "compute_data_type": "float",
         "intermediate_data_type": "float", "name": "flat_dialect"}
    single("flat_dialect_padded_window", g, {**inputs, SEQ_Q: [2, 1, 4], SEQ_KV: [2, 3, 0]},
           "pass", seed=302)

    def with_scale(name, scale_tensor, scale_inputs, seed):
        tensors, ports, inputs, _ = base_ragged()
        attrs = attributes()
        if scale_tensor is not None:
            tensors.append(scale_tensor)
            ports["scale_tensor_uid"] = SCALE
        g = graph(name, "float", tensors, [node(ports, attrs)])
        single(name, g, {**inputs, **scale_inputs}, "pass", seed=seed)

    with_scale("scale_runtime_pass_by_value",
               tensor(SCALE, "SCALE", [1], [1], "float", is_runtime_pass_by_value=True),
               {SCALE: [0.3]}, 303)
    with_scale("scale_baked_value",
               tensor(SCALE, "SCALE", [1], [1], "float", value_type="Float32Value", value=0.2),
               {}, 304)
    with_scale("scale_default_one", None, {}, 305)

    tensors, ports, inputs, _ = base_ragged(io="bfloat16", unit="elements")
    g = graph("deprecated_bool", "bfloat16", tensors,
              [node(ports, attributes(causal_mask_bottom_right=True, attn_scale_value=0.25))])
    single("causal_mask_bottom_right_bool", g, inputs, "pass", seed=306)

    # Ragged Q/O with dense K/V (the host engine only).
    tensors, ports, inputs, (b, sq, skv, hq, hkv, d) = base_ragged(ext_kv=(5, 5, 5))
    kd, ks = [b, hkv, skv, d], [hkv * skv * d, skv * d, d, 1]
    tensors[1] = tensor(K, "K", kd, ks, "float")
    tensors[2] = tensor(V, "V", kd, ks, "float")
    tensors = [t for t in tensors if t["uid"] != OFF_KV]
    inputs.pop(OFF_KV)
    g = graph("mixed", "float", tensors,
              [node(ports, attributes(attn_scale_value=0.35, right_bound=0,
                                      diagonal_alignment="TOP_LEFT"))])
    single("ragged_q_dense_kv", g, inputs, "pass", seed=307)

    # Four offset tensors of their own, int64, element units.
    tensors, ports, inputs, (b, sq, skv, hq, hkv, d) = base_ragged(unit="elements", idx="int64")
    by_uid = {t["uid"]: t for t in tensors}
    by_uid[V]["ragged_offset_tensor_uid"] = OFF_K
    by_uid[O]["ragged_offset_tensor_uid"] = OFF_O
    tensors += [tensor(OFF_K, "RAGGED_OFFSET_V", [b + 1, 1, 1, 1], [1, 1, 1, 1], "int64"),
                tensor(OFF_O, "RAGGED_OFFSET_O", [b + 1, 1, 1, 1], [1, 1, 1, 1], "int64")]
    inputs[OFF_K] = inputs[OFF_KV]
    inputs[OFF_O] = inputs[OFF_Q]
    g = graph("separate_aux", "float", tensors,
              [node(ports, attributes(attn_scale_value=0.35))])
    single("four_offset_tensors_int64", g, inputs, "pass", seed=308)

    # Dense LSE written token-major, as upstream's ragged graphs do.
    # S_q = 5 and H_q = 4: the dims say which order they are in.
    b, sq, hq = 3, 5, 4
    tensors, ports, inputs, _ = base_ragged(ext_q=(3, 1, 5), lse_dims=[b, sq, hq, 1],
                                            lse_strides=[sq * hq, hq, 1, 1])
    g = graph("lse_token_major", "float", tensors, [node(ports, attributes(attn_scale_value=0.35))])
    single("dense_lse_bshd_dims", g, inputs, "pass", seed=309)
    tensors, ports, inputs, _ = base_ragged(ext_q=(3, 1, 5), lse_dims=[b, hq, sq, 1],
                                            lse_strides=[sq * hq, 1, hq, 1])
    g = graph("lse_token_strides", "float", tensors,
              [node(ports, attributes(attn_scale_value=0.35))])
    single("dense_lse_bhsd_dims_token_strides", g, inputs, "pass", seed=310)

    # seq_len of dims [B], as upstream's paged bundles write it.
    tensors, ports, inputs, (b, sq, skv, hq, hkv, d) = base_ragged()
    tensors += [tensor(SEQ_Q, "SEQ_LEN_Q", [b], [1], "int32"),
                tensor(SEQ_KV, "SEQ_LEN_KV", [b], [1], "int32")]
    ports.update(seq_len_q_tensor_uid=SEQ_Q, seq_len_kv_tensor_uid=SEQ_KV)
    g = graph("seq_len_rank1", "float", tensors, [node(ports, attributes(attn_scale_value=0.35))])
    single("seq_len_rank1", g, {**inputs, SEQ_Q: [3, 1, 2], SEQ_KV: [2, 5, 3]},
           "pass", seed=311)

    # Features the plugin declines by design.
    tensors, ports, inputs, _ = base_ragged()
    g = graph("dropout", "float", tensors,
              [node(ports, attributes(dropout_probability=0.1))])
    single("dropout_declined", g, inputs, "declined", seed=312)

# ---------------------------------------------------------------------------------------------
# Paged K/V caches and attention sinks (kernels/core/paged-kv-and-sinks.md).

# Upstream's own paged bundle, copied verbatim: ROCm/rocm-libraries commit
# 7162ca5901d7e0d2048894d0ce7954681bb5e4a1,
# dnn-providers/integration-tests/integration-test-bundles/quick/SdpaFwd/paged/fp16/
# hd128_page16_multiseq/Small/Small.json. Its tensor data files are not copied: the metadata below
# pins the lengths and page tables (the values of paged-kv-and-sinks.md §8's illustration) and the
# rest is random, checked against the shim's float64 oracle like every other case.
UPSTREAM_PAGED = {
    "nodes": [{"type": "SdpaAttributes", "attributes": {
        "q_tensor_uid": 1, "k_tensor_uid": 2, "v_tensor_uid": 3, "o_tensor_uid": 4,
        "page_table_k_tensor_uid": 5, "page_table_v_tensor_uid": 6,
        "seq_len_q_tensor_uid": 7, "seq_len_kv_tensor_uid": 8,
        "generate_stats": None, "alibi_mask": False, "padding_mask": False,
        "causal_mask": False, "causal_mask_bottom_right": False, "dropout_probability": None,
        "attn_scale_value": 0.08838834764831845, "left_bound": -1, "right_bound": 0,
        "max_seq_len_kv": 512, "diagonal_alignment": "TOP_LEFT", "mma_core_mode": "float",
        "implementation": "AUTO"}}],
    "tensors": [
        {"name": "Q", "uid": 1, "dims": [1, 16, 64, 128], "strides": [131072, 128, 2048, 1],
         "data_type": "float16"},
        {"name": "K", "uid": 2, "dims": [128, 2, 16, 128], "strides": [4096, 128, 256, 1],
         "data_type": "float16"},
        {"name": "V", "uid": 3, "dims": [128, 2, 16, 128], "strides": [4096, 128, 256, 1],
         "data_type": "float16"},
        {"name": "O", "uid": 4, "dims": [1, 16, 64, 128], "strides": [131072, 128, 2048, 1],
         "data_type": "float16"},
        {"name": "PAGE_TABLE_K", "uid": 5, "dims": [3, 32], "strides": [32, 1],
         "data_type": "int32"},
        {"name": "PAGE_TABLE_V", "uid": 6, "dims": [3, 32], "strides": [32, 1],
         "data_type": "int32"},
        {"name": "SEQ_LEN_Q", "uid": 7, "dims": [3], "strides": [1], "data_type": "int32"},
        {"name": "SEQ_LEN_KV", "uid": 8, "dims": [3], "strides": [1], "data_type": "int32"},
    ],
    "io_data_type": "float16", "compute_data_type": "float", "intermediate_data_type": "float",
    "name": "sdpa_paged_hd128_page16_multiseq",
}


def page_table(lens, page_size, columns, pages, step, start):
    """Rows of page ids: sequence pages drawn from a permutation of the pool (p -> step·p + start
    mod pages, step coprime to pages); entries a sequence does not read hold -1, which must never
    be read."""
    rows, n = [], 0
    for length in lens:
        used = -(-length // page_size)
        row = [(step * (n + i) + start) % pages for i in range(used)]
        n += used
        rows.append(row + [-1] * (columns - used))
    return [x for row in rows for x in row]


def pool(uid, name, pages, hkv, ps, d, io):
    """A token-major (NHD) pool [P, H_kv, ps, D], upstream's strides."""
    return tensor(uid, name, [pages, hkv, ps, d], [ps * hkv * d, d, hkv * d, 1], io)


def paged_cases():
    lq, lkv = [16, 16, 32], [300, 16, 512]
    d = OUT / "paged" / "fp16" / "hd128_page16_multiseq" / "Small"
    write(d / "Small.json", UPSTREAM_PAGED)
    write(d / "Small.meta.json", metadata(400, {
        5: page_table(lkv, 16, 32, 128, 37, 5), 6: page_table(lkv, 16, 32, 128, 53, 11),
        7: lq, 8: lkv}))
    write(d / "Small.support.json", {"claims": {}, "version": 1})
    expect("quick/SdpaFwd/paged/fp16/hd128_page16_multiseq/Small/Small", "pass")

    PT_K, PT_V, SINK = 20, 21, 22

    def paged_graph(name, io, lq, lkv, hq=4, hkv=2, dim=8, ps=4, columns=4, pages=13,
                    form="packed", attrs=None, sinks=False, stats=False, rank4_v=False,
                    seed=401):
        b = len(lq)
        if form == "packed":
            t = sum(lq) + 1
            qd, qs = [1, hq, t, dim], [t * hq * dim, dim, hq * dim, 1]
            ld, ls = [1, hq, t, 1], [t * hq, t, 1, 1]
        else:
            s = max(lq)
            qd, qs = [b, hq, s, dim], [s * hq * dim, dim, hq * dim, 1]
            ld, ls = [b, hq, s, 1], [hq * s, s, 1, 1]
        tensors = [
            tensor(Q, "Q", qd, qs, io), pool(K, "K", pages, hkv, ps, dim, io),
            pool(V, "V", pages, hkv, ps, dim, io), tensor(O, "O", qd, qs, io),
            tensor(PT_K, "PAGE_TABLE_K", [b, columns], [columns, 1], "int32"),
            tensor(PT_V, "PAGE_TABLE_V", *(([b, 1, columns, 1], [columns, 1, 1, 1]) if rank4_v
                                          else ([b, columns], [columns, 1])), "int32"),
            tensor(SEQ_Q, "SEQ_LEN_Q", [b], [1], "int32"),
            tensor(SEQ_KV, "SEQ_LEN_KV", [b], [1], "int32"),
        ]
        ports = {"q_tensor_uid": Q, "k_tensor_uid": K, "v_tensor_uid": V, "o_tensor_uid": O,
                 "page_table_k_tensor_uid": PT_K, "page_table_v_tensor_uid": PT_V,
                 "seq_len_q_tensor_uid": SEQ_Q, "seq_len_kv_tensor_uid": SEQ_KV}
        if stats:
            tensors.append(tensor(LSE, "LSE", ld, ls, "float"))
            ports["stats_tensor_uid"] = LSE
        if sinks:
            tensors.append(tensor(SINK, "SINK", [hq], [1], "float"))
            ports["sink_token_tensor_uid"] = SINK
        g = graph(name, io, tensors, [node(ports, attributes(**(attrs or {})))])
        inputs = {PT_K: page_table(lkv, ps, columns, pages, 5, 1),
                  PT_V: page_table(lkv, ps, columns, pages, 3, 7), SEQ_Q: lq, SEQ_KV: lkv}
        if sinks:
            inputs[SINK] = [0.5, -1.25, 2.0, -30.0][:hq]
        single(name, g, inputs, "pass", seed=seed)

    causal_br = {"attn_scale_value": 0.35, "left_bound": -1, "right_bound": 0,
                 "diagonal_alignment": "BOTTOM_RIGHT", "max_seq_len_kv": 16}
    # Decode: one query per sequence over a paged context (a partial last page, a one-key
    # context), bottom-right causal so each query sees its whole context; sinks and the LSE.
    paged_graph("paged_decode_sinks_bf16", "bfloat16", [1, 1, 1], [13, 1, 7], attrs=causal_br,
                sinks=True, stats=True, rank4_v=True, seed=401)
    # Chunked prefill: queries are the last Lq of Lkv keys; padded Q [B, H, S, D]; a sequence
    # with no key (O = 0, LSE = −∞).
    paged_graph("paged_prefill_padded_causal_br", "float", [3, 2, 1], [9, 0, 4], form="padded",
                attrs=causal_br, stats=True, seed=402)
    # Packed prefill, no mask, V's table in cuDNN's rank-4 form, sinks without an LSE.
    paged_graph("paged_prefill_packed_sinks_fp16", "half", [2, 4], [6, 11],
                attrs={"attn_scale_value": 0.3}, sinks=True, rank4_v=True, seed=403)

    # Ragged Q/O (cuDNN's "paged THD queries") over paged K/V, top-left causal.
    tensors, ports, inputs, (b, sq, skv, hq, hkv, dim) = base_ragged(ext_q=(3, 1, 4), stats=False)
    tensors = [t for t in tensors if t["uid"] not in (K, V, OFF_KV)]
    inputs.pop(OFF_KV)
    lkv = [5, 9, 4]
    pages, ps, columns = 11, 4, 3
    tensors += [
        pool(K, "K", pages, hkv, ps, dim, "float"), pool(V, "V", pages, hkv, ps, dim, "float"),
        tensor(PT_K, "PAGE_TABLE_K", [b, columns], [columns, 1], "int32"),
        tensor(PT_V, "PAGE_TABLE_V", [b, columns], [columns, 1], "int32"),
        tensor(SEQ_Q, "SEQ_LEN_Q", [b], [1], "int32"),
        tensor(SEQ_KV, "SEQ_LEN_KV", [b], [1], "int32"),
    ]
    ports.update(page_table_k_tensor_uid=PT_K, page_table_v_tensor_uid=PT_V,
                 seq_len_q_tensor_uid=SEQ_Q, seq_len_kv_tensor_uid=SEQ_KV)
    g = graph("paged_ragged_q", "float", tensors,
              [node(ports, attributes(attn_scale_value=0.35, right_bound=0,
                                      diagonal_alignment="TOP_LEFT"))])
    single("paged_ragged_q", g, {**inputs, SEQ_Q: [3, 1, 4], SEQ_KV: lkv,
                                 PT_K: page_table(lkv, ps, columns, pages, 4, 2),
                                 PT_V: page_table(lkv, ps, columns, pages, 7, 0)},
           "pass", seed=405)

    # Sinks on a non-paged ragged graph, with the LSE (sink-inclusive) and a row with no key.
    tensors, ports, inputs, (b, sq, skv, hq, hkv, dim) = base_ragged(ext_kv=(2, 0, 3))
    tensors.append(tensor(SINK, "SINK", [1, hq, 1, 1], [hq, 1, 1, 1], "float"))
    ports["sink_token_tensor_uid"] = SINK
    g = graph("ragged_sinks", "float", tensors,
              [node(ports, attributes(attn_scale_value=0.35, right_bound=0,
                                      diagonal_alignment="BOTTOM_RIGHT"))])
    single("sinks_ragged_lse", g, {**inputs, SINK: [1.0, -0.5, 0.25, 4.0]}, "pass", seed=404)



def main():
    shutil.rmtree(HERE / "bundles", ignore_errors=True)
    packed_sweep()
    packed_sweep("ragged_packed_d64", d=64, half_only=True)
    padded_sweep()
    padded_sweep("ragged_padded_d64", d=64)
    singles()
    paged_cases()
    write(HERE / "expectations.json", {
        "about": "Expected outcome of every corpus case under `hipdnn-shim bundle` on the host "
                 "engine. 'until' names the work that turns a declined case into a pass; when it "
                 "lands, the corpus test fails until the entry is flipped to pass.",
        "cases": dict(sorted(expectations.items())),
    })


if __name__ == "__main__":
    main()
