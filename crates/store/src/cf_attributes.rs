//! A variable's CF encoding read from its attributes the way `xr.open_zarr` reads them with
//! its defaults: for Zarr v2 the array's `fill_value` is its `_FillValue`; for v3 `_FillValue`
//! is an attribute (floats base64-encoded by xarray); `missing_value`, `scale_factor`,
//! `add_offset` and `_Unsigned` are attributes in both.

use base64::Engine;
use serde_json::{Map, Value};
use zarrpipe_core::{CfDecoding, DType};

/// The encoding attributes of a variable, as `info` shows them.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize)]
pub struct Encoding {
    /// What decoding does to the stored values (`None`: nothing).
    pub decoding: Option<CfDecoding>,
    /// `valid_min`, `valid_max`, `valid_range`: shown, not applied (as in xarray).
    pub valid: Map<String, Value>,
}

/// Reads the encoding of an array of `dtype` from its attributes; `zarr_fill_value` is a v2
/// array's `fill_value` (`None` for v3 or `null`).
pub(crate) fn read_encoding(
    dtype: DType,
    attributes: &Map<String, Value>,
    zarr_fill_value: Option<&Value>,
    zarr_format: u8,
) -> Result<Encoding, String> {
    let valid = ["valid_min", "valid_max", "valid_range"]
        .into_iter()
        .filter_map(|key| Some((key.to_string(), attributes.get(key)?.clone())))
        .collect();
    if dtype == DType::Bool {
        return Ok(Encoding {
            decoding: None,
            valid,
        });
    }
    let read_as = unsigned(dtype, attributes)?;
    let element = read_as.unwrap_or(dtype);
    let scale_factor = number(attributes, "scale_factor")?;
    let add_offset = number(attributes, "add_offset")?;
    let fill = match (zarr_format, zarr_fill_value) {
        (2, Some(value)) if !value.is_null() => numbers(value, dtype, 2, "fill_value")?,
        _ => match attributes.get("_FillValue") {
            Some(value) => numbers(value, dtype, zarr_format, "_FillValue")?,
            None => Vec::new(),
        },
    };
    // `_Unsigned` turns the `_FillValue` (not `missing_value`) into the unsigned pattern of
    // the same bits, as xarray does.
    let fill = fill
        .into_iter()
        .map(|value| reinterpret(value, dtype, read_as))
        .collect::<Vec<f64>>();
    let missing_value = match attributes.get("missing_value") {
        Some(value) => numbers(value, dtype, 2, "missing_value")?,
        None => Vec::new(),
    };
    let packed = scale_factor.is_some() || add_offset.is_some();
    let mut missing: Vec<f64> = fill
        .into_iter()
        .chain(missing_value)
        .filter(|value| !value.is_nan())
        .map(|value| rounded_for_mask(value, element, packed))
        .collect();
    missing.sort_by(f64::total_cmp);
    missing.dedup();
    let decoding = CfDecoding {
        read_as,
        missing,
        scale_factor,
        add_offset,
    };
    Ok(Encoding {
        decoding: (!decoding.is_identity()).then_some(decoding),
        valid,
    })
}

/// `_Unsigned`: `"true"` on a signed integer type, `"false"` on an unsigned one, gives the
/// other signedness; on other types xarray ignores it.
fn unsigned(dtype: DType, attributes: &Map<String, Value>) -> Result<Option<DType>, String> {
    let Some(value) = attributes.get("_Unsigned") else {
        return Ok(None);
    };
    let flag = match value {
        Value::String(text) => text.to_ascii_lowercase(),
        Value::Bool(flag) => flag.to_string(),
        other => {
            return Err(format!(
                "`_Unsigned` is {other}, expected \"true\" or \"false\""
            ))
        }
    };
    Ok(match (flag.as_str(), dtype) {
        ("true", DType::Int8) => Some(DType::UInt8),
        ("true", DType::Int16) => Some(DType::UInt16),
        ("true", DType::Int32) => Some(DType::UInt32),
        ("true", DType::Int64) => Some(DType::UInt64),
        ("false", DType::UInt8) => Some(DType::Int8),
        ("false", DType::UInt16) => Some(DType::Int16),
        ("false", DType::UInt32) => Some(DType::Int32),
        ("false", DType::UInt64) => Some(DType::Int64),
        _ => None,
    })
}

/// The same bits read as the other signedness (`_Unsigned`).
fn reinterpret(value: f64, stored: DType, read_as: Option<DType>) -> f64 {
    if read_as.is_none() {
        return value;
    }
    let bits = value as i128;
    match stored {
        DType::Int8 => f64::from(bits as i8 as u8),
        DType::Int16 => f64::from(bits as i16 as u16),
        DType::Int32 => f64::from(bits as i32 as u32),
        DType::Int64 => bits as i64 as u64 as f64,
        DType::UInt8 => f64::from(bits as u8 as i8),
        DType::UInt16 => f64::from(bits as u16 as i16),
        DType::UInt32 => f64::from(bits as u32 as i32),
        DType::UInt64 => bits as u64 as i64 as f64,
        _ => value,
    }
}

