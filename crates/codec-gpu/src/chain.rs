//! A variable's codec chain as decode steps the GPU knows, read from the array metadata (v3
//! `codecs`, or v2 `compressor`, `filters`, `dtype` byte order and `order`). A chain with any
//! other codec is `Unsupported` and decodes on the CPU.

use serde_json::Value;
use zarrpipe_core::DType;
use zarrpipe_store::Variable;

/// One decode step, in decode order (the reverse of the encode order).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Step {
    /// Strip and check the 4-byte crc32c trailer (`crc32c`).
    Crc32c,
    /// A whole-chunk compressor.
    Decompress(Compressor),
    /// numcodecs `shuffle`: bytes grouped by position within each element.
    Shuffle { element_size: usize },
    /// The `bytes` codec with a byte order other than this machine's.
    SwapBytes,
    /// `sharding_indexed`: the chunk is a shard of inner chunks.
    Sharding(Box<ShardSpec>),
    /// `transpose`; `encoded_order[i]` is the decoded axis stored as axis `i`.
    Transpose { encoded_order: Vec<usize> },
    /// numcodecs `fixedscaleoffset`: stored `astype` integers back to the array's values.
    ScaleOffset(ScaleOffset),
}

/// The element types numcodecs `fixedscaleoffset` works on, numbered as in `kernels.cu`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Element {
    I8,
    U8,
    I16,
    U16,
    I32,
    U32,
    I64,
    U64,
    F32,
    F64,
}

impl Element {
    /// From a numpy type string with or without its byte order (`<f8`, `|u1`, `i2`).
    fn parse(name: &str) -> Option<Self> {
        let name = name.trim_start_matches(['<', '>', '|', '=']);
        Some(match name {
            "i1" => Self::I8,
            "u1" => Self::U8,
            "i2" => Self::I16,
            "u2" => Self::U16,
            "i4" => Self::I32,
            "u4" => Self::U32,
            "i8" => Self::I64,
            "u8" => Self::U64,
            "f4" => Self::F32,
            "f8" => Self::F64,
            _ => return None,
        })
    }

    /// The element type of an array of `dtype`, if `fixedscaleoffset` takes it.
    pub fn of(dtype: DType) -> Option<Self> {
        Some(match dtype {
            DType::Int8 => Self::I8,
            DType::UInt8 => Self::U8,
            DType::Int16 => Self::I16,
            DType::UInt16 => Self::U16,
            DType::Int32 => Self::I32,
            DType::UInt32 => Self::U32,
            DType::Int64 => Self::I64,
            DType::UInt64 => Self::U64,
            DType::Float32 => Self::F32,
            DType::Float64 => Self::F64,
            _ => return None,
        })
    }

    pub fn size(self) -> usize {
        match self {
            Self::I8 | Self::U8 => 1,
            Self::I16 | Self::U16 => 2,
            Self::I32 | Self::U32 | Self::F32 => 4,
            Self::I64 | Self::U64 | Self::F64 => 8,
        }
    }
}

/// `fixedscaleoffset` decoding as zarrs does it: each stored `astype` element is cast to
/// `dtype` through f32 (when `astype` is given), then `value / scale + offset` is computed in
/// f32 (types of up to 2 bytes, and f32) or f64 (the others) and cast back to `dtype`. zarrs
/// keeps `scale` and `offset` as f32.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct ScaleOffset {
    pub offset: f32,
    pub scale: f32,
    pub dtype: Element,
    pub astype: Option<Element>,
}

impl ScaleOffset {
    /// Bytes of one stored element.
    pub fn stored_size(&self) -> usize {
        self.astype.unwrap_or(self.dtype).size()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Compressor {
    Zstd,
    Gzip,
    Zlib,
    /// numcodecs `lz4`: a 4-byte little-endian decoded size, then an LZ4 block.
    Lz4,
    /// A blosc 1 frame (any inner codec; the frame header says which).
    Blosc,
}

/// How a shard stores its inner chunks.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ShardSpec {
    pub inner_shape: Vec<u64>,
    pub inner: GpuChain,
    /// The index ends with a crc32c trailer.
    pub index_crc32c: bool,
    pub index_at_end: bool,
}

/// The decode steps of one chain, each applied to the whole chunk in order.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct GpuChain {
    pub steps: Vec<Step>,
}

/// Why a chain stays on the CPU.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Unsupported(pub String);

