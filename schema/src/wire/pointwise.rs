//! `PointwiseAttributes` ↔ the wire table (all twelve fields, so a graph round-trips unchanged).

use super::fb;
use crate::model::{PointwiseAttributes, PointwiseMode};

table_codec! {
    PointwiseAttributes <=> PointwiseAttributes / PointwiseAttributesArgs;
    copy: [
        relu_lower_clip, relu_upper_clip, relu_lower_clip_slope, axis_tensor_uid,
        in_0_tensor_uid, in_1_tensor_uid, in_2_tensor_uid, out_0_tensor_uid, swish_beta,
        elu_alpha, softplus_beta,
    ];
    enums: [operation: PointwiseMode / PointwiseMode];
    strings: [];
}

#[cfg(test)]
mod tests {
    use flatbuffers::FlatBufferBuilder;

    use super::*;

    /// The vtable slots upstream's layout puts each field in (index i ⇒ offset 4 + 2i), checked
    /// by writing raw slots the way an upstream producer would and reading them back.
    #[test]
    fn fields_sit_in_upstream_slots() {
        let mut fbb = FlatBufferBuilder::new();
        let start = fbb.start_table();
        fbb.push_slot::<i8>(4, 42, 0); // operation = SUB
        fbb.push_slot::<f32>(8, 6.0, 0.0); // relu_upper_clip
        fbb.push_slot::<i64>(12, 70, 0); // axis_tensor_uid
        fbb.push_slot::<i64>(14, 71, 0); // in_0_tensor_uid
        fbb.push_slot::<i64>(16, 72, 0); // in_1_tensor_uid
        fbb.push_slot::<i64>(20, 73, 0); // out_0_tensor_uid
        fbb.push_slot::<f32>(22, 0.5, 0.0); // swish_beta
        fbb.push_slot::<f32>(26, 2.0, 0.0); // softplus_beta
        let end = fbb.end_table(start);
        fbb.finish_minimal(end);
        let table = flatbuffers::root::<fb::PointwiseAttributes>(fbb.finished_data())
            .unwrap_or_else(|e| panic!("{e}"));
        let p = decode(&table);
        assert_eq!(p.operation, PointwiseMode::SUB);
        assert_eq!(p.relu_lower_clip, None);
        assert_eq!(p.relu_upper_clip, Some(6.0));
        assert_eq!(p.axis_tensor_uid, Some(70));
        assert_eq!(p.in_0_tensor_uid, 71);
        assert_eq!(p.in_1_tensor_uid, Some(72));
        assert_eq!(p.in_2_tensor_uid, None);
        assert_eq!(p.out_0_tensor_uid, 73);
        assert_eq!(p.swish_beta, Some(0.5));
        assert_eq!(p.elu_alpha, None);
        assert_eq!(p.softplus_beta, Some(2.0));
    }

    #[test]
    fn unknown_mode_survives_a_round_trip() {
        let p = PointwiseAttributes {
            operation: PointwiseMode(99),
            in_0_tensor_uid: 1,
            out_0_tensor_uid: 2,
            elu_alpha: Some(1.5),
            ..PointwiseAttributes::default()
        };
        let mut fbb = FlatBufferBuilder::new();
        let root = encode(&mut fbb, &p);
        fbb.finish_minimal(root);
        let table = flatbuffers::root::<fb::PointwiseAttributes>(fbb.finished_data())
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(decode(&table), p);
    }
}
