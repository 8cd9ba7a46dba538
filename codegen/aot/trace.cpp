#include "codegen/aot/trace.h"

#include <fmt/format.h>

#include <unordered_map>

#include "codegen/executor.h"
#include "codegen/lower.h"
#include "codegen/schedule.h"
#include "runtime/errors.h"

namespace tessel::aot {

using ir::BufferView;
using ir::Node;

// The compiled backends' step loop (codegen/executor.h) with "launch"
// replaced by "record": the same schedule, lowering and coalescing, so the
// same kernel texts.
class TraceBackend::Recorder final : public exec::StepExecutor {
 public:
  explicit Recorder(TraceBackend& tb) : tb_(tb) {}
  BufferView alloc(DType t, const Shape& s) override { return host_dense(t, s); }
  void launch(const lower::Lowered& l, exec::Role role, const Node* n) override {
    std::string text = l.kernel.text();
    auto [it, fresh] = tb_.index_.emplace(text, tb_.kernels_.size());
    if (fresh) {
      TracedKernel k;
      k.kernel = l.kernel;
      k.text = std::move(text);
      k.role = std::string(exec::role_name(role));
      k.node = n ? std::string(ir::op_name(n->op)) : "copy";
      k.example_args = l.args;
      k.example_rows = l.rows;
      tb_.kernels_.push_back(std::move(k));
    }
    ++tb_.kernels_[it->second].launches;
  }
  BufferView host_eval(const Node& n, const std::vector<BufferView>&) override {
    ++tb_.fallbacks_;
    return host_dense(n.dtype, n.shape);
  }
  BufferView matmul(const Node& n, const std::vector<BufferView>&) override {
    ++tb_.matmuls_;
    return host_dense(n.dtype, n.shape);
  }
  void matmul_epilogue(const Node&, const std::vector<BufferView>&, const BufferView&, const lower::Lowered& epi,
                       const Node& e) override {
    ++tb_.matmuls_;
    launch(epi, exec::Role::epilogue, &e);
  }

 private:
  TraceBackend& tb_;
};

void TraceBackend::realize(const std::vector<ir::NodePtr>& roots, bool keep_grad_values) {
  ++realizations_;
  Recorder rec(*this);
  exec::run_schedule(rec, roots, sched::schedule(roots, {16, keep_grad_values}), keep_grad_values);
}

void TraceBackend::copy_into(const ir::BufferView&, const ir::BufferView&, DType, const Shape&) {}

}  // namespace tessel::aot