impl GpuChain {
    /// The GPU steps of `variable`'s codec chain.
    pub fn of(variable: &Variable) -> Result<Self, Unsupported> {
        let metadata = serde_json::to_value(variable.array().metadata())
            .map_err(|error| Unsupported(format!("unreadable metadata: {error}")))?;
        let element_size = variable.dtype().size();
        let chain = match metadata.get("zarr_format").and_then(Value::as_u64) {
            Some(2) => Self::from_v2(&metadata, element_size),
            _ => Self::from_v3(metadata.get("codecs").unwrap_or(&Value::Null), element_size),
        }?;
        chain.check_scale_offset(variable.dtype())?;
        Ok(chain)
    }

    /// zarrs refuses a `fixedscaleoffset` whose `dtype` is not the array's; so does the GPU
    /// (the chunk then fails on the CPU with zarrs' error). The size-changing step is only
    /// planned where the chain has no shard outside it.
    fn check_scale_offset(&self, dtype: DType) -> Result<(), Unsupported> {
        let mut scale_offsets = self.steps.iter().filter_map(|step| match step {
            Step::ScaleOffset(spec) => Some(spec),
            _ => None,
        });
        let Some(spec) = scale_offsets.next() else {
            for step in &self.steps {
                if let Step::Sharding(shard) = step {
                    shard.inner.check_scale_offset(dtype)?;
                }
            }
            return Ok(());
        };
        if Element::of(dtype) != Some(spec.dtype) || scale_offsets.next().is_some() {
            return Err(Unsupported(format!(
                "fixedscaleoffset for {:?} on an array of {dtype}",
                spec.dtype
            )));
        }
        if self
            .steps
            .iter()
            .any(|step| matches!(step, Step::Sharding(_)))
        {
            return Err(Unsupported("fixedscaleoffset outside sharding".into()));
        }
        Ok(())
    }

    fn from_v3(codecs: &Value, element_size: usize) -> Result<Self, Unsupported> {
        let codecs = codecs
            .as_array()
            .ok_or_else(|| Unsupported("no codec list".into()))?;
        let mut steps = Vec::new();
        // Encode order is the list order; decode walks it backwards.
        for codec in codecs.iter().rev() {
            let name = codec_name(codec);
            let config = codec.get("configuration").unwrap_or(&Value::Null);
            let step = match name {
                "bytes" => match config.get("endian").and_then(Value::as_str) {
                    Some("big") if element_size > 1 && cfg!(target_endian = "little") => {
                        Some(Step::SwapBytes)
                    }
                    Some("little") if element_size > 1 && cfg!(target_endian = "big") => {
                        Some(Step::SwapBytes)
                    }
                    _ => None,
                },
                "crc32c" => Some(Step::Crc32c),
                "zstd" | "numcodecs.zstd" => Some(Step::Decompress(Compressor::Zstd)),
                "gzip" | "numcodecs.gzip" => Some(Step::Decompress(Compressor::Gzip)),
                "numcodecs.zlib" => Some(Step::Decompress(Compressor::Zlib)),
                "numcodecs.lz4" => Some(Step::Decompress(Compressor::Lz4)),
                "blosc" | "numcodecs.blosc" => Some(Step::Decompress(Compressor::Blosc)),
                "numcodecs.shuffle" => Some(shuffle_step(config, element_size)?),
                "transpose" => Some(Step::Transpose {
                    encoded_order: axis_order(config.get("order"))?,
                }),
                "sharding_indexed" => {
                    Some(Step::Sharding(Box::new(shard_spec(config, element_size)?)))
                }
                "numcodecs.fixedscaleoffset" => Some(Step::ScaleOffset(scale_offset(config)?)),
                other => return Err(Unsupported(format!("codec `{other}`"))),
            };
            steps.extend(step);
        }
        Ok(Self { steps })
    }

    fn from_v2(metadata: &Value, element_size: usize) -> Result<Self, Unsupported> {
        let dtype = metadata.get("dtype").and_then(Value::as_str).unwrap_or("");
        let mut steps = Vec::new();
        if let Some(compressor) = metadata.get("compressor").filter(|c| !c.is_null()) {
            let step = match compressor.get("id").and_then(Value::as_str).unwrap_or("") {
                "zstd" => Compressor::Zstd,
                "gzip" => Compressor::Gzip,
                "zlib" => Compressor::Zlib,
                "lz4" => Compressor::Lz4,
                "blosc" => Compressor::Blosc,
                other => return Err(Unsupported(format!("compressor `{other}`"))),
            };
            steps.push(Step::Decompress(step));
        }
        let filters = metadata.get("filters").and_then(Value::as_array);
        for filter in filters.into_iter().flatten().rev() {
            steps.push(
                match filter.get("id").and_then(Value::as_str).unwrap_or("") {
                    "shuffle" => shuffle_step(filter, element_size)?,
                    "fixedscaleoffset" => Step::ScaleOffset(scale_offset(filter)?),
                    other => return Err(Unsupported(format!("filter `{other}`"))),
                },
            );
        }
        let foreign_order = if cfg!(target_endian = "little") {
            '>'
        } else {
            '<'
        };
        if element_size > 1 && dtype.starts_with(foreign_order) {
            // zarrs swaps before array filters decode, numcodecs after: leave these to zarrs.
            if steps
                .iter()
                .any(|step| matches!(step, Step::ScaleOffset(_)))
            {
                return Err(Unsupported(
                    "fixedscaleoffset on a foreign byte order".into(),
                ));
            }
            steps.push(Step::SwapBytes);
        }
        if metadata.get("order").and_then(Value::as_str) == Some("F") {
            let ndim = metadata
                .get("shape")
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            steps.push(Step::Transpose {
                encoded_order: (0..ndim).rev().collect(),
            });
        }
        Ok(Self { steps })
    }
}