/// A missing value as xarray compares it: packed data are masked in float64; others in the
/// type `dtypes.maybe_promote` gives (float32 for floats of up to 4 bytes and integers of up
/// to 2, float16 stays float16, float64 otherwise), where the attribute's value is rounded.
fn rounded_for_mask(value: f64, element: DType, packed: bool) -> f64 {
    if packed {
        return value;
    }
    match element {
        DType::Float16 => f64::from(half::f16::from_f64(value)),
        DType::BFloat16
        | DType::Float32
        | DType::Int8
        | DType::Int16
        | DType::UInt8
        | DType::UInt16 => f64::from(value as f32),
        _ => value,
    }
}

/// A scalar number attribute (or a list of one, as netCDF writes them).
fn number(attributes: &Map<String, Value>, key: &str) -> Result<Option<f64>, String> {
    let Some(value) = attributes.get(key) else {
        return Ok(None);
    };
    let value = match value {
        Value::Array(items) if items.len() == 1 => &items[0],
        other => other,
    };
    value
        .as_f64()
        .map(Some)
        .ok_or_else(|| format!("`{key}` is {value}, expected a number"))
}

/// A fill or missing value attribute: a number, a list of numbers, `"NaN"`/`"Infinity"`, or
/// for a float type in Zarr v3 the base64 of a little-endian float64 (xarray's encoding).
fn numbers(value: &Value, dtype: DType, zarr_format: u8, key: &str) -> Result<Vec<f64>, String> {
    let one = |value: &Value| -> Result<f64, String> {
        match value {
            Value::Number(number) => number
                .as_f64()
                .ok_or_else(|| format!("`{key}` {number} is not a number")),
            Value::String(text) => match text.as_str() {
                "NaN" | "nan" => Ok(f64::NAN),
                "Infinity" | "inf" => Ok(f64::INFINITY),
                "-Infinity" | "-inf" => Ok(f64::NEG_INFINITY),
                _ if zarr_format == 3 && is_float(dtype) => base64_f64(text)
                    .ok_or_else(|| format!("`{key}` \"{text}\" is not base64 of a float64")),
                _ => text
                    .parse::<f64>()
                    .map_err(|_| format!("`{key}` \"{text}\" is not a number")),
            },
            other => Err(format!("`{key}` is {other}, expected a number")),
        }
    };
    match value {
        Value::Array(items) => items.iter().map(one).collect(),
        Value::Null => Ok(Vec::new()),
        other => Ok(vec![one(other)?]),
    }
}

fn is_float(dtype: DType) -> bool {
    matches!(
        dtype,
        DType::Float16 | DType::BFloat16 | DType::Float32 | DType::Float64
    )
}

fn base64_f64(text: &str) -> Option<f64> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .ok()?;
    Some(f64::from_le_bytes(bytes.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn attributes(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn era5_packing_in_v2_takes_the_array_fill_value() {
        let attrs = attributes(json!({"scale_factor": 0.0015, "add_offset": 271.5}));
        let encoding = read_encoding(DType::Int16, &attrs, Some(&json!(-32767)), 2).unwrap();
        let decoding = encoding.decoding.unwrap();
        assert_eq!(decoding.missing, vec![-32767.0]);
        assert_eq!(decoding.scale_factor, Some(0.0015));
        assert_eq!(decoding.add_offset, Some(271.5));
    }

    #[test]
    fn v3_float_fill_is_base64() {
        let encoded = base64::engine::general_purpose::STANDARD.encode((-9999f64).to_le_bytes());
        let attrs = attributes(json!({"_FillValue": encoded}));
        let encoding = read_encoding(DType::Float32, &attrs, None, 3).unwrap();
        assert_eq!(encoding.decoding.unwrap().missing, vec![-9999.0]);
    }

    #[test]
    fn nan_fills_and_plain_arrays_decode_nothing() {
        let none = read_encoding(DType::Float32, &Map::new(), Some(&json!("NaN")), 2).unwrap();
        assert_eq!(none.decoding, None);
        let attrs = attributes(json!({"valid_range": [0, 10]}));
        let shown = read_encoding(DType::Int16, &attrs, None, 3).unwrap();
        assert_eq!(shown.decoding, None);
        assert_eq!(shown.valid["valid_range"], json!([0, 10]));
    }

    #[test]
    fn fill_and_missing_value_both_mask_rounded_to_float32() {
        let attrs = attributes(json!({"missing_value": [1e20], "_FillValue": -9999.5}));
        let decoding = read_encoding(DType::Float32, &attrs, None, 2)
            .unwrap()
            .decoding
            .unwrap();
        assert_eq!(decoding.missing, vec![-9999.5, f64::from(1e20f32)]);
    }

    #[test]
    fn unsigned_fill_becomes_the_unsigned_pattern() {
        let attrs = attributes(json!({"_Unsigned": "true", "_FillValue": -1}));
        let decoding = read_encoding(DType::Int8, &attrs, None, 2)
            .unwrap()
            .decoding
            .unwrap();
        assert_eq!(decoding.read_as, Some(DType::UInt8));
        assert_eq!(decoding.missing, vec![255.0]);
    }

    #[test]
    fn bad_attributes_are_errors() {
        let attrs = attributes(json!({"scale_factor": "big"}));
        assert!(read_encoding(DType::Int16, &attrs, None, 2).is_err());
    }
}
