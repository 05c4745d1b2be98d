//! Typed access to one JSON object, with every error naming the full key path.

use serde_json::{Map, Value};

use crate::error::SchemaError;

pub(super) struct Obj<'a> {
    map: &'a Map<String, Value>,
    path: String,
}

pub(super) fn field_error(path: &str, detail: impl Into<String>) -> SchemaError {
    SchemaError::JsonField {
        path: path.to_string(),
        detail: detail.into(),
    }
}

/// A short description of a JSON value for error messages.
pub(super) fn describe(v: &Value) -> String {
    match v {
        Value::Null => "null".to_string(),
        Value::Bool(b) => format!("boolean {b}"),
        Value::Number(n) => format!("number {n}"),
        Value::String(s) => format!("string {s:?}"),
        Value::Array(_) => "an array".to_string(),
        Value::Object(_) => "an object".to_string(),
    }
}

impl<'a> Obj<'a> {
    pub(super) fn new(value: &'a Value, path: String) -> Result<Obj<'a>, SchemaError> {
        match value {
            Value::Object(map) => Ok(Obj { map, path }),
            other => Err(field_error(
                &path,
                format!("expected an object, got {}", describe(other)),
            )),
        }
    }

    pub(super) fn key_path(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    /// The value under `key`; absent and `null` are both `None` (null means unset upstream).
    pub(super) fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    pub(super) fn required(&self, key: &str) -> Result<&'a Value, SchemaError> {
        self.get(key)
            .ok_or_else(|| field_error(&self.key_path(key), "required key is missing"))
    }

    pub(super) fn sub(&self, key: &str) -> Result<Option<Obj<'a>>, SchemaError> {
        self.get(key)
            .map(|v| Obj::new(v, self.key_path(key)))
            .transpose()
    }

    pub(super) fn string(&self, key: &str) -> Result<Option<&'a str>, SchemaError> {
        self.get(key)
            .map(|v| {
                v.as_str().ok_or_else(|| {
                    field_error(
                        &self.key_path(key),
                        format!("expected a string, got {}", describe(v)),
                    )
                })
            })
            .transpose()
    }

    pub(super) fn required_string(&self, key: &str) -> Result<&'a str, SchemaError> {
        self.required(key)?;
        self.string(key)?
            .ok_or_else(|| field_error(&self.key_path(key), "required key is missing"))
    }

    pub(super) fn boolean(&self, key: &str) -> Result<Option<bool>, SchemaError> {
        self.get(key)
            .map(|v| {
                v.as_bool().ok_or_else(|| {
                    field_error(
                        &self.key_path(key),
                        format!("expected a boolean, got {}", describe(v)),
                    )
                })
            })
            .transpose()
    }

    pub(super) fn i64(&self, key: &str) -> Result<Option<i64>, SchemaError> {
        self.get(key)
            .map(|v| as_i64(v, &self.key_path(key)))
            .transpose()
    }

    pub(super) fn required_i64(&self, key: &str) -> Result<i64, SchemaError> {
        as_i64(self.required(key)?, &self.key_path(key))
    }

    pub(super) fn i32(&self, key: &str) -> Result<Option<i32>, SchemaError> {
        self.i64(key)?
            .map(|v| {
                i32::try_from(v).map_err(|_| {
                    field_error(
                        &self.key_path(key),
                        format!("{v} does not fit a 32-bit integer"),
                    )
                })
            })
            .transpose()
    }

    pub(super) fn f32(&self, key: &str) -> Result<Option<f32>, SchemaError> {
        self.get(key)
            .map(|v| {
                let path = self.key_path(key);
                let x = v.as_f64().ok_or_else(|| {
                    field_error(&path, format!("expected a number, got {}", describe(v)))
                })?;
                narrow_f32(x, &path)
            })
            .transpose()
    }

    pub(super) fn i64_array(&self, key: &str) -> Result<Vec<i64>, SchemaError> {
        let path = self.key_path(key);
        match self.required(key)? {
            Value::Array(items) => items
                .iter()
                .enumerate()
                .map(|(i, v)| as_i64(v, &format!("{path}[{i}]")))
                .collect(),
            other => Err(field_error(
                &path,
                format!("expected an array of integers, got {}", describe(other)),
            )),
        }
    }

    pub(super) fn array(&self, key: &str) -> Result<&'a [Value], SchemaError> {
        match self.required(key)? {
            Value::Array(items) => Ok(items),
            other => Err(field_error(
                &self.key_path(key),
                format!("expected an array, got {}", describe(other)),
            )),
        }
    }
}

/// The wire fields are 32-bit floats, so rounding to f32 is the format's own precision; a finite
/// number beyond f32's range would silently become an infinity (a scale of 1e39 an infinite
/// scale), so that is an error instead.
pub(super) fn narrow_f32(x: f64, path: &str) -> Result<f32, SchemaError> {
    let narrowed = x as f32;
    if x.is_finite() && !narrowed.is_finite() {
        return Err(field_error(
            path,
            format!("{x} is beyond the range of a 32-bit float"),
        ));
    }
    Ok(narrowed)
}

pub(super) fn as_i64(v: &Value, path: &str) -> Result<i64, SchemaError> {
    v.as_i64().ok_or_else(|| {
        field_error(
            path,
            format!("expected a 64-bit signed integer, got {}", describe(v)),
        )
    })
}

/// A wire enum number.
pub(super) fn wire_i8(v: &Value, path: &str) -> Result<i8, SchemaError> {
    let n = as_i64(v, path)?;
    i8::try_from(n)
        .map_err(|_| field_error(path, format!("{n} is not a wire enum value (-128..=127)")))
}

/// An enum written by name or by wire number; absent is `None`.
pub(super) fn read_enum<E>(
    o: &Obj<'_>,
    key: &str,
    by_name: fn(&str) -> Option<E>,
    by_wire: fn(i8) -> E,
) -> Result<Option<E>, SchemaError> {
    let path = o.key_path(key);
    o.get(key)
        .map(|v| match v {
            Value::String(s) => by_name(s).ok_or_else(|| SchemaError::UnknownEnumString {
                path: path.clone(),
                value: s.clone(),
            }),
            Value::Number(_) => wire_i8(v, &path).map(by_wire),
            other => Err(field_error(
                &path,
                format!("expected a string, got {}", describe(other)),
            )),
        })
        .transpose()
}
