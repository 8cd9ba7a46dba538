// Tracing kernels without running them: a Backend that schedules and lowers
// every realization exactly as the compiled CPU backend does (same passes,
// same coalescing, so the same kernel texts) but launches nothing and compiles
// nothing. Values it produces are allocated, never computed: a traced program
// must not branch on them.
//
//   aot::TraceBackend tb;
//   { BackendOverride o(tb); Tensor y = relu(x % w + b); y.eval(); }
//   for (const aot::TracedKernel& k : tb.kernels()) fmt::print("{}\n", k.text);
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "codegen/backend.h"
#include "codegen/kernel_ir.h"

namespace tessel::aot {

struct TracedKernel {
  kir::Kernel kernel;
  std::string text;                 // kernel.text(): the key the backends look up
  std::string role;                 // "elementwise", "reduce", "copy" or "epilogue" (of a matmul)
  std::string node;                 // op of the node it materializes ("Relu", ...)
  std::vector<int64_t> example_args;  // launch arguments of the first traced launch
  int64_t example_rows = 0;
  std::uint64_t launches = 0;       // how often the trace launched it
};

class TraceBackend final : public Backend {
 public:
  std::string_view name() const override { return "aot-trace"; }
  void realize(const std::vector<ir::NodePtr>& roots, bool keep_grad_values) override;
  /// Writes nothing. An in-place write on real memory while tracing (batch
  /// norm's running statistics and batch count in train mode, any buffer a
  /// traced step updates) would copy values that were never computed into the
  /// model; the kernel computing the new value is recorded all the same.
  void copy_into(const ir::BufferView& dst, const ir::BufferView& src, DType t, const Shape& s) override;
  bool computes_values() const override { return false; }

  /// Distinct kernels in order of first launch.
  const std::vector<TracedKernel>& kernels() const { return kernels_; }
  int realizations() const { return realizations_; }
  int matmuls() const { return matmuls_; }
  int fallbacks() const { return fallbacks_; }

 private:
  class Recorder;
  std::vector<TracedKernel> kernels_;
  std::map<std::string, size_t> index_;  // text -> position in kernels_
  int realizations_ = 0, matmuls_ = 0, fallbacks_ = 0;
};

}  // namespace tessel::aot
