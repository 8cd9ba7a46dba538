// f16 and bf16: storage formats whose arithmetic runs in f32. Bit-exact
// conversions (round to nearest even, subnormals, inf, nan) and tensors of them.
#include "tests/support/tensor_testing.h"

#include <bit>
#include <limits>

using namespace tessel;
using namespace tessel::testing;

namespace {
float bits_f32(uint32_t b) { return std::bit_cast<float>(b); }
uint32_t f32_bits(float f) { return std::bit_cast<uint32_t>(f); }
}  // namespace

TEST_CASE("f16: exact values encode exactly", "[half]") {
  CHECK(f32_to_f16(0.0f) == 0x0000);
  CHECK(f32_to_f16(-0.0f) == 0x8000);
  CHECK(f32_to_f16(1.0f) == 0x3C00);
  CHECK(f32_to_f16(-2.0f) == 0xC000);
  CHECK(f32_to_f16(0.5f) == 0x3800);
  CHECK(f32_to_f16(65504.0f) == 0x7BFF);           // largest finite
  CHECK(f32_to_f16(std::ldexp(1.0f, -14)) == 0x0400);  // smallest normal
  CHECK(f32_to_f16(std::ldexp(1.0f, -24)) == 0x0001);  // smallest subnormal
  CHECK(f32_to_f16(std::ldexp(1023.0f, -24)) == 0x03FF);  // largest subnormal
}

TEST_CASE("f16: round to nearest, ties to even", "[half]") {
  // 1 + 2^-11 lies halfway between 1 and 1 + 2^-10: the even mantissa (1.0) wins.
  CHECK(f32_to_f16(1.0f + std::ldexp(1.0f, -11)) == 0x3C00);
  // 1 + 3*2^-11 lies halfway between 1 + 2^-10 (odd) and 1 + 2^-9 (even).
  CHECK(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3C02);
  // Just above the halfway point rounds up.
  CHECK(f32_to_f16(std::nextafter(1.0f + std::ldexp(1.0f, -11), 2.0f)) == 0x3C01);
  CHECK(f32_to_f16(0.1f) == 0x2E66);
  CHECK(f32_to_f16(1.0f / 3.0f) == 0x3555);
}

TEST_CASE("f16: overflow goes to inf at the rounding boundary", "[half]") {
  CHECK(f32_to_f16(65519.0f) == 0x7BFF);
  CHECK(f32_to_f16(65520.0f) == 0x7C00);  // halfway to 2^16: ties to even = inf
  CHECK(f32_to_f16(1e10f) == 0x7C00);
  CHECK(f32_to_f16(-1e10f) == 0xFC00);
  CHECK(f32_to_f16(std::numeric_limits<float>::infinity()) == 0x7C00);
  CHECK(f32_to_f16(-std::numeric_limits<float>::infinity()) == 0xFC00);
}

TEST_CASE("f16: subnormals and underflow", "[half]") {
  float tiny = std::ldexp(1.0f, -24);
  CHECK(f32_to_f16(tiny / 2) == 0x0000);          // halfway to 0: even (0) wins
  CHECK(f32_to_f16(tiny * 0.75f) == 0x0001);      // above halfway: rounds up
  CHECK(f32_to_f16(tiny * 0.25f) == 0x0000);
  CHECK(f32_to_f16(tiny * 1.5f) == 0x0002);       // tie between 1 and 2 units: 2 is even
  CHECK(f32_to_f16(tiny * 2.5f) == 0x0002);       // tie between 2 and 3: 2
  CHECK(f32_to_f16(-tiny * 3) == 0x8003);
  CHECK(f32_to_f16(std::ldexp(1.0f, -30)) == 0x0000);
  // The largest subnormal plus half a unit rounds up into the smallest normal.
  CHECK(f32_to_f16(std::ldexp(1023.5f, -24)) == 0x0400);
}

TEST_CASE("f16: nan stays nan", "[half]") {
  uint16_t h = f32_to_f16(std::numeric_limits<float>::quiet_NaN());
  CHECK((h & 0x7C00) == 0x7C00);
  CHECK((h & 0x03FF) != 0);
  CHECK(std::isnan(f16_to_f32(h)));
  CHECK(std::isnan(f16_to_f32(0x7C01)));  // a signalling pattern reads as nan too
}

