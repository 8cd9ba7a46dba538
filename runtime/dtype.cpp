#include "runtime/dtype.h"

namespace tessel {

// IEEE binary16 conversions, written out because C++20 has no std::float16_t
// on g++ 12 and the CUDA headers must stay out of host code.
uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t absx = x & 0x7fffffffu;
  if (absx > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (absx >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (absx < 0x38800000u) {                                              // subnormal or zero
    if (absx < 0x33000000u) return static_cast<uint16_t>(sign);
    uint32_t mant = (absx & 0x7fffffu) | 0x800000u;
    int shift = 113 - static_cast<int>(absx >> 23) + 13;
    uint32_t half = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t e = (absx >> 23) - 112;
  uint32_t mant = absx & 0x7fffffu;
  uint32_t half = (e << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;
  return static_cast<uint16_t>(sign | half);
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t x;
  if (e == 0) {
    if (mant == 0) {
      x = sign;
    } else {  // subnormal: normalize
      int shift = 0;
      while (!(mant & 0x400u)) { mant <<= 1; ++shift; }
      mant &= 0x3ffu;
      x = sign | ((113u - shift) << 23) | (mant << 13);
    }
  } else if (e == 31) {
    x = sign | 0x7f800000u | (mant << 13);
  } else {
    x = sign | ((e + 112u) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

}  // namespace tessel
