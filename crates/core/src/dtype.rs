use std::fmt;

/// The element types zarrpipe reads. Decoded chunks hold these in native byte order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// Boolean, one byte per element (nonzero is true).
    Bool,
    /// Signed 8-bit integer.
    Int8,
    /// Signed 16-bit integer.
    Int16,
    /// Signed 32-bit integer.
    Int32,
    /// Signed 64-bit integer.
    Int64,
    /// Unsigned 8-bit integer.
    UInt8,
    /// Unsigned 16-bit integer.
    UInt16,
    /// Unsigned 32-bit integer.
    UInt32,
    /// Unsigned 64-bit integer.
    UInt64,
    /// IEEE 754 half precision.
    Float16,
    /// bfloat16: the upper half of an `f32`.
    BFloat16,
    /// IEEE 754 single precision.
    Float32,
    /// IEEE 754 double precision.
    Float64,
}

impl DType {
    const ALL: [DType; 13] = [
        DType::Bool,
        DType::Int8,
        DType::Int16,
        DType::Int32,
        DType::Int64,
        DType::UInt8,
        DType::UInt16,
        DType::UInt32,
        DType::UInt64,
        DType::Float16,
        DType::BFloat16,
        DType::Float32,
        DType::Float64,
    ];

    /// The Zarr v3 name of the type (`float32`, `uint8`, ...).
    pub fn zarr_name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::Int8 => "int8",
            DType::Int16 => "int16",
            DType::Int32 => "int32",
            DType::Int64 => "int64",
            DType::UInt8 => "uint8",
            DType::UInt16 => "uint16",
            DType::UInt32 => "uint32",
            DType::UInt64 => "uint64",
            DType::Float16 => "float16",
            DType::BFloat16 => "bfloat16",
            DType::Float32 => "float32",
            DType::Float64 => "float64",
        }
    }

    /// Parses a Zarr v3 data type name; `None` for types zarrpipe does not read.
    pub fn from_zarr_name(name: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|dtype| dtype.zarr_name() == name)
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::Bool | DType::Int8 | DType::UInt8 => 1,
            DType::Int16 | DType::UInt16 | DType::Float16 | DType::BFloat16 => 2,
            DType::Int32 | DType::UInt32 | DType::Float32 => 4,
            DType::Int64 | DType::UInt64 | DType::Float64 => 8,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.zarr_name())
    }
}

/// Converts native-endian elements of `dtype` in `src` to `f32`, writing `dst[i * dst_stride]`.
///
/// `src` must hold exactly `count` elements where `count` is `src.len() / dtype.size()` and
/// `dst` must be long enough for the strided writes; both are checked with `assert!`, since
/// callers size them from the same shapes.
pub fn convert_to_f32(dtype: DType, src: &[u8], dst: &mut [f32], dst_stride: usize) {
    let count = src.len() / dtype.size();
    assert_eq!(src.len(), count * dtype.size(), "partial element");
    assert!(
        count == 0 || (count - 1) * dst_stride < dst.len(),
        "destination too short"
    );
    macro_rules! convert {
        ($ty:ty, $to_f32:expr) => {{
            const N: usize = std::mem::size_of::<$ty>();
            let values = src
                .chunks_exact(N)
                .map(|bytes| <$ty>::from_ne_bytes(bytes.try_into().expect("N bytes")));
            if dst_stride == 1 {
                for (out, value) in dst.iter_mut().zip(values) {
                    *out = $to_f32(value);
                }
            } else {
                for (out, value) in dst.iter_mut().step_by(dst_stride).zip(values) {
                    *out = $to_f32(value);
                }
            }
        }};
    }
    match dtype {
        DType::Bool => convert!(u8, |v: u8| (v != 0) as u8 as f32),
        DType::Int8 => convert!(i8, |v: i8| v as f32),
        DType::Int16 => convert!(i16, |v: i16| v as f32),
        DType::Int32 => convert!(i32, |v: i32| v as f32),
        DType::Int64 => convert!(i64, |v: i64| v as f32),
        DType::UInt8 => convert!(u8, |v: u8| v as f32),
        DType::UInt16 => convert!(u16, |v: u16| v as f32),
        DType::UInt32 => convert!(u32, |v: u32| v as f32),
        DType::UInt64 => convert!(u64, |v: u64| v as f32),
        DType::Float16 => convert!(u16, f16_bits_to_f32),
        DType::BFloat16 => convert!(u16, |v: u16| f32::from_bits((v as u32) << 16)),
        DType::Float32 => convert!(f32, |v: f32| v),
        DType::Float64 => convert!(f64, |v: f64| v as f32),
    }
}

