// GPU figures for scripts/gpu-check.sh (not a test): a fused elementwise
// chain's bandwidth against a device-to-device copy of the same bytes, a full
// sum (a reduction split across blocks) against the same copy, and an MLP
// forward through tessel (cuBLASLt, epilogues fused) against the same two
// GEMMs in cuBLAS alone (libcublas loaded at run time). Prints "gpu-bench: ..." lines.
#include <dlfcn.h>

#include <chrono>
#include <cstdio>
#include <functional>

#include "codegen/cuda/cuda_backend.h"
#include "dsl/tessel.h"
#include "runtime/cuda/device_allocator.h"
#include "runtime/cuda/driver.h"

using namespace tessel;

namespace {
double time_ms(int reps, const std::function<void()>& f) {
  f();  // warm-up: compiles, fills the allocator cache
  cuda::device_synchronize(0);
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) f();
  cuda::device_synchronize(0);
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / reps;
}
}  // namespace

int main() {
  if (num_gpus() == 0) {
    std::printf("gpu-bench: no GPU, nothing measured\n");
    return 0;
  }
  const int64_t n = int64_t(1) << 26;  // 256 MiB of f32
  Tensor x = randn({n}).cuda();
  double fused = time_ms(10, [&] { Tensor y = Tensor(Tensor(x * 1.5f + 0.25f).relu() * 2.0f - 1.0f).sigmoid(); y.eval(); });
  auto& alloc = cuda::device_allocator(0);
  cuda::CUdeviceptr dst = alloc.allocate(static_cast<size_t>(n) * 4);
  auto src = reinterpret_cast<cuda::CUdeviceptr>(x.buffer().storage->data());
  double copy = time_ms(10, [&] { cuda::memcpy_dtod_async(dst, src, static_cast<size_t>(n) * 4, nullptr); });
  alloc.deallocate(dst);
  const double gb = 2.0 * static_cast<double>(n) * 4 / 1e9;  // read + write
  std::printf("gpu-bench: fused 5-op chain %.1f GB/s vs device-to-device copy %.1f GB/s (%.0f%%)\n", gb / fused * 1e3,
              gb / copy * 1e3, 100.0 * copy / fused);
  CudaStats s0 = cuda_stats();
  double sum = time_ms(10, [&] { Tensor s = x.sum(); s.eval(); });
  const uint64_t splits = cuda_stats().split_launches - s0.split_launches;
  std::printf("gpu-bench: full sum of 2^26 f32 %.1f GB/s read (%s) vs copy %.1f GB/s\n", gb / 2 / sum * 1e3,
              splits ? "split across blocks" : "one block", gb / 2 / copy * 1e3);

  const int64_t B = 4096, D = 1024, H = 4096;
  Tensor X = randn({B, D}).cuda(), W1 = randn({D, H}).cuda(), b1 = randn({H}).cuda(), W2 = randn({H, D}).cuda(),
         b2 = randn({D}).cuda();
  double mlp = time_ms(3, [&] {
    Tensor h = Tensor(X.matmul(W1) + b1).relu();
    Tensor y = h.matmul(W2) + b2;
    y.eval();
  });
  s0 = cuda_stats();
  {
    Tensor h = Tensor(X.matmul(W1) + b1).relu();
    Tensor y = h.matmul(W2) + b2;
    y.eval();
  }
  CudaStats s1 = cuda_stats();
  std::printf("gpu-bench: MLP forward %lldx%lld->%lld->%lld f32 through tessel: %.2f ms (%llu cuBLASLt products, %llu "
              "with the epilogue fused, %llu host round trips)\n",
              (long long)B, (long long)D, (long long)H, (long long)D, mlp,
              (unsigned long long)(s1.blas_matmuls - s0.blas_matmuls),
              (unsigned long long)(s1.blas_epilogues - s0.blas_epilogues),
              (unsigned long long)(s1.host_evals - s0.host_evals));
  void* lib = dlopen("libcublas.so.13", RTLD_NOW);
  if (!lib) lib = dlopen("libcublas.so", RTLD_NOW);
  if (!lib) {
    std::printf("gpu-bench: cuBLAS not found (%s); no cuBLAS-only figure\n", dlerror());
    return 0;
  }
  using Create = int (*)(void**);
  using Sgemm = int (*)(void*, int, int, int, int, int, const float*, const float*, int, const float*, int, const float*,
                        float*, int);
  auto create = reinterpret_cast<Create>(dlsym(lib, "cublasCreate_v2"));
  auto sgemm = reinterpret_cast<Sgemm>(dlsym(lib, "cublasSgemm_v2"));
  void* handle = nullptr;
  if (!create || !sgemm || create(&handle) != 0) {
    std::printf("gpu-bench: cuBLAS did not initialize; no cuBLAS-only figure\n");
    return 0;
  }
  cuda::CUdeviceptr h = alloc.allocate(static_cast<size_t>(B * H) * 4), y = alloc.allocate(static_cast<size_t>(B * D) * 4);
  auto ptr = [](const Tensor& t) { return static_cast<const float*>(t.buffer().storage->data()); };
  const float one = 1, zero = 0;
  // Row-major C = A B is column-major C^T = B^T A^T.
  double blas = time_ms(3, [&] {
    sgemm(handle, 0, 0, (int)H, (int)B, (int)D, &one, ptr(W1), (int)H, ptr(X), (int)D, &zero, reinterpret_cast<float*>(h), (int)H);
    sgemm(handle, 0, 0, (int)D, (int)B, (int)H, &one, ptr(W2), (int)D, reinterpret_cast<const float*>(h), (int)H, &zero,
          reinterpret_cast<float*>(y), (int)D);
  });
  std::printf("gpu-bench: MLP forward, the two GEMMs in cuBLAS alone: %.2f ms (tessel %.1fx)\n", blas, mlp / blas);
  alloc.deallocate(h);
  alloc.deallocate(y);
  return 0;
}
