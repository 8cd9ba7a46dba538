// A matmul with a fused elementwise epilogue runs in bands of rows: BLAS
// writes a band of the product, the epilogue reads it back while it is still
// in L2. Bands are independent, so the thread pool runs them.
#pragma once

#include <vector>

#include "codegen/cpu/llvm_emitter.h"
#include "codegen/ir.h"
#include "codegen/lower.h"

namespace tessel::cpujit {

/// The product `mm` of `args` (in BLAS form) written into `out`, band by
/// band, each band followed by the epilogue `fn` (lowered as `epi`) over the
/// same rows.
void matmul_with_epilogue(const ir::Node& mm, const std::vector<ir::BufferView>& args, const ir::BufferView& out,
                          const lower::Lowered& epi, KernelFn* fn);

}  // namespace tessel::cpujit
