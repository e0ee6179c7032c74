// Decode kernels, compiled at run time with NVRTC. Each kernel takes a table of descriptors
// (one per op of a batch) and walks it with blockIdx.y, so a whole batch of one kind of op is
// one launch; blockIdx.x and threadIdx.x stride over the bytes or elements of one op.
// Every descriptor was checked on the CPU: its ranges lie inside the buffers.

typedef unsigned long long u64;
typedef unsigned int u32;
typedef unsigned char u8;

#define MAX_DIMS 8

#define FOR_EACH_OP(n) for (u64 op = blockIdx.y; op < (n); op += gridDim.y)
#define FOR_EACH_INDEX(i, len) \
  for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < (len); i += (u64)gridDim.x * blockDim.x)

struct Copy { u64 src, dst, len; };

// len bytes from src to dst, by `lanes` threads from `lane`: 16-byte words when both ends
// allow them, else 4-byte words, else bytes; then the tail.
__device__ __forceinline__ void copy_run(u8* dst, const u8* src, u64 len, u64 lane, u64 lanes) {
  const u64 ends = (u64)src | (u64)dst;
  u64 done = 0;
  if ((ends & 15) == 0) {
    const u64 vectors = len / 16;
    for (u64 i = lane; i < vectors; i += lanes) ((uint4*)dst)[i] = ((const uint4*)src)[i];
    done = vectors * 16;
  } else if ((ends & 3) == 0) {
    const u64 words = len / 4;
    for (u64 i = lane; i < words; i += lanes) ((u32*)dst)[i] = ((const u32*)src)[i];
    done = words * 4;
  }
  for (u64 i = done + lane; i < len; i += lanes) dst[i] = src[i];
}

extern "C" __global__ void copy_bytes(const Copy* ops, u64 count) {
  const u64 lane = (u64)blockIdx.x * blockDim.x + threadIdx.x;
  const u64 lanes = (u64)gridDim.x * blockDim.x;
  FOR_EACH_OP(count) {
    const Copy c = ops[op];
    copy_run((u8*)c.dst, (const u8*)c.src, c.len, lane, lanes);
  }
}

struct Fill { u64 dst, len, pattern_len; u8 pattern[16]; };

extern "C" __global__ void fill_pattern(const Fill* ops, u64 count) {
  FOR_EACH_OP(count) {
    const Fill f = ops[op];
    u8* dst = (u8*)f.dst;
    FOR_EACH_INDEX(i, f.len) { dst[i] = f.pattern[i % f.pattern_len]; }
  }
}

// A shuffled source read as planes of plane_len bytes laid plane_stride apart.
struct Shuffle { u64 src, dst, len, type_size, plane_len, plane_stride; };

__device__ __forceinline__ u64 physical(const Shuffle& s, u64 at) {
  return at / s.plane_len * s.plane_stride + at % s.plane_len;
}

// dst[i * T + b] = src[b * n + i] for the n = len / T whole elements; the tail is copied.
extern "C" __global__ void byte_unshuffle(const Shuffle* ops, u64 count) {
  FOR_EACH_OP(count) {
    const Shuffle s = ops[op];
    const u8* src = (const u8*)s.src;
    u8* dst = (u8*)s.dst;
    const u64 t = s.type_size;
    const u64 n = s.len / t;
    FOR_EACH_INDEX(i, n) {
      for (u64 b = 0; b < t; b++) dst[i * t + b] = src[physical(s, b * n + i)];
    }
    FOR_EACH_INDEX(i, s.len - n * t) { dst[n * t + i] = src[physical(s, n * t + i)]; }
  }
}

// blosc's bit shuffle: bit k of byte b of element i sits at bit position (b * 8 + k) * n + i
// of the source, for the n = len / T elements when n is a multiple of 8 (else nothing was
// shuffled); remaining bytes are copied.
extern "C" __global__ void bit_unshuffle(const Shuffle* ops, u64 count) {
  FOR_EACH_OP(count) {
    const Shuffle s = ops[op];
    const u8* src = (const u8*)s.src;
    u8* dst = (u8*)s.dst;
    const u64 t = s.type_size;
    const u64 elements = s.len / t;
    const u64 n = (elements % 8 == 0) ? elements : 0;
    FOR_EACH_INDEX(i, n * t) {
      const u64 element = i / t, byte = i % t;
      u8 out = 0;
      for (u32 k = 0; k < 8; k++) {
        const u64 at = (byte * 8 + k) * n + element;
        out |= ((src[physical(s, at / 8)] >> (at % 8)) & 1) << k;
      }
      dst[i] = out;
    }
    FOR_EACH_INDEX(i, s.len - n * t) { dst[n * t + i] = src[physical(s, n * t + i)]; }
  }
}

