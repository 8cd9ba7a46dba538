// A matmul with a fused elementwise epilogue runs in bands of rows: BLAS
// writes a band of the product, the epilogue reads it back while it is still
// in L2. Bands are independent, so the thread pool runs them.
#pragma once

#include <vector>

#include "codegen/blas/gemm.h"
#include "codegen/cpu/llvm_emitter.h"
#include "codegen/ir.h"
#include "codegen/lower.h"

namespace tessel::cpujit {

/// The product `mm` of `args` (in BLAS form) written into `out`, band by
/// band, each band followed by the epilogue `fn` (lowered as `epi`) over the
/// same rows.
void matmul_with_epilogue(const ir::Node& mm, const std::vector<ir::BufferView>& args, const ir::BufferView& out,
                          const lower::Lowered& epi, KernelFn* fn);

/// The same over raw memory (a plan's replay): C = A @ B, dense [M, N], with
/// A and B at element (0, 0) of operands `a` and `b`, then `fn` over each
/// band with buffers `bufs` and launch arguments `args`.
void banded_matmul_epilogue(DType t, const gemm::Operand& a, const gemm::Operand& b, const void* A, const void* B,
                            void* C, int64_t M, int64_t N, int64_t K, KernelFn* fn, void** bufs, const int64_t* args);

}  // namespace tessel::cpujit
