#include "codegen/blas/gemm.h"

#include <cblas.h>

#include <algorithm>
#include <type_traits>

#include <fmt/format.h>

#include "runtime/errors.h"

namespace tessel::gemm {

std::optional<Operand> operand(const Shape& s, const ir::BufferView& v) {
  size_t r = s.dims.size();
  int64_t rows = s.dims[r - 2], cols = s.dims[r - 1];
  int64_t sr = v.strides[r - 2], sc = v.strides[r - 1];
  // No elements: nothing is read, any layout will do (a [3, 0] tensor has row stride 0).
  if (rows == 0 || cols == 0) return Operand{v, false, std::max<int64_t>(cols, 1)};
  if ((sc == 1 || cols == 1) && sr >= std::max<int64_t>(cols, 1)) return Operand{v, false, std::max<int64_t>(sr, 1)};
  if ((sr == 1 || rows == 1) && sc >= std::max<int64_t>(rows, 1)) return Operand{v, true, std::max<int64_t>(sc, 1)};
  return std::nullopt;
}

bool uses_blas(DType t, int64_t M, int64_t N, int64_t K) {
  constexpr int64_t kBlasMinWork = 16 * 16 * 16;
  return (t == DType::f32 || t == DType::f64) && K > 0 && M * N * K >= kBlasMinWork;
}

namespace {

template <class T, class Acc>
void loop(const Operand& a, const Operand& b, const T* A, const T* B, T* C, int64_t N, int64_t K, int64_t r0, int64_t r1) {
  for (int64_t i = r0; i < r1; ++i)
    for (int64_t j = 0; j < N; ++j) {
      Acc acc = 0;
      for (int64_t p = 0; p < K; ++p) {
        T x = a.trans ? A[p * a.ld + i] : A[i * a.ld + p];
        T y = b.trans ? B[j * b.ld + p] : B[p * b.ld + j];
        acc += static_cast<Acc>(x) * static_cast<Acc>(y);
      }
      C[i * N + j] = static_cast<T>(acc);
    }
}

template <class T>
void typed(const Operand& a, const Operand& b, const T* A, const T* B, T* C, int64_t M, int64_t N, int64_t K,
           int64_t r0, int64_t r1) {
  if (r1 <= r0 || N == 0) return;
  if (K == 0) {
    std::fill(C + r0 * N, C + r1 * N, T(0));
    return;
  }
  if constexpr (std::is_floating_point_v<T>) {
    if (uses_blas(std::is_same_v<T, float> ? DType::f32 : DType::f64, M, N, K)) {
      auto ta = a.trans ? CblasTrans : CblasNoTrans, tb = b.trans ? CblasTrans : CblasNoTrans;
      const T* Ar = a.trans ? A + r0 : A + r0 * a.ld;  // row r0 of op(A)
      int m = static_cast<int>(r1 - r0), n = static_cast<int>(N), k = static_cast<int>(K);
      int lda = static_cast<int>(a.ld), ldb = static_cast<int>(b.ld);
      if constexpr (std::is_same_v<T, float>)
        cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, 1.0f, Ar, lda, B, ldb, 0.0f, C + r0 * N, n);
      else
        cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, 1.0, Ar, lda, B, ldb, 0.0, C + r0 * N, n);
      return;
    }
    loop<T, double>(a, b, A, B, C, N, K, r0, r1);
  } else {
    loop<T, int64_t>(a, b, A, B, C, N, K, r0, r1);
  }
}

}  // namespace

void rows(DType t, const Operand& a, const Operand& b, const void* A, const void* B, void* C, int64_t M, int64_t N,
          int64_t K, int64_t r0, int64_t r1) {
  switch (t) {
    case DType::f32:
      return typed(a, b, static_cast<const float*>(A), static_cast<const float*>(B), static_cast<float*>(C), M, N, K, r0, r1);
    case DType::f64:
      return typed(a, b, static_cast<const double*>(A), static_cast<const double*>(B), static_cast<double*>(C), M, N, K, r0, r1);
    case DType::i64:
      return typed(a, b, static_cast<const int64_t*>(A), static_cast<const int64_t*>(B), static_cast<int64_t*>(C), M, N, K, r0, r1);
    case DType::i32:
      return typed(a, b, static_cast<const int32_t*>(A), static_cast<const int32_t*>(B), static_cast<int32_t*>(C), M, N, K, r0, r1);
    case DType::b8:
      return typed(a, b, static_cast<const bool*>(A), static_cast<const bool*>(B), static_cast<bool*>(C), M, N, K, r0, r1);
    default: break;
  }
  throw DTypeError(fmt::format("matmul: dtype {} is not supported (use f32, f64, i64, i32 or bool)", dtype_name(t)));
}

}  // namespace tessel::gemm
