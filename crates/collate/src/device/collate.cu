// Collation kernels, compiled at run time with NVRTC. `gather` copies every piece of a batch
// (a box of one decoded chunk) into the float32 tensor in one launch: blockIdx.y walks the
// pieces, blockIdx.x and threadIdx.x the elements of one, consecutive threads on consecutive
// elements of the innermost axis, CF-decoding where the piece's variable has an encoding. `finish` normalises, replaces NaN, writes the mask and
// casts, element by element; `derived` computes derived channels from their host-made tables.
// All compute exactly what the host collator computes, in float32 with IEEE rounding, so the
// tensors are bit-identical. Every piece was checked on the CPU:
// its boxes lie inside the chunk and the tensor.

typedef unsigned long long u64;
typedef long long i64;
typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned char u8;

#define MAX_AXES 8
#define MAX_MISSING 4

#define CF_DECODE 1u
#define CF_SCALE 2u
#define CF_OFFSET 4u

struct Piece {
  u64 src;  // address of the chunk's first element of the box
  u64 dst;  // element of the tensor where the box starts
  u64 len;  // elements in the box
  u32 dtype;  // as the elements are read (after CF's _Unsigned)
  u32 rank;
  u64 extent[MAX_AXES];
  u64 src_stride[MAX_AXES];
  u64 dst_stride[MAX_AXES];
  // CF decoding (zarrpipe_core::CfDecoding): CF_* flags, then the count of missing values.
  u32 cf;
  u32 missing_count;
  double scale;
  double offset;
  double missing[MAX_MISSING];
};

// zarrpipe_core::DType, in the order of `dtype_code` in device/mod.rs.
enum { BOOL, I8, I16, I32, I64, U8, U16, U32, U64, F16, BF16, F32, F64 };

__device__ float f16_to_f32(u16 bits) {
  u32 sign = ((u32)bits & 0x8000u) << 16;
  u32 exponent = (bits >> 10) & 0x1f;
  u32 mantissa = bits & 0x3ff;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exact in float32.
    float magnitude = __fmul_rn((float)mantissa, 5.9604644775390625e-8f);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 0x1f) return __uint_as_float(sign | (mantissa ? 0x7fc00000u | (mantissa << 13) : 0x7f800000u));
  return __uint_as_float(sign | ((exponent + 127 - 15) << 23) | (mantissa << 13));
}

__device__ float load_f32(const u8* src, u64 i, u32 dtype) {
  switch (dtype) {
    case BOOL: return src[i] != 0 ? 1.0f : 0.0f;
    case I8: return (float)((const signed char*)src)[i];
    case I16: return (float)((const short*)src)[i];
    case I32: return __int2float_rn(((const int*)src)[i]);
    case I64: return __ll2float_rn(((const i64*)src)[i]);
    case U8: return (float)src[i];
    case U16: return (float)((const u16*)src)[i];
    case U32: return __uint2float_rn(((const u32*)src)[i]);
    case U64: return __ull2float_rn(((const u64*)src)[i]);
    case F16: return f16_to_f32(((const u16*)src)[i]);
    case BF16: return __uint_as_float((u32)((const u16*)src)[i] << 16);
    case F32: return ((const float*)src)[i];
    default: return __double2float_rn(((const double*)src)[i]);
  }
}

__device__ double load_f64(const u8* src, u64 i, u32 dtype) {
  switch (dtype) {
    case BOOL: return src[i] != 0 ? 1.0 : 0.0;
    case I8: return (double)((const signed char*)src)[i];
    case I16: return (double)((const short*)src)[i];
    case I32: return (double)((const int*)src)[i];
    case I64: return __ll2double_rn(((const i64*)src)[i]);
    case U8: return (double)src[i];
    case U16: return (double)((const u16*)src)[i];
    case U32: return (double)((const u32*)src)[i];
    case U64: return __ull2double_rn(((const u64*)src)[i]);
    case F16: return (double)f16_to_f32(((const u16*)src)[i]);
    case BF16: return (double)__uint_as_float((u32)((const u16*)src)[i] << 16);
    case F32: return (double)((const float*)src)[i];
    default: return ((const double*)src)[i];
  }
}

