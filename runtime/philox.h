// Philox4x32-10 (Salmon et al., SC'11): a counter-based generator. Value i of
// a stream is a pure function of (seed, counter), so the CPU and a CUDA kernel
// produce the exact same numbers for the same seed and offset.
#pragma once

#include <array>
#include <cstdint>

namespace tessel {

struct Philox4x32 {
  static constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  static constexpr uint32_t kKey0 = 0x9E3779B9u, kKey1 = 0xBB67AE85u;

  /// The four 32-bit outputs for block `counter` under `seed`.
  static constexpr std::array<uint32_t, 4> block(uint64_t seed, uint64_t counter) {
    uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32), c2 = 0, c3 = 0;
    uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
    for (int r = 0; r < 10; ++r) {
      uint64_t p0 = uint64_t{kMul0} * c0, p1 = uint64_t{kMul1} * c2;
      uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
      uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
      c1 = static_cast<uint32_t>(p1);
      c3 = static_cast<uint32_t>(p0);
      c0 = n0;
      c2 = n2;
      k0 += kKey0;
      k1 += kKey1;
    }
    return {c0, c1, c2, c3};
  }

  /// The i-th 32-bit word of the stream.
  static constexpr uint32_t word(uint64_t seed, uint64_t i) { return block(seed, i / 4)[i % 4]; }

  /// Uniform in [0, 1) with 24 random bits, as float32 sees them.
  static constexpr float uniform(uint32_t w) { return static_cast<float>(w >> 8) * (1.0f / 16777216.0f); }
};

}  // namespace tessel
