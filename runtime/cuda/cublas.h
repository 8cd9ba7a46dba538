// cuBLASLt matrix products on a GPU, the library loaded at run time.
//
// libcublasLt is opened with dlopen on first use, like the driver: tessel
// builds without it and runs without it (where it is missing, asking whether
// it is there never throws and a product raises tessel::DeviceError saying
// what was tried). The library comes from, in order:
//   - $TESSEL_CUBLASLT, a path (or soname) -- and nothing else when it is set;
//   - libcublasLt.so.13, then libcublasLt.so.12, wherever the loader finds them;
//   - libcublasLt.so.13 in the lib folder of the CUDA toolkit tessel was built with.
// The handful of cuBLASLt types and enums used are declared in cublas.cpp, so
// no header users include needs the toolkit.
//
// Products are row-major (the usual trick: cuBLASLt, column-major, computes
// C^T = B^T A^T, which has C's memory), in f32 or f64 with an f32/f64
// accumulator (no TF32), with an optional fused epilogue -- a bias along the
// columns (one value per output feature, as a linear layer's), a ReLU, or both:
//
//   using namespace tessel::cuda;
//   // C[M,N] = relu(A[M,K] @ W[N,K]^T + b[N]) on `stream`, all dense on cuda:0
//   gemm(0, stream, DType::f32, M, N, K, {a, K}, {w, K, /*trans=*/true}, c, N,
//        GemmEpilogue::bias_relu, b);
//
// The workspace cuBLASLt asks for comes from the caching device allocator
// (stream-ordered, so reusing it on the same stream needs no synchronization).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/cuda/driver.h"
#include "runtime/dtype.h"

namespace tessel::cuda {

/// True when libcublasLt loaded and has every entry point tessel uses (never throws).
bool cublaslt_available() noexcept;
/// "" when available; else every library tried and why each failed, and how
/// to point tessel at one (TESSEL_CUBLASLT).
std::string cublaslt_unavailable_reason();
/// The library that loaded, as it was named to dlopen ("" when none did).
std::string cublaslt_library();
/// cublasLtGetVersion(): major * 10000 + minor * 100 + patch (130100 for
/// 13.1.0). DeviceError when the library cannot be loaded.
std::size_t cublaslt_version();

/// What the product does to its result before storing it.
enum class GemmEpilogue : uint8_t {
  none,
  bias,       // + bias[n] on every row
  relu,       // max(x, 0)
  bias_relu,  // max(x + bias[n], 0)
};
std::string_view gemm_epilogue_name(GemmEpilogue e);

/// A row-major operand in device memory: element (i, j) of the stored matrix
/// is at ptr[i * ld + j]; `trans` means the stored matrix is the operand's
/// transpose (a [K, M] matrix read as A[M, K]).
struct GemmOperand {
  CUdeviceptr ptr = 0;
  int64_t ld = 0;
  bool trans = false;
};

/// C[M, N] (row-major, leading dimension ldc) = epilogue(A[M, K] @ B[K, N])
/// on device `device`, queued on `stream` (nullptr: the legacy default
/// stream). `bias` holds N contiguous elements of dtype `t` for the bias
/// epilogues. Only f32 and f64 (DTypeError otherwise); dims and leading
/// dimensions are checked (ValueError; K must be at least 1, cuBLASLt has no
/// empty products). M or N of 0 does nothing. DeviceError when cuBLASLt is
/// unavailable or fails.
void gemm(int device, CUstream stream, DType t, int64_t M, int64_t N, int64_t K, const GemmOperand& a,
          const GemmOperand& b, CUdeviceptr c, int64_t ldc, GemmEpilogue epilogue = GemmEpilogue::none,
          CUdeviceptr bias = 0);

}  // namespace tessel::cuda
