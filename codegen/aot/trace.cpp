#include "codegen/aot/trace.h"

#include <fmt/format.h>

#include <unordered_map>

#include "codegen/lower.h"
#include "codegen/schedule.h"
#include "runtime/errors.h"

namespace tessel::aot {

namespace {

using ir::BufferView;
using ir::Node;

BufferView alloc_dense(DType dt, const Shape& s) {
  BufferView v;
  v.storage = Storage::allocate(static_cast<size_t>(std::max<int64_t>(s.numel(), 1)) * dtype_size(dt));
  v.strides = contiguous_strides(s);
  return v;
}

}  // namespace

// Mirrors CpuBackend::realize (codegen/cpu/cpu_backend.cpp) step for step, with
// "launch" replaced by "record".
void TraceBackend::realize(const std::vector<ir::NodePtr>& roots, bool keep_grad_values) {
  ++realizations_;
  auto record = [&](lower::Lowered& l, std::string_view role, const Node* n) {
    lower::coalesce(l);
    std::string text = l.kernel.text();
    auto [it, fresh] = index_.emplace(text, kernels_.size());
    if (fresh) {
      TracedKernel k;
      k.kernel = l.kernel;
      k.text = std::move(text);
      k.role = std::string(role);
      k.node = n ? std::string(ir::op_name(n->op)) : "copy";
      k.example_args = l.args;
      k.example_rows = l.rows;
      kernels_.push_back(std::move(k));
    }
    ++kernels_[it->second].launches;
  };
  lower::DenseCopy copy = [&](DType t, const Shape& s, const BufferView& in) {
    BufferView out = alloc_dense(t, s);
    lower::Lowered l = lower::lower_copy(t, s, in, out);
    record(l, "copy", nullptr);
    return out;
  };

  sched::Schedule S = sched::schedule(roots, {16, keep_grad_values});
  std::unordered_map<Node*, BufferView> values;
  lower::ValueOf value_of = [&](Node* n) -> std::optional<BufferView> {
    if (n->realized()) return *n->buffer;
    if (auto it = values.find(n); it != values.end()) return it->second;
    return std::nullopt;
  };
  for (const sched::Step& step : S.steps) {
    Node* n = step.node;
    switch (step.kind) {
      case sched::StepKind::View: {
        auto v = value_of(n->args[0].get());
        if (!v) throw InternalError("aot trace: view of a value not materialized");
        values[n] = lower::movement_view(*n, *v, copy);
        break;
      }
      case sched::StepKind::Kernel:
      case sched::StepKind::Reduce: {
        BufferView out = alloc_dense(n->dtype, n->shape);
        lower::Lowered l = lower::lower_to_kernel_ir(*n, value_of, copy, out);
        record(l, step.kind == sched::StepKind::Reduce ? "reduce" : "elementwise", n);
        values[n] = std::move(out);
        break;
      }
      case sched::StepKind::MatMul:
        ++matmuls_;
        values[n] = alloc_dense(n->dtype, n->shape);
        break;
      case sched::StepKind::Fallback:
        ++fallbacks_;
        values[n] = alloc_dense(n->dtype, n->shape);
        break;
    }
  }
  if (keep_grad_values)
    for (Node* n : S.order)
      if (!n->realized() && n->requires_grad && n->op != ir::Op::Constant &&
          ir::op_category(n->op) != ir::Category::Movement)
        if (auto it = values.find(n); it != values.end()) n->buffer = it->second;
  for (auto& r : roots) {
    if (r->realized()) continue;
    BufferView v = values.at(r.get());
    bool aliased = false;
    for (size_t d = 0; d < v.strides.size(); ++d) aliased = aliased || (v.strides[d] == 0 && r->shape.dims[d] > 1);
    if (aliased) v = copy(r->dtype, r->shape, v);
    r->buffer = std::move(v);
  }
}

}  // namespace tessel::aot
