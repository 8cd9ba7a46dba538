// The device prelude every generated CUDA kernel starts with.
//
// NVRTC compiles tessel's kernels without any CUDA header (a header costs more
// compile time than the kernel), so the few things generated code needs live
// here: fixed-width integer typedefs, fp16/bf16 <-> float conversions, math
// with one spelling for float and double (ts::exp, ts::sigmoid, ...), warp
// reductions and grid-stride indexing.
//
//   std::string source = std::string(tessel::cuda::prelude) + kernel_body;
//   tessel::cuda::compile(source, "fused_add_relu", {});
//
// The text is also valid host C++ once tests/cuda_emu/cuda_emulation.h is
// included, so the emulation tests run exactly what NVRTC compiles. It is
// include-guarded, so several kernels may share one translation unit there.
// It must stay between the delimiters below (tests extract it from this file).
#pragma once

#include <string_view>

namespace tessel::cuda {

inline constexpr std::string_view prelude = R"tessel_prelude(// ---- tessel device prelude ----
#ifndef TESSEL_CUDA_PRELUDE
#define TESSEL_CUDA_PRELUDE
#if defined(__CUDACC_RTC__)
typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef short int16_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;
#endif
// Dynamic shared memory; the host emulation defines its own spelling.
#ifndef TS_DYNAMIC_SHARED
#define TS_DYNAMIC_SHARED(T, name) extern __shared__ __align__(16) T name[]
#endif
#define TS_FN __device__ __forceinline__
namespace ts {
// Grid-stride loops in 64-bit: for (int64_t i = ts::thread_index(); i < n; i += ts::grid_stride())
TS_FN int64_t thread_index() { return (int64_t)blockIdx.x * blockDim.x + threadIdx.x; }
TS_FN int64_t grid_stride() { return (int64_t)gridDim.x * blockDim.x; }
TS_FN int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
// No math.h here: INFINITY and NAN are spelled as bits.
TS_FN float inf_f32() { return __int_as_float(0x7f800000); }
TS_FN float nan_f32() { return __int_as_float(0x7fc00000); }
TS_FN double inf_f64() { return __longlong_as_double(0x7ff0000000000000LL); }
TS_FN double nan_f64() { return __longlong_as_double(0x7ff8000000000000LL); }

// fp16 and bf16 are storage types (uint16_t bits); arithmetic runs in float.
TS_FN float half_to_float(uint16_t h) {
#if defined(__CUDA_ARCH__)
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
#else
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1fu) return __uint_as_float(sign | 0x7f800000u | (m << 13));
  if (e == 0) {
    float v = (float)m * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return __uint_as_float(sign | ((e + 112u) << 23) | (m << 13));
#endif
}
TS_FN uint16_t float_to_half(float f) {
#if defined(__CUDA_ARCH__)
  uint16_t h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
#else
  uint32_t x = __float_as_uint(f), sign = x & 0x80000000u, o;
  x ^= sign;
  if (x >= (143u << 23)) {  // >= 2^16: inf; NaN becomes 0x7fff like cvt.rn.f16.f32
    o = x > 0x7f800000u ? 0x7fffu : 0x7c00u;
  } else if (x < (113u << 23)) {  // half subnormal or zero: let float addition round
    o = __float_as_uint(__uint_as_float(x) + __uint_as_float(126u << 23)) - (126u << 23);
  } else {  // normal: rebias, round to nearest even
    o = (x + ((uint32_t)(15 - 127) << 23) + 0xfffu + ((x >> 13) & 1u)) >> 13;
  }
  return (uint16_t)(o | (sign >> 16));
#endif
}
TS_FN float bf16_to_float(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }
TS_FN uint16_t float_to_bf16(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// One spelling for float and double, so the emitter writes ts::exp(x) for either.
#define TS_MATH1(name, f32, f64) \
  TS_FN float name(float x) { return f32(x); } \
  TS_FN double name(double x) { return f64(x); }
TS_MATH1(exp, expf, ::exp)
TS_MATH1(exp2, exp2f, ::exp2)
TS_MATH1(expm1, expm1f, ::expm1)
TS_MATH1(log, logf, ::log)
TS_MATH1(log2, log2f, ::log2)
TS_MATH1(log1p, log1pf, ::log1p)
TS_MATH1(sqrt, sqrtf, ::sqrt)
TS_MATH1(sin, sinf, ::sin)
TS_MATH1(cos, cosf, ::cos)
TS_MATH1(tanh, tanhf, ::tanh)
TS_MATH1(erf, erff, ::erf)
TS_MATH1(abs, fabsf, ::fabs)
TS_MATH1(floor, floorf, ::floor)
TS_MATH1(ceil, ceilf, ::ceil)
TS_MATH1(trunc, truncf, ::trunc)
TS_MATH1(round, rintf, ::rint)  // half to even, like torch.round
#undef TS_MATH1
TS_FN float rsqrt(float x) { return rsqrtf(x); }
TS_FN double rsqrt(double x) { return ::rsqrt(x); }
TS_FN float pow(float a, float b) { return powf(a, b); }
TS_FN double pow(double a, double b) { return ::pow(a, b); }
TS_FN float max(float a, float b) { return fmaxf(a, b); }  // NaN-ignoring, like fmaxf
TS_FN double max(double a, double b) { return fmax(a, b); }
TS_FN int32_t max(int32_t a, int32_t b) { return a > b ? a : b; }
TS_FN int64_t max(int64_t a, int64_t b) { return a > b ? a : b; }
TS_FN float min(float a, float b) { return fminf(a, b); }
TS_FN double min(double a, double b) { return fmin(a, b); }
TS_FN int32_t min(int32_t a, int32_t b) { return a < b ? a : b; }
TS_FN int64_t min(int64_t a, int64_t b) { return a < b ? a : b; }

// Activations, written once for float and double.
template <class T> TS_FN T relu(T x) { return x > T(0) ? x : T(0); }
template <class T> TS_FN T sigmoid(T x) { return T(1) / (T(1) + ts::exp(-x)); }
template <class T> TS_FN T silu(T x) { return x * ts::sigmoid(x); }
template <class T> TS_FN T gelu(T x) { return T(0.5) * x * (T(1) + ts::erf(x * T(0.70710678118654752))); }
template <class T> TS_FN T gelu_tanh(T x) {
  return T(0.5) * x * (T(1) + ts::tanh(T(0.79788456080286536) * (x + T(0.044715) * x * x * x)));
}
template <class T> TS_FN T softplus(T x) { return x > T(20) ? x : ts::log1p(ts::exp(x)); }

// W consecutive elements in one access (ld/st.global.v4.f32, .v2.f64, ...):
// the address must be aligned to W * sizeof(T), which the launch checks. The
// host emulation defines TS_CHECK_ALIGNED to report a misaligned access (a
// fault on a GPU).
#ifndef TS_CHECK_ALIGNED
#define TS_CHECK_ALIGNED(p, bytes)
#endif
template <class T, int W> struct __align__(sizeof(T) * W) vec { T v[W]; };
template <int W, class T> TS_FN void load_vec(T (&dst)[W], const T* p) {
  TS_CHECK_ALIGNED(p, sizeof(T) * W);
  const vec<T, W> x = *reinterpret_cast<const vec<T, W>*>(p);
  for (int w = 0; w < W; ++w) dst[w] = x.v[w];
}
template <int W, class T> TS_FN void store_vec(T* p, const T (&src)[W]) {
  TS_CHECK_ALIGNED(p, sizeof(T) * W);
  vec<T, W> x;
  for (int w = 0; w < W; ++w) x.v[w] = src[w];
  *reinterpret_cast<vec<T, W>*>(p) = x;
}

// Warp reductions over all 32 lanes: warp_sum leaves the total in lane 0,
// warp_max / warp_min give it to every lane.
template <class T> TS_FN T warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  return v;
}
template <class T> TS_FN T warp_max(T v) {
  for (int o = 16; o > 0; o >>= 1) v = ts::max(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
template <class T> TS_FN T warp_min(T v) {
  for (int o = 16; o > 0; o >>= 1) v = ts::min(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
}  // namespace ts
#endif  // TESSEL_CUDA_PRELUDE
// ---- end of prelude ----
)tessel_prelude";

}  // namespace tessel::cuda