// zarrpipe_core::CfDecoding::decode, then the cast to float32: a missing value is NaN, the
// rest x * scale + offset in float64, rounded after each operation (never fused). NaNs
// convert as the CPU converts them (sign and leading payload bits kept, quietened), where
// CUDA's conversion would give its one canonical NaN.
__device__ float cf_decode(const Piece& piece, const u8* src, u64 i) {
  double x = load_f64(src, i, piece.dtype);
  for (u32 k = 0; k < piece.missing_count; ++k) {
    if (x == piece.missing[k]) return __uint_as_float(0x7fc00000u);
  }
  if (piece.cf & CF_SCALE) x = __dmul_rn(x, piece.scale);
  if (piece.cf & CF_OFFSET) x = __dadd_rn(x, piece.offset);
  if (x != x) {
    u64 bits = (u64)__double_as_longlong(x);
    return __uint_as_float((u32)(bits >> 32) & 0x80000000u | 0x7fc00000u | (u32)(bits >> 29) & 0x7fffffu);
  }
  return __double2float_rn(x);
}

// Each warp takes a segment of up to GATHER_SEGMENT elements of one row of a piece (its
// innermost axis) at a time and works out where the row starts once: per element, the 64-bit
// divisions cost more than the copy.
#define GATHER_SEGMENT 1024

extern "C" __global__ void gather(const Piece* pieces, u64 count, float* out) {
  const u64 lane = threadIdx.x % 32;
  const u64 warp = ((u64)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const u64 warps = (u64)gridDim.x * blockDim.x / 32;
  for (u64 p = blockIdx.y; p < count; p += gridDim.y) {
    const Piece& piece = pieces[p];
    const u8* src = (const u8*)piece.src;
    const int last = (int)piece.rank - 1;
    const u64 row_len = last >= 0 ? piece.extent[last] : 1;
    const u64 rows = row_len > 0 ? piece.len / row_len : 0;
    const u64 src_step = last >= 0 ? piece.src_stride[last] : 0;
    const u64 dst_step = last >= 0 ? piece.dst_stride[last] : 0;
    const u64 segments = (row_len + GATHER_SEGMENT - 1) / GATHER_SEGMENT;
    for (u64 unit = warp; unit < rows * segments; unit += warps) {
      u64 rest = unit / segments, s = 0, d = piece.dst;
      for (int axis = last - 1; axis >= 0; --axis) {
        u64 extent = piece.extent[axis];
        u64 coord = axis == 0 ? rest : rest % extent;
        rest = axis == 0 ? 0 : rest / extent;
        s += coord * piece.src_stride[axis];
        d += coord * piece.dst_stride[axis];
      }
      const u64 from = unit % segments * GATHER_SEGMENT;
      const u64 to = min(from + GATHER_SEGMENT, row_len);
      if (piece.cf & CF_DECODE) {
        for (u64 i = from + lane; i < to; i += 32) out[d + i * dst_step] = cf_decode(piece, src, s + i * src_step);
      } else {
        for (u64 i = from + lane; i < to; i += 32) out[d + i * dst_step] = load_f32(src, s + i * src_step, piece.dtype);
      }
    }
  }
}

// Round to nearest even, NaN kept quiet: the `half` crate's conversions, bit for bit.
__device__ u16 f32_to_bf16(float value) {
  u32 x = __float_as_uint(value);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (u16)((x >> 16) | 0x0040u);
  u32 round_bit = 0x8000u;
  if ((x & round_bit) && (x & (3 * round_bit - 1))) return (u16)((x >> 16) + 1);
  return (u16)(x >> 16);
}

__device__ u16 f32_to_f16(float value) {
  u32 x = __float_as_uint(value);
  u32 sign = x & 0x80000000u, exp = x & 0x7f800000u, man = x & 0x007fffffu;
  if (exp == 0x7f800000u) return (u16)((sign >> 16) | 0x7c00u | (man ? 0x0200u : 0u) | (man >> 13));
  u32 half_sign = sign >> 16;
  int half_exp = (int)(exp >> 23) - 127 + 15;
  if (half_exp >= 0x1f) return (u16)(half_sign | 0x7c00u);
  if (half_exp <= 0) {
    if (14 - half_exp > 24) return (u16)half_sign;
    u32 m = man | 0x00800000u;
    u32 half_man = m >> (14 - half_exp);
    u32 round_bit = 1u << (13 - half_exp);
    if ((m & round_bit) && (m & (3 * round_bit - 1))) half_man += 1;
    return (u16)(half_sign | half_man);
  }
  u32 assembled = half_sign | ((u32)half_exp << 10) | (man >> 13);
  u32 round_bit = 0x1000u;
  if ((man & round_bit) && (man & (3 * round_bit - 1))) assembled += 1;
  return (u16)assembled;
}

#define NORMALIZE 1u
#define FILL_NAN 2u
#define NAN_MASK 4u

enum { OUT_F32, OUT_BF16, OUT_F16 };

// `values` and `out` may be the same buffer (float32 out, in place).
extern "C" __global__ void finish(const float* values, u64 len, void* out, u32 out_dtype, u8* mask,
                                  const float* mean, const float* std, u64 plane, u64 channels,
                                  u32 flags, float fill) {
  for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < len; i += (u64)gridDim.x * blockDim.x) {
    float v = values[i];
    if (flags & NORMALIZE) {
      u64 c = (i / plane) % channels;
      // A NaN keeps its payload, quietened, as the CPU's arithmetic keeps it (CUDA's would
      // give its one canonical NaN), so normalised batches match the CPU's bit for bit.
      v = v != v ? __int_as_float(__float_as_int(v) | 0x00400000)
                 : __fdiv_rn(__fsub_rn(v, mean[c]), std[c]);
    }
    bool nan = v != v;
    if (nan && (flags & FILL_NAN)) v = fill;
    if (flags & NAN_MASK) mask[i] = nan ? 0 : 1;
    if (out_dtype == OUT_F32) ((float*)out)[i] = v;
    else if (out_dtype == OUT_BF16) ((u16*)out)[i] = f32_to_bf16(v);
    else ((u16*)out)[i] = f32_to_f16(v);
  }
}