struct Swap { u64 ptr, len, element_size; };

extern "C" __global__ void swap_bytes(const Swap* ops, u64 count) {
  FOR_EACH_OP(count) {
    const Swap s = ops[op];
    u8* data = (u8*)s.ptr;
    const u64 e = s.element_size;
    FOR_EACH_INDEX(i, s.len / e) {
      u8* element = data + i * e;
      for (u64 b = 0; b < e / 2; b++) {
        u8 tmp = element[b];
        element[b] = element[e - 1 - b];
        element[e - 1 - b] = tmp;
      }
    }
  }
}

__device__ __forceinline__ void copy_element(u8* dst, const u8* src, u64 size) {
  switch (size) {
    case 1: *dst = *src; break;
    case 2: *(unsigned short*)dst = *(const unsigned short*)src; break;
    case 4: *(u32*)dst = *(const u32*)src; break;
    case 8: *(u64*)dst = *(const u64*)src; break;
    default: for (u64 b = 0; b < size; b++) dst[b] = src[b];
  }
}

// dst (decoded C order) from src, whose axis a is decoded axis order[a].
struct Transpose { u64 src, dst, elements, element_size, ndim; u64 shape[MAX_DIMS]; u64 order[MAX_DIMS]; };

extern "C" __global__ void transpose(const Transpose* ops, u64 count) {
  FOR_EACH_OP(count) {
    const Transpose t = ops[op];
    u64 decoded_shape[MAX_DIMS];
    for (u64 a = 0; a < t.ndim; a++) decoded_shape[t.order[a]] = t.shape[a];
    FOR_EACH_INDEX(i, t.elements) {
      u64 index[MAX_DIMS];
      u64 rest = i;
      for (u64 a = t.ndim; a-- > 0;) { index[a] = rest % decoded_shape[a]; rest /= decoded_shape[a]; }
      u64 from = 0;
      for (u64 a = 0; a < t.ndim; a++) from = from * t.shape[a] + index[t.order[a]];
      copy_element((u8*)t.dst + i * t.element_size, (const u8*)t.src + from * t.element_size, t.element_size);
    }
  }
}

// The C-order block src (shape block) into dst (shape outer) at start. The block's rows (its
// innermost axis) are contiguous on both sides: each warp takes a segment of up to
// PLACE_SEGMENT bytes of a row at a time, works out where it goes once and copies it in words
// (working it out per element, with 64-bit divisions, cost more than the copy).
struct Place { u64 src, dst, elements, element_size, ndim; u64 block[MAX_DIMS]; u64 outer[MAX_DIMS]; u64 start[MAX_DIMS]; };

#define PLACE_SEGMENT 4096