TEST_CASE("f16: decoding known patterns", "[half]") {
  CHECK(f16_to_f32(0x3C00) == 1.0f);
  CHECK(f16_to_f32(0x7BFF) == 65504.0f);
  CHECK(f16_to_f32(0x0001) == std::ldexp(1.0f, -24));
  CHECK(f16_to_f32(0x03FF) == std::ldexp(1023.0f, -24));
  CHECK(f16_to_f32(0x0400) == std::ldexp(1.0f, -14));
  CHECK(f16_to_f32(0x7C00) == std::numeric_limits<float>::infinity());
  CHECK(f16_to_f32(0xFC00) == -std::numeric_limits<float>::infinity());
  CHECK(f32_bits(f16_to_f32(0x8000)) == 0x80000000u);
  CHECK(f16_to_f32(0x3555) == 0.333251953125f);
}

TEST_CASE("f16: every non-nan pattern round-trips through f32", "[half]") {
  int bad = 0;
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    float f = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    if (f32_to_f16(f) != h) ++bad;
  }
  CHECK(bad == 0);
}

TEST_CASE("f16: rounding matches nearest-even over a dense sweep", "[half]") {
  // For f32 values between consecutive halves, the encoder picks the nearer one.
  int bad = 0;
  for (uint32_t h = 0x0000; h < 0x7BFF; h += 7) {
    float lo = f16_to_f32(static_cast<uint16_t>(h)), hi = f16_to_f32(static_cast<uint16_t>(h + 1));
    float q1 = lo + (hi - lo) * 0.25f, q3 = lo + (hi - lo) * 0.75f;
    if (f32_to_f16(q1) != h) ++bad;
    if (f32_to_f16(q3) != h + 1) ++bad;
  }
  CHECK(bad == 0);
}

TEST_CASE("bf16: truncated f32 with round to nearest even", "[half]") {
  CHECK(f32_to_bf16(1.0f) == 0x3F80);
  CHECK(f32_to_bf16(-2.0f) == 0xC000);
  CHECK(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)) == 0x3F80);       // tie -> even
  CHECK(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3F82);   // tie -> even
  CHECK(f32_to_bf16(std::nextafter(1.0f + std::ldexp(1.0f, -8), 2.0f)) == 0x3F81);
  CHECK(f32_to_bf16(std::numeric_limits<float>::infinity()) == 0x7F80);
  CHECK(f32_to_bf16(std::numeric_limits<float>::max()) == 0x7F80);  // rounds up to inf
  CHECK(f32_to_bf16(bits_f32(0x00010000)) == 0x0001);  // subnormal kept
  CHECK(f32_to_bf16(bits_f32(0x00008000)) == 0x0000);  // subnormal tie -> even
  CHECK(f32_to_bf16(bits_f32(0x00018000)) == 0x0002);  // subnormal tie -> even
  uint16_t n = f32_to_bf16(std::numeric_limits<float>::quiet_NaN());
  CHECK(std::isnan(bf16_to_f32(n)));
  // A nan whose payload lives only in the low bits must not turn into inf.
  CHECK(std::isnan(bf16_to_f32(f32_to_bf16(bits_f32(0x7F800001)))));
}

TEST_CASE("bf16: every non-nan pattern round-trips through f32", "[half]") {
  int bad = 0;
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    float f = bf16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    if (f32_to_bf16(f) != h) ++bad;
  }
  CHECK(bad == 0);
}

TEST_CASE("f16 tensors: storage rounds, reads back as f32 values", "[half]") {
  Tensor t = tensor({0.1, 1.0 / 3, 65519., 70000., -1e-8}).to(DType::f16);
  CHECK(t.dtype() == DType::f16);
  auto v = t.to_vector<float>();
  CHECK(v[0] == f16_to_f32(0x2E66));
  CHECK(v[1] == f16_to_f32(0x3555));
  CHECK(v[2] == 65504.0f);
  CHECK(std::isinf(v[3]));
  CHECK(f32_bits(v[4]) == 0x80000000u);  // underflows to -0
}

