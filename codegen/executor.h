// The step loop every compiled backend shares: walk a schedule's steps, give
// each materialized node a value (views, fused kernels, matmuls -- with their
// fused epilogue --, ref fallbacks), then hand the roots their buffers. What
// "allocate", "launch" and "matmul" mean is the backend's: the CPU runs
// LLVM-compiled kernels, the CUDA backend launches on a device, the AOT trace
// only records. Because lowering happens here, all of them see the same
// kernels (same texts, same launch arguments).
//
//   class Recorder : public exec::StepExecutor { ... };
//   Recorder r;
//   exec::run_schedule(r, roots, sched::schedule(roots), /*keep_grad_values=*/false);
#pragma once

#include <vector>

#include "codegen/ir.h"
#include "codegen/lower.h"
#include "codegen/schedule.h"

namespace tessel::exec {

/// What the launch of a lowered kernel is for (stats, traces, manifests).
enum class Role : uint8_t { elementwise, reduce, copy, epilogue, row };
std::string_view role_name(Role r);

/// Where the steps of a realization run.
class StepExecutor {
 public:
  virtual ~StepExecutor() = default;
  /// Dense memory for a value of this dtype and shape.
  virtual ir::BufferView alloc(DType t, const Shape& s) = 0;
  /// Runs one lowered kernel over all its rows. `node` is the node it
  /// materializes (null for copies).
  virtual void launch(const lower::Lowered& l, Role role, const ir::Node* node) = 0;
  /// launch(), or false having run nothing when the kernel is not compiled
  /// yet (its compile goes on elsewhere): run_schedule then computes the
  /// value with the ref interpreter, so an executor that returns false keeps
  /// its values in host memory. The default launches.
  virtual bool try_launch(const lower::Lowered& l, Role role, const ir::Node* node) {
    launch(l, role, node);
    return true;
  }
  /// Computes `n` from its arguments' values where no kernel does (fallbacks;
  /// matmuls unless matmul() says otherwise).
  virtual ir::BufferView host_eval(const ir::Node& n, const std::vector<ir::BufferView>& args) = 0;
  /// A matmul's value.
  virtual ir::BufferView matmul(const ir::Node& n, const std::vector<ir::BufferView>& args) { return host_eval(n, args); }
  /// A convolution node's value (Conv, ConvGradInput, ConvGradWeight); the
  /// default is the ref loops.
  virtual ir::BufferView conv(const ir::Node& n, const std::vector<ir::BufferView>& args) { return host_eval(n, args); }
  /// An Attention or AttentionGrad node's value (codegen/attention_geometry.h);
  /// the default is the ref loops.
  virtual ir::BufferView attention(const ir::Node& n, const std::vector<ir::BufferView>& args) {
    return host_eval(n, args);
  }
  /// A 2-D matmul written into `out` (dense [M, N]) and its elementwise
  /// epilogue `epi`, which reads `out` and whose rows are the matmul's rows.
  /// Both operands are in BLAS form (gemm::operand accepts them).
  /// The default computes the whole product, copies it into `out` and
  /// launches the epilogue; the CPU backend interleaves the two per band of rows.
  virtual void matmul_epilogue(const ir::Node& mm, const std::vector<ir::BufferView>& args, const ir::BufferView& out,
                               const lower::Lowered& epi, const ir::Node& epi_node);
  /// matmul_epilogue(), or false having run nothing when the epilogue's
  /// kernel is not compiled yet (as try_launch): run_schedule then takes the
  /// product from matmul() and the epilogue from the ref interpreter.
  virtual bool try_matmul_epilogue(const ir::Node& mm, const std::vector<ir::BufferView>& args,
                                   const ir::BufferView& out, const lower::Lowered& epi, const ir::Node& epi_node) {
    matmul_epilogue(mm, args, out, epi, epi_node);
    return true;
  }
  /// Whether an epilogue may write its result over the product it reads (same
  /// dtype and shape, product read by nothing else): the epilogue's load of the
  /// product and its store then share memory, which the backend's kernel must
  /// allow (the CPU emits a variant for it). Saves a buffer the size of the product.
  virtual bool epilogue_over_product() const { return false; }
  /// Whether an elementwise kernel may write its result over memory it reads
  /// at the element it writes (an in-place update written straight into its
  /// tensor, run_schedule's `into`); the launch names that param (the CPU
  /// emits a variant for it).
  virtual bool kernel_over_input() const { return false; }
  /// A movement step produced a view (no work).
  virtual void on_view() {}
};

/// Runs the steps of `S` (the schedule of `roots`) on `ex`; sets every root's
/// buffer (and, with keep_grad_values, those of the nodes backward reads).
/// `into`, when given, holds per root the memory its value is headed for (an
/// in-place write; empty storage: none): a root computed by an elementwise
/// kernel is written there directly when the executor allows it, the memory
/// is dense and no later step reads what it overwrites; its buffer is then
/// that memory. Any other root gets memory of its own, for the caller to copy.
void run_schedule(StepExecutor& ex, const std::vector<ir::NodePtr>& roots, const sched::Schedule& S,
                  bool keep_grad_values, const std::vector<ir::BufferView>* into = nullptr);

/// A dense copy of a strided view, by a copy kernel launched on `ex`.
ir::BufferView dense_copy(StepExecutor& ex, DType t, const Shape& s, const ir::BufferView& in);

}  // namespace tessel::exec
