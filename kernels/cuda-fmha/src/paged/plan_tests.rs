use super::*;
use ragged_core::problem::test_support::{dense, paged_packed};
use ragged_core::problem::{IndexWidth, Multiplier, Offsets};

const B: i64 = 3;

fn rejected(p: &RaggedSdpaProblem, uid: i64, field: &str) -> String {
    let text = plan(p).expect_err("declined").to_string();
    assert!(text.starts_with(&format!("tensor uid {uid}: ")), "{text}");
    assert!(text.contains(field), "{text}");
    text
}

#[test]
fn splits_fill_the_device_and_cut_long_contexts() {
    // The decode benchmark: B = 64, H_kv = 8, contexts up to 32k keys: 2048 keys per split.
    assert_eq!(choose_split(32768, 512, 1 << 20), (16, 2048));
    // 64 x 4k decode (the bound one past 4096): the pairs fill the target, no cut below
    // LONG_CONTEXT, so one split and no combine.
    assert_eq!(choose_split(4097, 512, 1 << 20), (1, 4112));
    assert_eq!(choose_split(LONG_CONTEXT, 512, 1 << 20), (1, LONG_CONTEXT));
    assert_eq!(choose_split(LONG_CONTEXT + 1, 512, 1 << 20), (5, 1648));
    // Short contexts: one split (the split kernel writes O itself).
    assert_eq!(choose_split(200, 512, 1 << 20), (1, 208));
    assert_eq!(choose_split(256, 8, 1 << 20), (1, 256));
    // Few (sequence, head) pairs: enough splits for the target, none under 256 keys.
    assert_eq!(choose_split(4096, 8, 1 << 20), (16, 256));
    assert_eq!(choose_split(1000, 2, 1 << 20), (4, 256));
    // The chunk is a multiple of 16 and covers the bound.
    let (splits, chunk) = choose_split(5000, 16, 1 << 20);
    assert_eq!(chunk % 16, 0);
    assert!(
        splits * chunk >= 5000 && (splits - 1) * chunk < 5000,
        "{splits} {chunk}"
    );
    // Partials beyond the cap: one split.
    assert_eq!(choose_split(32768, 1, PARTIALS_CAP), (1, 32768));
    assert_eq!(choose_split(32768, 1, PARTIALS_CAP / 4).0, 4);
}

#[test]
fn row_groups_spread_prefill_tiles_and_leave_decode_alone() {
    // Decode: one row tile, one group whatever the batch.
    assert_eq!(choose_row_groups(1, 1), 1);
    assert_eq!(choose_row_groups(1, 512), 1);
    // Prefill: enough groups for the target, never more than the tiles.
    assert_eq!(choose_row_groups(1000, 8), ROW_GROUP_TARGET_BLOCKS / 8);
    assert_eq!(choose_row_groups(5, 8), 5);
    assert_eq!(choose_row_groups(1000, 1024), 1);
}

#[test]
fn upstreams_bundle_shape_is_planned_with_its_workspace() {
    // quick/SdpaFwd/paged/fp16/hd128_page16_multiseq: Q/O [1, 16, 64, 128], pools [128, 2, 16,
    // 128], tables [3, 32], max_seq_len_kv 512.
    let mut p = paged_packed(B, (16, 2, 128), 64, (128, 16, 32));
    for t in [&mut p.q, &mut p.k, &mut p.v, &mut p.o] {
        t.dtype = DataType::F16;
    }
    let plan = plan(&p).expect("planned");
    assert_eq!(plan.kernel.split(), "ragged_paged_split_f16_d128");
    assert_eq!((plan.batch, plan.heads_q, plan.heads_kv), (3, 16, 2));
    assert_eq!((plan.q_rows, plan.packed, plan.max_kv), (64, true, 512));
    assert_eq!(
        plan.q,
        RowStrides {
            batch: 0,
            seq: 2048,
            head: 128
        }
    );
    assert_eq!((plan.k.page, plan.k.head, plan.k.slot), (4096, 128, 256));
    assert_eq!((plan.k.pages, plan.k.page_size), (128, 16));
    // 64 packed rows over 3 sequences, 8 heads a group: 11 row tiles a sequence on average, each
    // its own block; then 6 · 11 blocks and 512 keys: two splits of 256 keys.
    assert_eq!(plan.row_groups, 11);
    assert_eq!((plan.splits, plan.chunk), (2, 256));
    assert_eq!((plan.ws_rows, plan.ws_batch), (64, 0));
    // Records 3 · 24 B -> LSE partials at 256: 2 · 64 · 16 floats (8 KiB) -> O partials at
    // 256 + 8192, 2 · 64 · 16 · 128 floats; then 256 B of slack for aligning the pointer.
    assert_eq!(
        plan.workspace,
        PagedWorkspace {
            records: 0,
            lse: 256,
            o: 256 + 8192,
            total_bytes: 256 + 8192 + 2 * 64 * 16 * 128 * 4 + 256,
        }
    );
    assert_eq!(plan.split_blocks(), 2 * 2 * 3);
    assert_eq!(plan.combine_grid(), (64, 4));
}

