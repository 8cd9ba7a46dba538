// Element types. f16/bf16 are storage formats: arithmetic on them runs in f32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace tessel {

enum class DType : uint8_t { f32, f64, i64, i32, b8, f16, bf16 };

inline constexpr DType kAllDTypes[] = {DType::f32, DType::f64, DType::i64, DType::i32,
                                       DType::b8,  DType::f16, DType::bf16};

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::i64: return 8;
    case DType::i32: return 4;
    case DType::b8: return 1;
    case DType::f16: return 2;
    case DType::bf16: return 2;
  }
  return 0;
}

/// Short name used in printing and IR: "f32", "i64", "bool".
constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::i64: return "i64";
    case DType::i32: return "i32";
    case DType::b8: return "bool";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
  }
  return "?";
}

/// PyTorch's spelling, used in tensor printing: "float32", "int64".
constexpr std::string_view dtype_torch_name(DType t) {
  switch (t) {
    case DType::f32: return "float32";
    case DType::f64: return "float64";
    case DType::i64: return "int64";
    case DType::i32: return "int32";
    case DType::b8: return "bool";
    case DType::f16: return "float16";
    case DType::bf16: return "bfloat16";
  }
  return "?";
}

constexpr bool is_floating(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16;
}
constexpr bool is_integral(DType t) { return t == DType::i64 || t == DType::i32; }

/// The dtype arithmetic runs in: half formats compute in f32.
constexpr DType compute_dtype(DType t) {
  return (t == DType::f16 || t == DType::bf16) ? DType::f32 : t;
}

/// Result type of a binary op between two tensors (PyTorch's category rules:
/// bool < integer < floating, wider wins within a category).
constexpr int dtype_rank(DType t) {
  switch (t) {
    case DType::b8: return 0;
    case DType::i32: return 1;
    case DType::i64: return 2;
    case DType::bf16: return 3;
    case DType::f16: return 4;
    case DType::f32: return 5;
    case DType::f64: return 6;
  }
  return 0;
}
constexpr DType promote(DType a, DType b) {
  if ((a == DType::f16 && b == DType::bf16) || (a == DType::bf16 && b == DType::f16)) return DType::f32;
  return dtype_rank(a) >= dtype_rank(b) ? a : b;
}

template <class T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::f64; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::i64; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::i32; };
template <> struct dtype_of<bool> { static constexpr DType value = DType::b8; };
template <class T> inline constexpr DType dtype_of_v = dtype_of<T>::value;

// --- half formats: bit conversions (round to nearest even) ---

inline uint16_t f32_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);  // quiet NaN
  uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}
inline float bf16_to_f32(uint16_t h) {
  uint32_t x = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}
uint16_t f32_to_f16(float f);
float f16_to_f32(uint16_t h);

}  // namespace tessel
