// Scheduling: cut the IR DAG below some roots into steps that each produce
// one materialized node -- fused kernels (elementwise chains; reductions with
// their elementwise producers as prologue; row programs: reductions over one
// row domain with their elementwise readers, softmax-style), views, matmuls, and nodes the
// compiled backends leave to the ref interpreter. Every cut has a reason
// (printed under TESSEL_TRACE=jit).
//
// The lowering of a realization is this linear list of passes, each dumpable
// under TESSEL_DUMP=dir:
//   topo -> schedule -> lower_to_kernel_ir -> emit (llvm / cuda) -> launch
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "codegen/ir.h"

namespace tessel::sched {

/// The named passes of the lowering, in order.
inline constexpr const char* kPasses[] = {"topo", "schedule", "lower_to_kernel_ir", "emit_llvm", "launch"};

enum class StepKind : uint8_t {
  Kernel,    // fused elementwise kernel
  Reduce,    // reduction kernel with a fused elementwise prologue
  View,      // movement over a materialized value: no work, a strided view
  MatMul,    // BLAS (with an elementwise epilogue when `epilogue` is set)
  Conv,      // a convolution node: the backend's engine (oneDNN on the CPU), else the ref loops
  Attention, // an Attention or AttentionGrad node: the backend's fused attention, else the ref loops
  RowProgram,  // reductions over one row domain (`stages`) and `node`, which reads them: one kernel
  Fallback,  // the ref interpreter evaluates this node
};
std::string_view step_name(StepKind k);
/// The step that computes a contraction node (MatMul, Conv, Attention).
StepKind contraction_step(ir::Op op);

struct Step {
  StepKind kind;
  ir::Node* node;
  std::string reason;  // why this node is materialized
  // MatMul only: an elementwise node of the matmul's 2-D shape whose fused
  // kernel reads the product element for element. It runs on each band of
  // rows right after BLAS writes it; the step materializes both nodes.
  ir::Node* epilogue = nullptr;
  // RowProgram only: keepdim reductions over the input shape and axes of
  // `node`'s row domain, in dependency order, each read only through
  // broadcasts by later stages and `node`. `stored[i]`: stage i has readers
  // after the kernel (a root, or kept for backward), so it gets a buffer.
  std::vector<ir::Node*> stages;
  std::vector<bool> stored;
};

/// False when TESSEL_FUSION=off: every computed node becomes its own kernel
/// (for experiments that measure what fusion buys).
bool fusion_enabled_by_env();

struct Options {
  int max_inputs = 16;          // distinct buffers one kernel may read
  bool keep_grad_values = false; // values a later backward reads are materialized (autodiff::values_read)
  bool fuse = fusion_enabled_by_env();  // false: one kernel per computed node
  bool matmul_epilogues = true;  // elementwise consumers of a matmul run on its bands of rows
  bool row_programs = true;      // reductions over one row domain share a kernel with their readers
  int max_ops = 256;             // nodes one fused kernel may compute (bounds compile time)
};

struct Schedule {
  std::vector<ir::Node*> order;  // the topo pass
  std::vector<Step> steps;       // producers before consumers
  std::unordered_map<ir::Node*, std::string> materialized;  // node -> reason
  int kernels() const;           // Kernel + Reduce + RowProgram steps + matmul epilogues
  int matmuls() const;           // MatMul steps
  int convs() const;             // Conv steps
  int attentions() const;        // Attention steps
  std::string to_string() const;
};

/// Whether a kernel can compute this elementwise node (op x dtype).
bool kernel_supports(const ir::Node& n);
/// Whether a reduction kernel can compute this reduction.
bool reduce_supports(const ir::Node& n);

Schedule schedule(const std::vector<ir::NodePtr>& roots, const Options& opts = {});

}  // namespace tessel::sched