#[test]
fn one_split_needs_no_workspace() {
    let p = paged_packed(B, (4, 2, 64), 4, (10, 16, 2));
    let plan = plan(&p).expect("planned");
    assert_eq!((plan.splits, plan.chunk), (1, 32));
    assert_eq!(plan.workspace_bytes(), 0);
}

#[test]
fn padded_queries_and_head_major_pools_are_planned() {
    let mut p = paged_packed(B, (8, 2, 64), 5, (40, 32, 4));
    for t in [&mut p.q, &mut p.o] {
        t.dims = [B, 8, 5, 64];
        t.strides = [5 * 8 * 64, 5 * 64, 64, 1];
    }
    for t in [&mut p.k, &mut p.v] {
        t.strides = [2 * 32 * 64, 32 * 64, 64, 1];
    }
    if let Some(paged) = p.paged.as_mut() {
        paged.query = QueryForm::Padded;
    }
    p.stats = Some(Operand {
        role: "stats_tensor_uid",
        dtype: DataType::F32,
        ..dense("stats_tensor_uid", 5, [B, 8, 5, 1], [40, 5, 1, 1])
    });
    let plan = plan(&p).expect("planned");
    assert!(!plan.packed);
    assert_eq!(
        plan.q,
        RowStrides {
            batch: 2560,
            seq: 64,
            head: 320
        }
    );
    assert_eq!((plan.k.page, plan.k.head, plan.k.slot), (4096, 2048, 64));
    assert_eq!(
        plan.lse,
        Some((
            5,
            RowStrides {
                batch: 40,
                seq: 1,
                head: 5
            }
        ))
    );
    assert_eq!((plan.ws_rows, plan.ws_batch), (15, 5));
}

#[test]
fn what_the_kernels_do_not_do_is_declined_by_name() {
    let base = || paged_packed(B, (4, 2, 64), 8, (10, 16, 4));
    let mut p = base();
    for t in [&mut p.q, &mut p.k, &mut p.v, &mut p.o] {
        t.dtype = DataType::F32;
    }
    rejected(&p, 1, "q_tensor_uid data type");
    let mut p = base();
    p.v.dtype = DataType::F16;
    rejected(&p, 3, "v_tensor_uid data type");
    let mut p = base();
    for t in [&mut p.q, &mut p.o] {
        t.dims[3] = 80;
        t.strides = [8 * 4 * 80, 80, 4 * 80, 1];
    }
    p.k.dims[3] = 80;
    p.v.dims[3] = 80;
    let text = rejected(&p, 1, "head dims");
    assert!(
        text.contains("= 80/80, need one of 64/64, 96/96, 128/128, 256/256, 192/128"),
        "{text}"
    );
    let mut p = base();
    p.q.ragged = Some(Offsets {
        uid: 10,
        width: IndexWidth::I32,
        multiplier: Multiplier::ONE,
    });
    if let Some(paged) = p.paged.as_mut() {
        paged.query = QueryForm::Ragged;
    }
    rejected(&p, 1, "ragged_offset_tensor_uid on a paged graph");
    let mut p = base();
    p.k.strides = [16 * 2 * 64 + 4, 64, 128, 1];
    let text = rejected(&p, 2, "page pool strides");
    assert!(text.contains("NHD or head-major HND"), "{text}");
    let mut p = base();
    p.v.alignment = 8;
    rejected(&p, 3, "v_tensor_uid alignment");
    let mut p = base();
    p.scale = ScalePlan::DeviceTensor {
        uid: 30,
        data_type: ragged_core::problem::ScalarType::Float,
    };
    rejected(&p, 30, "scale_tensor_uid residency");
    let mut p = base();
    p.stats = Some(Operand {
        dtype: DataType::F32,
        ragged: Some(Offsets {
            uid: 12,
            width: IndexWidth::I32,
            multiplier: Multiplier::ONE,
        }),
        ..dense("stats_tensor_uid", 5, [1, 8, 4, 1], [32, 4, 1, 1])
    });
    rejected(&p, 5, "stats_tensor_uid ragged_offset_tensor_uid");
    let mut p = base();
    p.seq_len_kv = None;
    rejected(&p, 1, "seq_len_kv_tensor_uid");
}

#[test]
fn sinks_are_planned_with_their_stride() {
    let mut p = paged_packed(B, (4, 2, 128), 8, (10, 16, 4));
    p.sinks = Some(ragged_core::problem::Sinks {
        uid: 10,
        heads: 4,
        stride: 1,
        rank4: false,
        alignment: 4,
    });
    assert_eq!(plan(&p).expect("planned").sinks, Some((10, 1)));
}
