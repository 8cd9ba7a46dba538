// The emulation's execution model itself: indices, barriers, shuffles, votes,
// shared and dynamic shared memory, and the errors for what a GPU leaves undefined.
#include "cuda_emulation.h"

#include "tessel_prelude.cuh"

#include <catch2/catch.hpp>

#include <numeric>
#include <string>
#include <vector>

// Kernels keep C linkage, as generated ones do.
extern "C" __global__ void write_global_ids(unsigned* out, unsigned* hits) {
  const unsigned bx = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const unsigned tx = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const unsigned id = bx * (blockDim.x * blockDim.y * blockDim.z) + tx;
  out[id] = id;
  atomicAdd(hits + id, 1u);
}

extern "C" __global__ void barrier_counts(int* out) {
  const int t = static_cast<int>(threadIdx.x);
  out[0 * blockDim.x + t] = __syncthreads_count(t % 3 == 0);
  out[1 * blockDim.x + t] = __syncthreads_and(t >= 0);
  out[2 * blockDim.x + t] = __syncthreads_and(t != 5);
  out[3 * blockDim.x + t] = __syncthreads_or(t == 7);
  out[4 * blockDim.x + t] = __syncthreads_or(0);
}

// Per lane: broadcast from lane 3, up by 2, down by 3 within 8-lane segments,
// xor 5 within 16-lane segments, a ballot, any, all.
extern "C" __global__ void warp_ops(int* out) {
  const int t = static_cast<int>(threadIdx.x);
  const int v = 100 + t;
  int* o = out + 7 * t;
  o[0] = __shfl_sync(0xffffffffu, v, 3);
  o[1] = __shfl_up_sync(0xffffffffu, v, 2);
  o[2] = __shfl_down_sync(0xffffffffu, v, 3, 8);
  o[3] = __shfl_xor_sync(0xffffffffu, v, 5, 16);
  o[4] = static_cast<int>(__ballot_sync(0xffffffffu, t % 4 == 1));
  o[5] = __any_sync(0xffffffffu, t == 40);
  o[6] = __all_sync(0xffffffffu, t < 1000);
}

// Each block leaves its id in shared memory, waits, and checks nobody else's id
// got in: blocks that run in parallel on other workers have their own copy.
extern "C" __global__ void shared_isolation(unsigned* bad) {
  __shared__ unsigned owner[64];
  owner[threadIdx.x] = blockIdx.x;
  __syncthreads();
  for (unsigned i = 0; i < blockDim.x; ++i)
    if (owner[i] != blockIdx.x) atomicAdd(bad, 1u);
  __syncthreads();
}

extern "C" __global__ void reverse_with_dynamic_shared(const float* in, float* out) {
  TS_DYNAMIC_SHARED(float, tile);
  const unsigned t = threadIdx.x;
  tile[t] = in[blockIdx.x * blockDim.x + t];
  __syncthreads();
  out[blockIdx.x * blockDim.x + t] = tile[blockDim.x - 1 - t];
}

// Rotates through shared memory; without the barrier a thread may read its
// neighbour's slot before the neighbour wrote it.
extern "C" __global__ void rotate(const int* in, int* out, int with_barrier) {
  __shared__ int s[64];
  const unsigned t = threadIdx.x;
  s[t] = in[t];
  if (with_barrier) __syncthreads();
  out[t] = s[(t + 1) % blockDim.x];
}

extern "C" __global__ void early_return_then_barrier(int* out, int n) {
  if (static_cast<int>(threadIdx.x) >= n) return;
  __syncthreads();
  out[threadIdx.x] = 1;
}

extern "C" __global__ void shuffle_after_exit(float* out) {
  if (threadIdx.x == 31) return;
  out[threadIdx.x] = ts::warp_sum(1.0f);
}

extern "C" __global__ void shuffle_in_partial_warp(float* out) { out[threadIdx.x] = ts::warp_sum(1.0f); }

// The prelude's vector access: 4 floats per thread from `in + offset`, reversed.
extern "C" __global__ void reverse_quads(const float* in, float* out, int offset) {
  float q[4], r[4];
  ts::load_vec(q, in + offset + 4 * threadIdx.x);
  for (int w = 0; w < 4; ++w) r[w] = q[3 - w];
  ts::store_vec(out + 4 * threadIdx.x, r);
}

TEST_CASE("every thread of a 3-D grid of 3-D blocks runs once with its own indices", "[emulated-cuda]") {
  const dim3 grid(3, 2, 2), block(4, 2, 8);
  const unsigned total = 12 * 64;
  std::vector<unsigned> out(total, ~0u), hits(total, 0);
  emu::launch(write_global_ids, grid, block, out.data(), hits.data());
  for (unsigned i = 0; i < total; ++i) {
    REQUIRE(out[i] == i);
    REQUIRE(hits[i] == 1);
  }
}

TEST_CASE("__syncthreads_count/and/or see every thread's predicate", "[emulated-cuda]") {
  const int n = 96;
  std::vector<int> out(5 * n, -1);
  emu::launch(barrier_counts, dim3(1), dim3(n), out.data());
  for (int t = 0; t < n; ++t) {
    REQUIRE(out[0 * n + t] == 32);
    REQUIRE(out[1 * n + t] == 1);
    REQUIRE(out[2 * n + t] == 0);
    REQUIRE(out[3 * n + t] == 1);
    REQUIRE(out[4 * n + t] == 0);
  }
}