extern "C" __global__ void fill_f32(float* out, u64 len, float value) {
  for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < len; i += (u64)gridDim.x * blockDim.x) {
    out[i] = value;
  }
}

#define NO_AXIS 0xffffffffu

// One derived channel of one sample step (`DerivedJob` in derived.rs): its plane of the
// tensor, where its tables start in `values`, whether it is clipped at 0, and per plane axis
// the elements inside the data (the others keep the pad value).
struct DerivedJob {
  u64 plane;
  u64 ab;
  u64 c;
  u64 clip;
  u64 valid[MAX_AXES];
};

// Derived channels from their tables: value = a[t, lat] + b[t, lat] * c[t, lon], multiplied
// then added in float32 with IEEE rounding (never fused), as the host computes it.
// blockIdx.y walks the jobs, blockIdx.x and threadIdx.x the elements of a plane.
extern "C" __global__ void derived(const u64* axes, const DerivedJob* jobs, u64 count,
                                   const float* values, float* out, u64 plane_len, u32 rank,
                                   u32 t_axis, u32 lat_axis, u32 lon_axis) {
  u64 t_size = t_axis == NO_AXIS ? 1 : axes[t_axis];
  u64 lat_size = lat_axis == NO_AXIS ? 1 : axes[lat_axis];
  u64 lon_size = lon_axis == NO_AXIS ? 1 : axes[lon_axis];
  for (u64 j = blockIdx.y; j < count; j += gridDim.y) {
    const DerivedJob& job = jobs[j];
    for (u64 e = (u64)blockIdx.x * blockDim.x + threadIdx.x; e < plane_len;
         e += (u64)gridDim.x * blockDim.x) {
      u64 coords[MAX_AXES];
      u64 rest = e;
      bool inside = true;
      for (int axis = (int)rank - 1; axis >= 0; --axis) {
        coords[axis] = rest % axes[axis];
        rest /= axes[axis];
        inside = inside && coords[axis] < job.valid[axis];
      }
      if (!inside) continue;
      u64 t = t_axis == NO_AXIS ? 0 : coords[t_axis];
      u64 i = lat_axis == NO_AXIS ? 0 : coords[lat_axis];
      u64 k = lon_axis == NO_AXIS ? 0 : coords[lon_axis];
      u64 row = t * lat_size + i;
      float a = values[job.ab + row];
      float b = values[job.ab + t_size * lat_size + row];
      float c = values[job.c + t * lon_size + k];
      float v = __fadd_rn(a, __fmul_rn(b, c));
      if (job.clip && v < 0.0f) v = 0.0f;
      out[job.plane * plane_len + e] = v;
    }
  }
}