extern "C" __global__ void place_block(const Place* ops, u64 count) {
  const u64 lane = threadIdx.x % 32;
  const u64 warp = ((u64)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const u64 warps = (u64)gridDim.x * blockDim.x / 32;
  FOR_EACH_OP(count) {
    const Place p = ops[op];
    const u64 last = p.ndim > 0 ? p.ndim - 1 : 0;
    const u64 row_len = p.ndim > 0 ? p.block[last] : 1;
    const u64 rows = row_len > 0 ? p.elements / row_len : 0;
    const u64 row_bytes = row_len * p.element_size;
    const u64 segments = (row_bytes + PLACE_SEGMENT - 1) / PLACE_SEGMENT;
    for (u64 unit = warp; unit < rows * segments; unit += warps) {
      const u64 row = unit / segments, at = unit % segments * PLACE_SEGMENT;
      u64 rest = row, to = p.ndim > 0 ? p.start[last] : 0, stride = p.ndim > 0 ? p.outer[last] : 1;
      for (u64 a = last; a-- > 0;) {
        to += (rest % p.block[a] + p.start[a]) * stride;
        rest /= p.block[a];
        stride *= p.outer[a];
      }
      const u64 len = min((u64)PLACE_SEGMENT, row_bytes - at);
      copy_run((u8*)p.dst + to * p.element_size + at, (const u8*)p.src + row * row_bytes + at, len, lane, 32);
    }
  }
}

// numcodecs fixedscaleoffset, decoded exactly as zarrs decodes it (see chain.rs): a stored
// `astype` element is cast to the array type through f32 (when `cast`), then
// value / scale + offset is computed in F (f32 for types of up to 2 bytes and f32, else f64)
// and cast back. Every cast follows Rust's `as`: floats to integers truncate toward zero,
// saturate, and NaN becomes 0; everything else rounds to nearest.
enum Element { I8, U8, I16, U16, I32, U32, I64, U64, F32, F64 };
struct ScaleOffset { u64 src, dst, elements; u32 dtype, astype, cast, offset_bits, scale_bits, pad; };

template <typename T> __device__ __forceinline__ T saturate(double x, double lo, double hi) {
  if (isnan(x)) return 0;
  if (x <= lo) return (T)lo;
  if (x >= hi) return (T)hi;
  return (T)x;
}
// A float's exact value (doubles hold every f32) cast as Rust's `as` casts it.
template <typename T> __device__ __forceinline__ T from_float(double x);
template <> __device__ __forceinline__ signed char from_float(double x) { return saturate<signed char>(x, -128.0, 127.0); }
template <> __device__ __forceinline__ u8 from_float(double x) { return saturate<u8>(x, 0.0, 255.0); }
template <> __device__ __forceinline__ short from_float(double x) { return saturate<short>(x, -32768.0, 32767.0); }
template <> __device__ __forceinline__ unsigned short from_float(double x) { return saturate<unsigned short>(x, 0.0, 65535.0); }
template <> __device__ __forceinline__ int from_float(double x) { return saturate<int>(x, -2147483648.0, 2147483647.0); }
template <> __device__ __forceinline__ u32 from_float(double x) { return saturate<u32>(x, 0.0, 4294967295.0); }
template <> __device__ __forceinline__ long long from_float(double x) {
  if (isnan(x)) return 0;
  if (x >= 9223372036854775808.0) return 0x7fffffffffffffffLL;
  if (x <= -9223372036854775808.0) return (long long)0x8000000000000000ULL;
  return (long long)x;
}
template <> __device__ __forceinline__ u64 from_float(double x) {
  if (isnan(x) || x <= 0.0) return 0;
  if (x >= 18446744073709551616.0) return 0xffffffffffffffffULL;
  return (u64)x;
}
template <> __device__ __forceinline__ float from_float(double x) { return (float)x; }
template <> __device__ __forceinline__ double from_float(double x) { return x; }

__device__ __forceinline__ float stored_as_f32(const u8* src, u32 type, u64 i) {
  switch (type) {
    case I8: return (float)((const signed char*)src)[i];
    case U8: return (float)src[i];
    case I16: return (float)((const short*)src)[i];
    case U16: return (float)((const unsigned short*)src)[i];
    case I32: return (float)((const int*)src)[i];
    case U32: return (float)((const u32*)src)[i];
    case I64: return (float)((const long long*)src)[i];
    case U64: return (float)((const u64*)src)[i];
    case F32: return ((const float*)src)[i];
    default: return (float)((const double*)src)[i];
  }
}

// Correctly rounded, never contracted or approximated.
__device__ __forceinline__ float unscale_in(float v, float scale, float offset) { return __fadd_rn(__fdiv_rn(v, scale), offset); }
__device__ __forceinline__ double unscale_in(double v, float scale, float offset) { return __dadd_rn(__ddiv_rn(v, (double)scale), (double)offset); }

template <typename T, typename F> __device__ void unscale(const ScaleOffset& s) {
  const float offset = __int_as_float(s.offset_bits), scale = __int_as_float(s.scale_bits);
  const u8* src = (const u8*)s.src;
  T* dst = (T*)s.dst;
  FOR_EACH_INDEX(i, s.elements) {
    const T value = s.cast ? from_float<T>((double)stored_as_f32(src, s.astype, i)) : ((const T*)src)[i];
    dst[i] = from_float<T>((double)unscale_in((F)value, scale, offset));
  }
}

extern "C" __global__ void scale_offset(const ScaleOffset* ops, u64 count) {
  FOR_EACH_OP(count) {
    const ScaleOffset s = ops[op];
    switch (s.dtype) {
      case I8: unscale<signed char, float>(s); break;
      case U8: unscale<u8, float>(s); break;
      case I16: unscale<short, float>(s); break;
      case U16: unscale<unsigned short, float>(s); break;
      case I32: unscale<int, double>(s); break;
      case U32: unscale<u32, double>(s); break;
      case I64: unscale<long long, double>(s); break;
      case U64: unscale<u64, double>(s); break;
      case F32: unscale<float, float>(s); break;
      default: unscale<double, double>(s); break;
    }
  }
}
