//! CF decoding of stored values, as xarray's `mask_and_scale` does it: values that mean
//! missing become NaN, packed integers are scaled and offset. The arithmetic is defined here
//! once; the GPU gather kernel (`collate.cu`, `cf_decode`) does the same operations in the
//! same order and precision.

use crate::DType;

/// How one variable's stored values decode (its CF attributes, already checked and put in the
/// precision xarray uses).
///
/// A stored value `x` (read as [`read_as`](Self::read_as) and widened to `f64`, which is exact
/// but for 64-bit integers beyond 2^53, rounded as numpy rounds them) decodes to NaN when it
/// equals one of [`missing`](Self::missing), else to `x * scale_factor + add_offset`, two
/// `f64` operations rounded one after the other (no fused multiply-add), as numpy computes
/// them; the batch then takes that value cast to its dtype.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CfDecoding {
    /// `_Unsigned`: the type the stored integers are read as (the same size, the other
    /// signedness); `None` reads them as stored.
    pub read_as: Option<DType>,
    /// `_FillValue` and `missing_value`, as the values xarray compares the stored values
    /// with (rounded to the type xarray masks in).
    pub missing: Vec<f64>,
    /// `scale_factor`.
    pub scale_factor: Option<f64>,
    /// `add_offset`.
    pub add_offset: Option<f64>,
}

impl CfDecoding {
    /// Whether decoding changes nothing (then a variable has no decoding at all).
    pub fn is_identity(&self) -> bool {
        self.read_as.is_none()
            && self.missing.is_empty()
            && self.scale_factor.is_none()
            && self.add_offset.is_none()
    }

    /// The decoded value of one stored value, widened to `f64`.
    #[inline]
    pub fn decode(&self, stored: f64) -> f64 {
        if self.missing.contains(&stored) {
            return f64::NAN;
        }
        let mut value = stored;
        if let Some(scale) = self.scale_factor {
            value *= scale;
        }
        if let Some(offset) = self.add_offset {
            value += offset;
        }
        value
    }

    /// The type stored elements of `dtype` are read as.
    pub fn element_type(&self, dtype: DType) -> DType {
        self.read_as.unwrap_or(dtype)
    }
}

/// Decodes native-endian elements of `dtype` in `src` with `cf` to `f32`, writing
/// `dst[i * dst_stride]`; without `cf`, as [`convert_to_f32`](crate::convert_to_f32).
pub fn decode_to_f32(
    dtype: DType,
    cf: Option<&CfDecoding>,
    src: &[u8],
    dst: &mut [f32],
    dst_stride: usize,
) {
    let Some(cf) = cf else {
        return crate::convert_to_f32(dtype, src, dst, dst_stride);
    };
    let dtype = cf.element_type(dtype);
    let count = src.len() / dtype.size();
    assert_eq!(src.len(), count * dtype.size(), "partial element");
    assert!(
        count == 0 || (count - 1) * dst_stride < dst.len(),
        "destination too short"
    );
    let stride = dst_stride.max(1);
    macro_rules! decode {
        ($ty:ty, $to_f64:expr) => {{
            const N: usize = std::mem::size_of::<$ty>();
            let values = src
                .chunks_exact(N)
                .map(|bytes| <$ty>::from_ne_bytes(bytes.try_into().expect("N bytes")));
            for (out, value) in dst.iter_mut().step_by(stride).zip(values) {
                *out = cf.decode($to_f64(value)) as f32;
            }
        }};
    }
    match dtype {
        DType::Bool => decode!(u8, |v: u8| (v != 0) as u8 as f64),
        DType::Int8 => decode!(i8, f64::from),
        DType::Int16 => decode!(i16, f64::from),
        DType::Int32 => decode!(i32, f64::from),
        DType::Int64 => decode!(i64, |v: i64| v as f64),
        DType::UInt8 => decode!(u8, f64::from),
        DType::UInt16 => decode!(u16, f64::from),
        DType::UInt32 => decode!(u32, f64::from),
        DType::UInt64 => decode!(u64, |v: u64| v as f64),
        DType::Float16 => decode!(u16, |v: u16| f64::from(half::f16::from_bits(v))),
        DType::BFloat16 => decode!(u16, |v: u16| f64::from(half::bf16::from_bits(v))),
        DType::Float32 => decode!(f32, f64::from),
        DType::Float64 => decode!(f64, |v: f64| v),
    }
}

/// The native-endian elements of `dtype` in `bytes`, decoded with `cf`, as `f64` (for
/// coordinates and statistics, which keep xarray's float64).
pub fn decoded_values_f64(dtype: DType, cf: Option<&CfDecoding>, bytes: &[u8]) -> Vec<f64> {
    match cf {
        None => crate::values_f64(dtype, bytes),
        Some(cf) => crate::values_f64(cf.element_type(dtype), bytes)
            .into_iter()
            .map(|value| cf.decode(value))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packed() -> CfDecoding {
        CfDecoding {
            read_as: None,
            missing: vec![-32767.0],
            scale_factor: Some(0.0015),
            add_offset: Some(271.5),
        }
    }

    #[test]
    fn masks_then_scales_in_f64() {
        let cf = packed();
        let stored: Vec<u8> = [-32767i16, 0, 1000, -1000]
            .iter()
            .flat_map(|v| v.to_ne_bytes())
            .collect();
        let mut out = [0f32; 4];
        decode_to_f32(DType::Int16, Some(&cf), &stored, &mut out, 1);
        assert!(out[0].is_nan());
        assert_eq!(out[1], 271.5);
        assert_eq!(out[2], (1000f64 * 0.0015 + 271.5) as f32);
        assert_eq!(out[3], (-1000f64 * 0.0015 + 271.5) as f32);
        let values = decoded_values_f64(DType::Int16, Some(&cf), &stored);
        assert_eq!(values[2], 1000f64 * 0.0015 + 271.5);
    }

    #[test]
    fn unsigned_reads_the_other_signedness() {
        let cf = CfDecoding {
            read_as: Some(DType::UInt8),
            missing: vec![255.0],
            ..CfDecoding::default()
        };
        let stored = [(-1i8) as u8, (-56i8) as u8, 7];
        let mut out = [0f32; 6];
        decode_to_f32(DType::Int8, Some(&cf), &stored, &mut out, 2);
        assert!(out[0].is_nan());
        assert_eq!([out[2], out[4]], [200.0, 7.0]);
    }

    #[test]
    fn identity_is_detected() {
        assert!(CfDecoding::default().is_identity());
        assert!(!packed().is_identity());
    }
}