/// A v3 codec's name: `{"name": ...}`, or the bare string metadata may use without options.
fn codec_name(codec: &Value) -> &str {
    codec
        .as_str()
        .or_else(|| codec.get("name").and_then(Value::as_str))
        .unwrap_or("")
}

fn shuffle_step(config: &Value, element_size: usize) -> Result<Step, Unsupported> {
    let size = config
        .get("elementsize")
        .and_then(Value::as_u64)
        .map_or(element_size, |n| n as usize);
    Ok(Step::Shuffle { element_size: size })
}

fn scale_offset(config: &Value) -> Result<ScaleOffset, Unsupported> {
    let number = |key: &str| config.get(key).and_then(Value::as_f64);
    let element = |key: &str| config.get(key).and_then(Value::as_str).map(Element::parse);
    let (Some(offset), Some(scale), Some(Some(dtype))) =
        (number("offset"), number("scale"), element("dtype"))
    else {
        return Err(Unsupported(format!(
            "fixedscaleoffset configuration {config}"
        )));
    };
    let astype = match element("astype") {
        None => None,
        Some(Some(astype)) => Some(astype),
        Some(None) => return Err(Unsupported(format!("fixedscaleoffset astype in {config}"))),
    };
    Ok(ScaleOffset {
        offset: offset as f32,
        scale: scale as f32,
        dtype,
        astype,
    })
}

fn axis_order(order: Option<&Value>) -> Result<Vec<usize>, Unsupported> {
    let order: Option<Vec<usize>> = order.and_then(Value::as_array).and_then(|axes| {
        axes.iter()
            .map(|axis| axis.as_u64().map(|a| a as usize))
            .collect()
    });
    let order = order.ok_or_else(|| Unsupported("transpose without an axis list".into()))?;
    let mut seen = vec![false; order.len()];
    for &axis in &order {
        if axis >= order.len() || std::mem::replace(&mut seen[axis], true) {
            return Err(Unsupported(format!("transpose order {order:?}")));
        }
    }
    Ok(order)
}

