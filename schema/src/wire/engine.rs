//! `EngineConfig` and `EngineDetails` ↔ the wire tables.

use flatbuffers::FlatBufferBuilder;

use super::{fb, verification};
use crate::error::SchemaError;
use crate::model::{EngineConfig, EngineDetails, KnobSetting, KnobValue};

pub(super) fn decode_config(bytes: &[u8]) -> Result<EngineConfig, SchemaError> {
    let c = flatbuffers::root::<fb::EngineConfig>(bytes).map_err(verification("EngineConfig"))?;
    let knobs = c
        .knobs()
        .map(|ks| ks.iter().map(|k| decode_knob(&k)).collect())
        .unwrap_or_default();
    Ok(EngineConfig {
        engine_id: c.engine_id(),
        knobs,
        ranking_metric: c.ranking_metric().map(str::to_string),
    })
}

fn decode_knob(k: &fb::KnobSetting<'_>) -> KnobSetting {
    let value = if let Some(v) = k.value_as_int_value() {
        KnobValue::Int(v.value())
    } else if let Some(v) = k.value_as_float_value() {
        KnobValue::Float(v.value())
    } else if let Some(v) = k.value_as_string_value() {
        KnobValue::String(v.value().unwrap_or_default().to_string())
    } else {
        KnobValue::Unset
    };
    KnobSetting {
        knob_id: k.knob_id().unwrap_or_default().to_string(),
        value,
    }
}

pub(super) fn encode_config(config: &EngineConfig) -> Vec<u8> {
    let mut fbb = FlatBufferBuilder::new();
    let knobs: Vec<_> = config
        .knobs
        .iter()
        .map(|k| {
            let (value_type, value) = match &k.value {
                KnobValue::Int(v) => (
                    fb::KnobValue::IntValue,
                    Some(
                        fb::IntValue::create(&mut fbb, &fb::IntValueArgs { value: *v })
                            .as_union_value(),
                    ),
                ),
                KnobValue::Float(v) => (
                    fb::KnobValue::FloatValue,
                    Some(
                        fb::FloatValue::create(&mut fbb, &fb::FloatValueArgs { value: *v })
                            .as_union_value(),
                    ),
                ),
                KnobValue::String(v) => {
                    let s = fbb.create_string(v);
                    (
                        fb::KnobValue::StringValue,
                        Some(
                            fb::StringValue::create(
                                &mut fbb,
                                &fb::StringValueArgs { value: Some(s) },
                            )
                            .as_union_value(),
                        ),
                    )
                }
                KnobValue::Unset => (fb::KnobValue::NONE, None),
            };
            let knob_id = fbb.create_string(&k.knob_id);
            fb::KnobSetting::create(
                &mut fbb,
                &fb::KnobSettingArgs {
                    knob_id: Some(knob_id),
                    value_type,
                    value,
                },
            )
        })
        .collect();
    let knobs = fbb.create_vector(&knobs);
    let ranking_metric = config
        .ranking_metric
        .as_deref()
        .map(|m| fbb.create_string(m));
    let root = fb::EngineConfig::create(
        &mut fbb,
        &fb::EngineConfigArgs {
            engine_id: config.engine_id,
            knobs: Some(knobs),
            ranking_metric,
        },
    );
    fbb.finish(root, None);
    fbb.finished_data().to_vec()
}

pub(super) fn encode_details(details: &EngineDetails) -> Vec<u8> {
    let mut fbb = FlatBufferBuilder::new();
    let knobs = fbb.create_vector::<flatbuffers::WIPOffset<fb::Knob>>(&[]);
    let behavior_notes =
        (!details.behavior_notes.is_empty()).then(|| fbb.create_vector(&details.behavior_notes));
    let name = details.name.as_deref().map(|n| fbb.create_string(n));
    let root = fb::EngineDetails::create(
        &mut fbb,
        &fb::EngineDetailsArgs {
            engine_id: details.engine_id,
            knobs: Some(knobs),
            behavior_notes,
            name,
            candidate_page: None,
        },
    );
    fbb.finish(root, None);
    fbb.finished_data().to_vec()
}

pub(super) fn decode_details(bytes: &[u8]) -> Result<EngineDetails, SchemaError> {
    let d = flatbuffers::root::<fb::EngineDetails>(bytes).map_err(verification("EngineDetails"))?;
    Ok(EngineDetails {
        engine_id: d.engine_id(),
        name: d.name().map(str::to_string),
        behavior_notes: d
            .behavior_notes()
            .map(|v| v.iter().collect())
            .unwrap_or_default(),
    })
}