TEST_CASE("f16 tensors: subnormals survive a round trip", "[half]") {
  float tiny = std::ldexp(1.0f, -24);
  Tensor t = from_vector<float>({tiny, 3 * tiny, 1023 * tiny}, {3}).to(DType::f16);
  CHECK(t.to_vector<float>() == std::vector<float>{tiny, 3 * tiny, 1023 * tiny});
  CHECK(t.to(DType::f32).to_vector<float>() == std::vector<float>{tiny, 3 * tiny, 1023 * tiny});
}

TEST_CASE("f16 tensors: inf and nan survive arithmetic", "[half]") {
  Tensor t = from_vector<float>({std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(), 1},
                                {3})
                 .to(DType::f16);
  auto v = Tensor(t * 2).to_vector<float>();
  CHECK(std::isinf(v[0]));
  CHECK(std::isnan(v[1]));
  CHECK(v[2] == 2.0f);
}

TEST_CASE("f16 arithmetic runs in f32 and rounds once", "[half]") {
  std::vector<float> a, b;
  for (int i = 1; i <= 64; ++i) {
    a.push_back(f16_to_f32(f32_to_f16(0.37f * i)));
    b.push_back(f16_to_f32(f32_to_f16(1.0f / (i + 2))));
  }
  Tensor ha = from_vector(a, {64}).to(DType::f16), hb = from_vector(b, {64}).to(DType::f16);
  Tensor sum = ha + hb, prod = ha * hb, quot = ha / hb;
  CHECK(sum.dtype() == DType::f16);
  CHECK(quot.dtype() == DType::f16);
  auto s = sum.to_vector<float>(), p = prod.to_vector<float>(), q = quot.to_vector<float>();
  for (size_t i = 0; i < a.size(); ++i) {
    INFO(i);
    CHECK(s[i] == f16_to_f32(f32_to_f16(a[i] + b[i])));
    CHECK(p[i] == f16_to_f32(f32_to_f16(a[i] * b[i])));
    CHECK(q[i] == f16_to_f32(f32_to_f16(a[i] / b[i])));
  }
}

TEST_CASE("f16 tensor * python-style scalar: the scalar is not rounded to f16 first", "[half]") {
  // PyTorch computes half * 0.1 as float(x) * 0.1f, then rounds once.
  std::vector<float> a;
  for (int i = 1; i <= 200; ++i) a.push_back(f16_to_f32(f32_to_f16(0.0173f * i)));
  Tensor h = from_vector(a, {200}).to(DType::f16);
  auto r = Tensor(h * 0.1).to_vector<float>();
  int bad = 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (r[i] != f16_to_f32(f32_to_f16(a[i] * 0.1f))) ++bad;
  CHECK(bad == 0);
  CHECK((h * 0.1).dtype() == DType::f16);
}

TEST_CASE("bf16 arithmetic runs in f32 and rounds once", "[half]") {
  std::vector<float> a{1.5f, 3.0f, -0.375f, 1000.0f};
  Tensor t = from_vector(a, {4}).to(DType::bf16);
  auto v = Tensor(t.exp() + t).to_vector<float>();
  for (size_t i = 0; i < a.size(); ++i) {
    float x = bf16_to_f32(f32_to_bf16(a[i]));
    float e = bf16_to_f32(f32_to_bf16(std::exp(x)));
    CHECK(v[i] == bf16_to_f32(f32_to_bf16(e + x)));
  }
}

TEST_CASE("half reductions and matmul return the half dtype", "[half]") {
  Tensor t = ones({4, 4}).to(DType::f16);
  CHECK(t.sum().dtype() == DType::f16);
  CHECK(t.sum().item<double>() == 16);
  CHECK(t.mean().item<double>() == 1);
  CHECK(t.matmul(t).dtype() == DType::f16);
  CHECK(vals(t.matmul(t)) == std::vector<double>(16, 4.0));
  CHECK(t.to(DType::bf16).max().dtype() == DType::bf16);
}

TEST_CASE("half to int and back", "[half]") {
  Tensor t = tensor({2.75, -1.5}).to(DType::f16);
  CHECK(ivals(t.to(DType::i64)) == std::vector<int64_t>{2, -1});
  CHECK(vals(tensor({3, -4}).to(DType::bf16)) == std::vector<double>{3, -4});
}