fn shard_spec(config: &Value, element_size: usize) -> Result<ShardSpec, Unsupported> {
    let inner_shape: Option<Vec<u64>> = config
        .get("chunk_shape")
        .and_then(Value::as_array)
        .and_then(|shape| shape.iter().map(Value::as_u64).collect());
    let inner_shape = inner_shape.ok_or_else(|| Unsupported("shard without chunk_shape".into()))?;
    let inner = GpuChain::from_v3(config.get("codecs").unwrap_or(&Value::Null), element_size)?;
    if inner
        .steps
        .iter()
        .any(|step| matches!(step, Step::Sharding(_)))
    {
        return Err(Unsupported("nested sharding".into()));
    }
    let index = config.get("index_codecs").and_then(Value::as_array);
    let names: Vec<&str> = index.into_iter().flatten().map(codec_name).collect();
    let little = index
        .into_iter()
        .flatten()
        .filter(|codec| codec_name(codec) == "bytes")
        .all(|codec| {
            codec
                .pointer("/configuration/endian")
                .and_then(Value::as_str)
                != Some("big")
        });
    let index_crc32c = match names.as_slice() {
        ["bytes"] if little => false,
        ["bytes", "crc32c"] if little => true,
        _ => return Err(Unsupported(format!("shard index codecs {names:?}"))),
    };
    let index_at_end = config.get("index_location").and_then(Value::as_str) != Some("start");
    Ok(ShardSpec {
        inner_shape,
        inner,
        index_crc32c,
        index_at_end,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn v3_chains_read_in_decode_order() {
        let codecs = json!([
            {"name": "transpose", "configuration": {"order": [2, 0, 1]}},
            {"name": "bytes", "configuration": {"endian": "big"}},
            {"name": "zstd", "configuration": {"level": 3}},
            {"name": "crc32c"}
        ]);
        let chain = GpuChain::from_v3(&codecs, 4).unwrap();
        assert_eq!(
            chain.steps,
            [
                Step::Crc32c,
                Step::Decompress(Compressor::Zstd),
                Step::SwapBytes,
                Step::Transpose {
                    encoded_order: vec![2, 0, 1]
                }
            ]
        );
    }

    #[test]
    fn v2_chains_add_byte_order_and_fortran_order() {
        let metadata = json!({
            "zarr_format": 2, "dtype": ">i2", "order": "F", "shape": [3, 4],
            "compressor": {"id": "blosc", "cname": "lz4"},
            "filters": [{"id": "delta", "dtype": ">i2"}]
        });
        // zarrs cannot read numcodecs delta, so neither can the GPU path.
        assert!(GpuChain::from_v2(&metadata, 2).is_err());
        let metadata = json!({
            "zarr_format": 2, "dtype": ">i2", "order": "F", "shape": [3, 4],
            "compressor": {"id": "blosc", "cname": "lz4"}, "filters": null
        });
        assert_eq!(
            GpuChain::from_v2(&metadata, 2).unwrap().steps,
            [
                Step::Decompress(Compressor::Blosc),
                Step::SwapBytes,
                Step::Transpose {
                    encoded_order: vec![1, 0]
                }
            ]
        );
    }

    #[test]
    fn scale_offsets_read_from_v3_and_v2() {
        let codecs = json!([
            {"name": "numcodecs.fixedscaleoffset", "configuration":
                {"offset": 273.15, "scale": 100, "dtype": "<f8", "astype": "|u1"}},
            {"name": "bytes", "configuration": {"endian": "little"}}
        ]);
        let spec = ScaleOffset {
            offset: 273.15,
            scale: 100.0,
            dtype: Element::F64,
            astype: Some(Element::U8),
        };
        assert_eq!(
            GpuChain::from_v3(&codecs, 8).unwrap().steps,
            [Step::ScaleOffset(spec)]
        );
        assert_eq!(spec.stored_size(), 1);
        let v2 = |dtype: &str| {
            json!({"zarr_format": 2, "dtype": dtype, "shape": [4], "compressor": {"id": "zstd"},
                "filters": [{"id": "fixedscaleoffset", "offset": 273.15, "scale": 100,
                    "dtype": dtype, "astype": "<i2"}]})
        };
        assert_eq!(
            GpuChain::from_v2(&v2("<f8"), 8).unwrap().steps,
            [
                Step::Decompress(Compressor::Zstd),
                Step::ScaleOffset(ScaleOffset {
                    astype: Some(Element::I16),
                    ..spec
                })
            ]
        );
        // zarrs and numcodecs swap big-endian bytes at different points: left to zarrs.
        assert!(GpuChain::from_v2(&v2(">f8"), 8).is_err());
        let unknown = json!([{"name": "numcodecs.fixedscaleoffset",
            "configuration": {"offset": 0, "scale": 1, "dtype": "<f8", "astype": "<c16"}}]);
        assert!(GpuChain::from_v3(&unknown, 8).is_err());
    }

    #[test]
    fn a_scale_offset_must_match_the_array_and_stay_inside_shards() {
        let chain = |steps| GpuChain { steps };
        let spec = ScaleOffset {
            offset: 0.0,
            scale: 1.0,
            dtype: Element::F32,
            astype: None,
        };
        assert!(chain(vec![Step::ScaleOffset(spec)])
            .check_scale_offset(DType::Float32)
            .is_ok());
        assert!(chain(vec![Step::ScaleOffset(spec)])
            .check_scale_offset(DType::Float64)
            .is_err());
        let shard = ShardSpec {
            inner_shape: vec![2],
            inner: GpuChain::default(),
            index_crc32c: false,
            index_at_end: true,
        };
        let outside = chain(vec![
            Step::Sharding(Box::new(shard.clone())),
            Step::ScaleOffset(spec),
        ]);
        assert!(outside.check_scale_offset(DType::Float32).is_err());
        let inside = chain(vec![Step::Sharding(Box::new(ShardSpec {
            inner: chain(vec![Step::ScaleOffset(spec)]),
            ..shard
        }))]);
        assert!(inside.check_scale_offset(DType::Float32).is_ok());
        assert!(inside.check_scale_offset(DType::Int16).is_err());
    }

    #[test]
    fn unknown_codecs_and_bad_orders_are_unsupported() {
        assert!(GpuChain::from_v3(&json!([{"name": "bz2"}]), 4).is_err());
        let bad = json!([{"name": "transpose", "configuration": {"order": [0, 0]}}]);
        assert!(GpuChain::from_v3(&bad, 4).is_err());
    }
}
