// The hand-written kernels of tests/cuda_kernels, compiled by the host compiler
// (the same text NVRTC compiles in tests/nvrtc) and run on odd sizes against
// plain loops.
#include "cuda_emulation.h"

// clang-format off: the prelude must come before the kernels, as in the NVRTC source.
#include "tessel_prelude.cuh"
#include "elementwise.cuh"
#include "reduce_block.cuh"
#include "reduce_two_pass.cuh"
#include "reduce_atomic.cuh"
// clang-format on

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace {

const int64_t kSizes[] = {1, 31, 33, 1000, 1000003};

std::vector<float> random_floats(int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

unsigned blocks_for(int64_t n, unsigned block, unsigned cap) {
  return static_cast<unsigned>(std::clamp<int64_t>((n + block - 1) / block, 1, cap));
}

double abs_sum(const std::vector<float>& x) {
  double s = 0;
  for (float v : x) s += std::fabs(v);
  return s;
}

double sum(const std::vector<float>& x) {
  double s = 0;
  for (float v : x) s += v;
  return s;
}

}  // namespace

TEST_CASE("emulated elementwise grid-stride kernel matches a loop", "[emulated-cuda]") {
  for (int64_t n : kSizes) {
    CAPTURE(n);
    std::vector<float> x = random_floats(n, 1), y = random_floats(n, 2);
    const float a = 1.75f;
    std::vector<float> ref(x.size());
    for (size_t i = 0; i < x.size(); ++i)
      ref[i] = std::max(a * x[i] + y[i], 0.0f) + 0.5f * (1.0f / (1.0f + std::exp(-x[i])));
    // Fewer threads than elements (the loop strides) and one thread per element.
    for (auto [block, cap] : {std::pair{256u, 7u}, std::pair{128u, 1u << 30}}) {
      std::vector<float> out(x.size(), -99.0f);
      emu::launch(ew_axpy_relu_sigmoid, dim3(blocks_for(n, block, cap)), dim3(block), x.data(), y.data(),
                  out.data(), a, n);
      for (size_t i = 0; i < x.size(); ++i) REQUIRE(out[i] == Approx(ref[i]).epsilon(1e-6).margin(1e-7));
    }
  }
}

TEST_CASE("prelude fp16/bf16 conversions round to nearest even", "[emulated-cuda]") {
  std::vector<float> x = {1.0f, -2.0f, 0.1f, 65504.0f, 65519.0f, 65520.0f, 1e-8f, 5.9604645e-8f, 3e-5f,
                          INFINITY, -INFINITY, NAN, 0.0f, -0.0f, 1.0f + 1.0f / 2048};
  const uint16_t want_h[] = {0x3c00, 0xc000, 0x2e66, 0x7bff, 0x7bff, 0x7c00, 0x0000, 0x0001, 0x01f7,
                             0x7c00, 0xfc00, 0x7fff, 0x0000, 0x8000, 0x3c00};
  const uint16_t want_b[] = {0x3f80, 0xc000, 0x3dcd, 0x4780, 0x4780, 0x4780, 0x322c, 0x3380, 0x37fc,
                             0x7f80, 0xff80, 0x7fc0, 0x0000, 0x8000, 0x3f80};
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<uint16_t> h(x.size()), b(x.size());
  std::vector<float> back_h(x.size()), back_b(x.size());
  emu::launch(ew_half_bf16_roundtrip, dim3(1), dim3(32), x.data(), h.data(), b.data(), back_h.data(),
              back_b.data(), n);
  for (size_t i = 0; i < x.size(); ++i) {
    CAPTURE(i, x[i]);
    CHECK(h[i] == want_h[i]);
    CHECK(b[i] == want_b[i]);
  }

  // Every finite half converts to a float that converts back to the same bits.
  std::vector<float> all;
  for (uint32_t bits = 0; bits < 0x10000; ++bits)
    if ((bits & 0x7c00) != 0x7c00) all.push_back(ts::half_to_float(static_cast<uint16_t>(bits)));
  std::vector<uint16_t> h2(all.size()), b2(all.size());
  std::vector<float> bh2(all.size()), bb2(all.size());
  const int64_t m = static_cast<int64_t>(all.size());
  emu::launch(ew_half_bf16_roundtrip, dim3(64), dim3(256), all.data(), h2.data(), b2.data(), bh2.data(),
              bb2.data(), m);
  size_t k = 0;
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    if ((bits & 0x7c00) == 0x7c00) continue;
    REQUIRE(h2[k] == bits);
    REQUIRE(bh2[k] == all[k]);
    ++k;
  }
}

