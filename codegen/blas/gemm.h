// Matrix products on the host, shared by the ref interpreter and the compiled
// CPU backend so both compute the same numbers: OpenBLAS for products big
// enough to pay for it, an exact loop (wide accumulator) for small ones and
// for integer types. A product can be computed a band of rows at a time, which
// is how the CPU backend runs a fused epilogue on each band while it is still
// in cache.
//
//   auto a = gemm::operand(A_shape, A_view), b = gemm::operand(B_shape, B_view);
//   if (!a) a = gemm::Operand{dense_copy_of_A, false, K};
//   gemm::rows(DType::f32, *a, *b, C, M, N, K, 0, M);   // C = A @ B, dense [M, N]
#pragma once

#include <cstdint>
#include <optional>

#include "codegen/ir.h"

namespace tessel::gemm {

/// One matrix operand as BLAS wants it: row-major with a leading dimension,
/// transposed when its columns are the contiguous axis.
struct Operand {
  ir::BufferView v;
  bool trans = false;
  int64_t ld = 0;
};

/// The BLAS form of the last two dims of a view, or nullopt when neither axis
/// is contiguous (the caller makes a dense copy: {copy, false, cols}).
std::optional<Operand> operand(const Shape& s, const ir::BufferView& v);

/// Whether OpenBLAS computes an [M,K]x[K,N] product of this dtype (else the
/// exact loop). Only tiny products (under 16^3 multiply-adds) stay in the loop,
/// where a BLAS call costs more than the arithmetic. OpenBLAS itself runs
/// products up to 64^3 on the calling thread alone (its SMP threshold), so
/// these never wake its workers, whose spinning once made a test full of 3x4
/// products 50x slower on a busy two-core machine. A one-row product against
/// a weight matrix (batch-1 inference, [1,784]x[784,256]) takes 18 us in BLAS
/// against 110 us in the loop.
bool uses_blas(DType t, int64_t M, int64_t N, int64_t K);

/// Rows [r0, r1) of C = A @ B for one matrix: A and B point at element (0,0)
/// of that matrix of a and b; C is dense row-major [M, N]. The choice between
/// BLAS and the loop is made on the whole product (M, N, K), so a product
/// computed in bands equals the one computed at once.
void rows(DType t, const Operand& a, const Operand& b, const void* A, const void* B, void* C, int64_t M, int64_t N,
          int64_t K, int64_t r0, int64_t r1);

}  // namespace tessel::gemm