/// The native-endian elements of `dtype` in `bytes` as f64 (exact but for 64-bit integers
/// beyond 2^53).
pub fn values_f64(dtype: DType, bytes: &[u8]) -> Vec<f64> {
    macro_rules! values {
        ($ty:ty) => {
            bytes
                .chunks_exact(std::mem::size_of::<$ty>())
                .map(|element| {
                    <$ty>::from_ne_bytes(element.try_into().expect("element size")) as f64
                })
                .collect()
        };
    }
    match dtype {
        DType::Bool => bytes.iter().map(|&b| (b != 0) as u8 as f64).collect(),
        DType::Int8 => values!(i8),
        DType::Int16 => values!(i16),
        DType::Int32 => values!(i32),
        DType::Int64 => values!(i64),
        DType::UInt8 => values!(u8),
        DType::UInt16 => values!(u16),
        DType::UInt32 => values!(u32),
        DType::UInt64 => values!(u64),
        DType::Float32 => values!(f32),
        DType::Float64 => values!(f64),
        DType::Float16 | DType::BFloat16 => {
            let mut converted = vec![0f32; bytes.len() / 2];
            convert_to_f32(dtype, bytes, &mut converted, 1);
            converted.into_iter().map(f64::from).collect()
        }
    }
}

/// IEEE half to single precision (exact: every half value is representable).
fn f16_bits_to_f32(bits: u16) -> f32 {
    let sign = ((bits as u32) & 0x8000) << 16;
    let exponent = ((bits >> 10) & 0x1f) as u32;
    let mantissa = (bits & 0x3ff) as u32;
    let magnitude = match (exponent, mantissa) {
        (0, 0) => 0,
        // Subnormal half: value = mantissa * 2^-24, exact in f32.
        (0, _) => return f32::from_bits(sign) + (mantissa as f32) * 2f32.powi(-24) * sign_of(bits),
        (0x1f, 0) => 0x7f80_0000,
        (0x1f, _) => 0x7fc0_0000 | (mantissa << 13),
        _ => ((exponent + 127 - 15) << 23) | (mantissa << 13),
    };
    f32::from_bits(sign | magnitude)
}

fn sign_of(bits: u16) -> f32 {
    if bits & 0x8000 != 0 {
        -1.0
    } else {
        1.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for dtype in DType::ALL {
            assert_eq!(DType::from_zarr_name(dtype.zarr_name()), Some(dtype));
        }
        assert_eq!(DType::from_zarr_name("complex64"), None);
    }

    #[test]
    fn converts_each_type() {
        let mut out = [0f32; 2];
        convert_to_f32(
            DType::Int16,
            &[0xff, 0xff, 7, 0].map(|b| b as u8),
            &mut out,
            1,
        );
        assert_eq!(out, [-1.0, 7.0]);
        convert_to_f32(DType::Bool, &[0, 2], &mut out, 1);
        assert_eq!(out, [0.0, 1.0]);
        let halves: Vec<u8> = [0x3c00u16, 0xc000]
            .iter()
            .flat_map(|h| h.to_ne_bytes())
            .collect();
        convert_to_f32(DType::Float16, &halves, &mut out, 1);
        assert_eq!(out, [1.0, -2.0]);
        let subnormal = 0x8001u16.to_ne_bytes();
        convert_to_f32(DType::Float16, &subnormal, &mut out, 1);
        assert_eq!(out[0], -(2f32.powi(-24)));
        let doubles: Vec<u8> = [1.5f64, f64::NAN]
            .iter()
            .flat_map(|v| v.to_ne_bytes())
            .collect();
        convert_to_f32(DType::Float64, &doubles, &mut out, 1);
        assert_eq!(out[0], 1.5);
        assert!(out[1].is_nan());
    }

    #[test]
    fn strided_writes_leave_gaps() {
        let mut out = [9f32; 5];
        let src: Vec<u8> = [1f32, 2., 3.]
            .iter()
            .flat_map(|v| v.to_ne_bytes())
            .collect();
        convert_to_f32(DType::Float32, &src, &mut out, 2);
        assert_eq!(out, [1., 9., 2., 9., 3.]);
    }
}