TEST_CASE("emulated single-block reduction (shared memory + warp shuffles) matches a loop", "[emulated-cuda]") {
  for (int64_t n : kSizes) {
    CAPTURE(n);
    std::vector<float> x = random_floats(n, 3);
    for (unsigned block : {64u, 256u, 1024u}) {
      CAPTURE(block);
      float out = -1.0f;
      emu::launch(reduce_sum_block, dim3(1), dim3(block), x.data(), &out, n);
      REQUIRE(std::fabs(out - sum(x)) <= 1e-5 * abs_sum(x) + 1e-6);
    }
  }
}

TEST_CASE("emulated row max (xor butterfly + broadcast) matches a loop", "[emulated-cuda]") {
  for (int64_t cols : kSizes) {
    CAPTURE(cols);
    const int rows = cols > 100000 ? 3 : 5;
    std::vector<float> x = random_floats(rows * cols, 4);
    std::vector<float> out(rows, 0.0f);
    for (unsigned block : {32u, 128u, 512u}) {
      emu::launch(reduce_max_rows, dim3(rows), dim3(block), x.data(), out.data(), cols);
      for (int r = 0; r < rows; ++r)
        REQUIRE(out[r] == *std::max_element(x.begin() + r * cols, x.begin() + (r + 1) * cols));
    }
  }
}

TEST_CASE("emulated two-pass multi-block reduction matches a loop", "[emulated-cuda]") {
  for (int64_t n : kSizes) {
    CAPTURE(n);
    std::vector<float> x = random_floats(n, 5);
    const unsigned blocks = blocks_for(n, 256, 96);
    std::vector<float> partials(blocks, -1.0f);
    float out = -1.0f;
    emu::launch(reduce_sum_partials, dim3(blocks), dim3(256), x.data(), partials.data(), n);
    emu::launch(reduce_sum_finalize, dim3(1), dim3(64), partials.data(), &out, static_cast<int64_t>(blocks));
    REQUIRE(std::fabs(out - sum(x)) <= 1e-5 * abs_sum(x) + 1e-6);
    // Each partial is its block's grid-stride share.
    for (unsigned b = 0; b < blocks; ++b) {
      double s = 0;
      for (int64_t i = b * 256; i < n; i += int64_t(blocks) * 256)
        for (int64_t j = i; j < std::min<int64_t>(i + 256, n); ++j) s += x[j];
      REQUIRE(std::fabs(partials[b] - s) <= 1e-4 * std::max(1.0, std::fabs(s)));
    }
  }
}

TEST_CASE("emulated atomicAdd reductions match a loop", "[emulated-cuda]") {
  for (int64_t n : kSizes) {
    CAPTURE(n);
    std::vector<float> x = random_floats(n, 6);
    float out = 0.0f;
    emu::launch(reduce_sum_atomic, dim3(blocks_for(n, 256, 80)), dim3(256), x.data(), &out, n);
    REQUIRE(std::fabs(out - sum(x)) <= 1e-5 * abs_sum(x) + 1e-6);

    unsigned long long count = 0;
    double s = 0;
    int max_index = -1;
    emu::launch(count_and_sum_f64, dim3(blocks_for(n, 128, 50)), dim3(128), x.data(), &count, &s, &max_index, n);
    unsigned long long want_count = 0;
    int want_max = -1;
    for (int64_t i = 0; i < n; ++i)
      if (x[i] > 0.0f) {
        ++want_count;
        want_max = static_cast<int>(i);
      }
    REQUIRE(count == want_count);
    REQUIRE(max_index == want_max);
    REQUIRE(std::fabs(s - sum(x)) <= 1e-12 * abs_sum(x) + 1e-12);
  }
}

TEST_CASE("emulated kernels give the same results whichever way threads are ordered", "[emulated-cuda]") {
  std::vector<float> x = random_floats(4099, 7);
  float forward = 0, backward = 0;
  emu::LaunchOptions reverse;
  reverse.reverse_thread_order = true;
  emu::launch(reduce_sum_block, dim3(1), dim3(256), x.data(), &forward, int64_t(4099));
  emu::launch(reverse, reduce_sum_block, dim3(1), dim3(256), x.data(), &backward, int64_t(4099));
  REQUIRE(forward == backward);  // same arithmetic order: barriers make the result order-independent
}