TEST_CASE("warp shuffles and votes follow CUDA's lane rules", "[emulated-cuda]") {
  const int n = 64;
  std::vector<int> out(7 * n, -1);
  emu::launch(warp_ops, dim3(1), dim3(n), out.data());
  for (int t = 0; t < n; ++t) {
    CAPTURE(t);
    const int lane = t % 32, warp_base = t - lane;
    const int* o = &out[7 * t];
    CHECK(o[0] == 100 + warp_base + 3);
    CHECK(o[1] == (lane >= 2 ? 100 + t - 2 : 100 + t));
    CHECK(o[2] == (lane % 8 + 3 < 8 ? 100 + t + 3 : 100 + t));
    CHECK(o[3] == 100 + warp_base + (lane ^ 5));
    CHECK(static_cast<unsigned>(o[4]) == 0x22222222u);
    CHECK(o[5] == (warp_base == 32 ? 1 : 0));
    CHECK(o[6] == 1);
  }
}

TEST_CASE("__shared__ is private to each block also with blocks on parallel workers", "[emulated-cuda]") {
  unsigned bad = 0;
  emu::LaunchOptions opt;
  opt.workers = 4;
  emu::launch(opt, shared_isolation, dim3(200), dim3(64), &bad);
  REQUIRE(bad == 0);
}

TEST_CASE("dynamic shared memory is sized by the launch", "[emulated-cuda]") {
  const unsigned blocks = 3, threads = 128;
  std::vector<float> in(blocks * threads), out(in.size());
  std::iota(in.begin(), in.end(), 0.0f);
  emu::LaunchOptions opt;
  opt.dynamic_shared_bytes = threads * sizeof(float);
  emu::launch(opt, reverse_with_dynamic_shared, dim3(blocks), dim3(threads), in.data(), out.data());
  for (unsigned b = 0; b < blocks; ++b)
    for (unsigned t = 0; t < threads; ++t) REQUIRE(out[b * threads + t] == in[b * threads + threads - 1 - t]);
}

TEST_CASE("a missing __syncthreads shows up in forward or reverse thread order", "[emulated-cuda]") {
  std::vector<int> in(64), out(64);
  std::iota(in.begin(), in.end(), 1000);
  auto correct = [&] {
    for (int t = 0; t < 64; ++t)
      if (out[t] != in[(t + 1) % 64]) return false;
    return true;
  };
  emu::LaunchOptions forward, backward;
  backward.reverse_thread_order = true;
  for (const emu::LaunchOptions* o : {&forward, &backward}) {
    emu::launch(*o, rotate, dim3(1), dim3(64), in.data(), out.data(), 1);
    REQUIRE(correct());
  }
  // Poison what the previous launches left in shared memory, then race.
  std::vector<int> zeros(64, 0), scratch(64);
  emu::launch(forward, rotate, dim3(1), dim3(64), zeros.data(), scratch.data(), 1);
  emu::launch(forward, rotate, dim3(1), dim3(64), in.data(), out.data(), 0);
  bool forward_ok = correct();
  emu::launch(forward, rotate, dim3(1), dim3(64), zeros.data(), scratch.data(), 1);
  emu::launch(backward, rotate, dim3(1), dim3(64), in.data(), out.data(), 0);
  bool backward_ok = correct();
  REQUIRE_FALSE((forward_ok && backward_ok));
}

TEST_CASE("a __syncthreads after an early return is reported and does not hang", "[emulated-cuda]") {
  std::vector<int> out(64, 0);
  try {
    emu::launch(early_return_then_barrier, dim3(2), dim3(64), out.data(), 40);
    FAIL("no error");
  } catch (const emu::EmulationError& e) {
    std::string msg = e.what();
    CHECK_THAT(msg, Catch::Contains("is reached by 40 of 64 threads; 24 exited without reaching it"));
  }
  // All threads reaching it is fine.
  emu::launch(early_return_then_barrier, dim3(2), dim3(64), out.data(), 64);
  REQUIRE(out[63] == 1);
}

TEST_CASE("shuffle misuse is reported", "[emulated-cuda]") {
  std::vector<float> out(64, 0);
  CHECK_THROWS_WITH(emu::launch(shuffle_after_exit, dim3(1), dim3(32), out.data()),
                    Catch::Contains("__shfl_down_sync(mask 0xffffffff) in warp 0 of block (0,0,0)") &&
                        Catch::Contains("lanes {31} exited"));
  CHECK_THROWS_WITH(emu::launch(shuffle_in_partial_warp, dim3(1), dim3(40), out.data()),
                    Catch::Contains("names lanes {8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,"
                                    "28,29,30,31} that do not exist in warp 1"));
  CHECK_THROWS_WITH(__syncthreads(), Catch::Contains("outside an emulated kernel"));
}

TEST_CASE("vector loads and stores move aligned groups and a misaligned one is reported", "[emulated-cuda]") {
  alignas(16) float in[36], out[32];
  std::iota(in, in + 36, 0.0f);
  emu::launch(reverse_quads, dim3(1), dim3(8), in, out, 4);
  for (int i = 0; i < 32; ++i) REQUIRE(out[i] == static_cast<float>(4 + 4 * (i / 4) + 3 - i % 4));
  CHECK_THROWS_WITH(emu::launch(reverse_quads, dim3(1), dim3(8), in, out, 1),
                    Catch::Contains("a 16-byte vector access at an address 4 bytes past alignment"));
}

TEST_CASE("launch configurations a GPU rejects are rejected", "[emulated-cuda]") {
  std::vector<unsigned> out(4096), hits(4096);
  CHECK_THROWS_AS(emu::launch(write_global_ids, dim3(1), dim3(2048), out.data(), hits.data()), emu::EmulationError);
  CHECK_THROWS_AS(emu::launch(write_global_ids, dim3(0), dim3(32), out.data(), hits.data()), emu::EmulationError);
  CHECK_THROWS_AS(emu::launch(write_global_ids, dim3(1, 70000), dim3(1), out.data(), hits.data()),
                  emu::EmulationError);
}
