#include "codegen/cpu/banding.h"

#include <unistd.h>

#include <algorithm>
#include <cstddef>

#include "codegen/blas/gemm.h"
#include "codegen/cpu/launch.h"
#include "runtime/errors.h"
#include "runtime/thread_pool.h"

namespace tessel::cpujit {

using ir::BufferView;

namespace {
// Bands of a matmul with an epilogue hold about half of L2 of product: BLAS
// writes a band, the epilogue reads it back while it is still in L2. Bands
// are not smaller than that: each BLAS call packs B again (measured: 256 KiB
// bands made a [1024,784]x[784,256] product + epilogue 10% slower than one
// sgemm and a separate loop; half of a 2 MiB L2 matches it).
int64_t epilogue_band_bytes() {
  static const int64_t bytes = [] {
    long l2 = ::sysconf(_SC_LEVEL2_CACHE_SIZE);
    return l2 > 0 ? std::max<int64_t>(l2 / 2, 256 * 1024) : int64_t{1} << 20;
  }();
  return bytes;
}
}  // namespace

void matmul_with_epilogue(const ir::Node& mm, const std::vector<BufferView>& args, const BufferView& out,
                          const lower::Lowered& epi, KernelFn* fn) {
  const Shape& sa = mm.args[0]->shape;
  const int64_t M = sa.dims[0], K = sa.dims[1], N = mm.shape.dims[1];
  auto operand = [&](size_t i) {
    auto op = gemm::operand(mm.args[i]->shape, args[i]);
    TESSEL_ASSERT("run_schedule", op.has_value());  // epilogue operands come in BLAS form
    return *op;
  };
  gemm::Operand a = operand(0), b = operand(1);
  const int64_t es = static_cast<int64_t>(dtype_size(mm.dtype));
  auto at = [&](const BufferView& v) { return static_cast<std::byte*>(v.storage->data()) + v.offset * es; };
  BufPtrs bufs(epi.buffers.size());
  for (size_t i = 0; i < epi.buffers.size(); ++i) bufs.ptrs[i] = epi.buffers[i].storage->data();
  banded_matmul_epilogue(mm.dtype, a, b, at(a.v), at(b.v), at(out), M, N, K, fn, bufs.ptrs, epi.args.data());
}

void banded_matmul_epilogue(DType t, const gemm::Operand& a, const gemm::Operand& b, const void* A, const void* B,
                            void* C, int64_t M, int64_t N, int64_t K, KernelFn* fn, void** bufs, const int64_t* args) {
  const int64_t es = static_cast<int64_t>(dtype_size(t));
  int64_t band = M;
  if (gemm::uses_blas(t, M, N, K)) band = std::max<int64_t>(8, epilogue_band_bytes() / std::max<int64_t>(N * es, 1));
  // Bands are independent (disjoint rows of the product and of the
  // epilogue's output): the pool runs them, each band's product and
  // epilogue on one thread. One band (small products) runs inline.
  const int64_t bands = (M + band - 1) / band;
  parallel_for(bands, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t i = b0; i < b1; ++i) {
      int64_t r0 = i * band, r1 = std::min(M, r0 + band);
      gemm::rows(t, a, b, A, B, C, M, N, K, r0, r1);
      if (r1 > r0) fn(bufs, args, r0, r1);
    }
  });
}

}  // namespace tessel::cpujit
