// cuBLASLt products on a real device against the ref backend: f32 and f64,
// odd sizes, transposed operands, padded leading dimensions, operands that
// start off alignment, every epilogue (none, bias, relu, bias+relu), on the
// default stream and on a created one. Skipped (exit 77) without a GPU.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <cstdio>
#include <random>
#include <vector>

#include "codegen/backend.h"
#include "dsl/tessel.h"
#include "runtime/cuda/cublas.h"
#include "runtime/cuda/device_allocator.h"
#include "runtime/cuda/driver.h"

using namespace tessel;
using cuda::GemmEpilogue;

namespace {

// `n` values of dtype t in [-1, 1) as bytes, and as doubles.
struct HostData {
  std::vector<std::byte> bytes;
  std::vector<double> values;
};
HostData host_random(DType t, int64_t n, std::mt19937& rng) {
  std::uniform_real_distribution<double> d(-1, 1);
  HostData h;
  h.bytes.resize(static_cast<size_t>(n) * dtype_size(t));
  for (int64_t i = 0; i < n; ++i) {
    double v = d(rng);
    if (t == DType::f32) {
      float f = static_cast<float>(v);
      v = f;
      std::memcpy(h.bytes.data() + 4 * i, &f, 4);
    } else {
      std::memcpy(h.bytes.data() + 8 * i, &v, 8);
    }
    h.values.push_back(v);
  }
  return h;
}

// The same storage on the device, `pad` elements in (so it starts off alignment when pad is odd).
struct DeviceCopy {
  cuda::CUdeviceptr base = 0;
  cuda::CUdeviceptr at = 0;
  DeviceCopy(const HostData& h, DType t, int64_t pad) {
    const size_t es = dtype_size(t);
    base = cuda::mem_alloc(0, h.bytes.size() + static_cast<size_t>(pad) * es + 16);
    at = base + static_cast<cuda::CUdeviceptr>(pad) * es;
    cuda::memcpy_htod(at, h.bytes.data(), h.bytes.size());
  }
  ~DeviceCopy() { cuda::mem_free(base); }
  DeviceCopy(const DeviceCopy&) = delete;
  DeviceCopy& operator=(const DeviceCopy&) = delete;
};

// A stored row-major [rows, cols] matrix with leading dimension ld, as a CPU tensor (a strided view).
Tensor as_tensor(const HostData& h, DType t, int64_t rows, int64_t cols, int64_t ld) {
  Tensor flat = from_vector(h.values, Shape({static_cast<int64_t>(h.values.size())})).to(t);
  ir::BufferView v = flat.buffer();
  v.strides = {ld, 1};
  return from_buffer(v, t, Shape({rows, cols}));
}

struct Problem {
  int64_t M, N, K;
};

}  // namespace

TEST_CASE("cuBLASLt gemm with each epilogue matches the ref backend on odd sizes", "[gpu]") {
  REQUIRE(cuda::cublaslt_available());
  BackendOverride ref(ref_backend());
  std::mt19937 rng(20241203);
  std::printf("cublaslt gemm: seed 20241203, cuBLASLt %zu\n", cuda::cublaslt_version());
  cuda::CUstream stream = cuda::stream_create(0);
  const Problem problems[] = {{1, 1, 1}, {33, 31, 65}, {127, 129, 255}, {2, 1000, 3}, {257, 3, 513}};
  int checked = 0;
  for (DType t : {DType::f32, DType::f64})
    for (const Problem& p : problems)
      for (int layout = 0; layout < 4; ++layout)
        for (GemmEpilogue e : {GemmEpilogue::none, GemmEpilogue::bias, GemmEpilogue::relu, GemmEpilogue::bias_relu}) {
          const bool ta = layout & 1, tb = layout & 2;
          // Stored shapes, rows padded by 3 elements in half the cases.
          const int64_t pad_ld = (checked % 2) * 3;
          const int64_t ra = ta ? p.K : p.M, ca = ta ? p.M : p.K, rb = tb ? p.N : p.K, cb = tb ? p.K : p.N;
          const int64_t lda = ca + pad_ld, ldb = cb + pad_ld, ldc = p.N + pad_ld;
          CAPTURE(dtype_name(t), p.M, p.N, p.K, ta, tb, cuda::gemm_epilogue_name(e), lda, ldb, ldc);
          HostData a = host_random(t, ra * lda, rng), b = host_random(t, rb * ldb, rng), bias = host_random(t, p.N, rng);
          DeviceCopy da(a, t, checked % 3), db(b, t, 0), dbias(bias, t, checked % 2);
          DeviceCopy dc(host_random(t, p.M * ldc, rng), t, (checked / 2) % 2);

          cuda::CUstream s = checked % 2 ? stream : nullptr;
          cuda::gemm(0, s, t, p.M, p.N, p.K, {da.at, lda, ta}, {db.at, ldb, tb}, dc.at, ldc, e, dbias.at);
          cuda::stream_synchronize(s);
          std::vector<std::byte> got(static_cast<size_t>(p.M * ldc) * dtype_size(t));
          cuda::memcpy_dtoh(got.data(), dc.at, got.size());

          Tensor A = as_tensor(a, t, ra, ca, lda), B = as_tensor(b, t, rb, cb, ldb);
          if (ta) A = A.t();
          if (tb) B = B.t();
          Tensor want = A.matmul(B);
          if (e == GemmEpilogue::bias || e == GemmEpilogue::bias_relu)
            want = want + as_tensor(bias, t, 1, p.N, p.N).reshape({p.N});
          if (e == GemmEpilogue::relu || e == GemmEpilogue::bias_relu) want = want.relu();
          std::vector<double> w = want.to(DType::f64).to_vector<double>();
          // Each element sums K products of magnitude < 1.
          const double tol = (t == DType::f32 ? 2e-6 : 1e-14) * static_cast<double>(p.K + 1);
          for (int64_t i = 0; i < p.M; ++i)
            for (int64_t j = 0; j < p.N; ++j) {
              double g = 0;
              const std::byte* q = got.data() + static_cast<size_t>(i * ldc + j) * dtype_size(t);
              if (t == DType::f32) {
                float f;
                std::memcpy(&f, q, 4);
                g = f;
              } else {
                std::memcpy(&g, q, 8);
              }
              const double x = w[static_cast<size_t>(i * p.N + j)];
              if (std::fabs(g - x) > tol) FAIL("C[" << i << ", " << j << "] = " << g << ", ref " << x);
            }
          ++checked;
        }
  cuda::stream_destroy(stream);
  CHECK(checked == 2 * 5 * 4 * 4);
  // Every workspace went back to the allocator.
  CHECK(cuda::device_allocator(0).stats().allocated == 0);
}
