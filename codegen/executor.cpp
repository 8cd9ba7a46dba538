#include "codegen/executor.h"

#include <fmt/format.h>

#include <unordered_map>

#include "codegen/blas/gemm.h"
#include "codegen/ir_verifier.h"
#include "codegen/kernel_ir_verifier.h"
#include "codegen/verify_mode.h"
#include "runtime/errors.h"

namespace tessel::exec {

using ir::BufferView;
using ir::Node;

std::string_view role_name(Role r) {
  switch (r) {
    case Role::elementwise: return "elementwise";
    case Role::reduce: return "reduce";
    case Role::copy: return "copy";
    case Role::epilogue: return "epilogue";
    case Role::row: return "row";
  }
  return "?";
}

BufferView dense_copy(StepExecutor& ex, DType t, const Shape& s, const BufferView& in) {
  BufferView out = ex.alloc(t, s);
  lower::Lowered l = lower::lower_copy(t, s, in, out);
  kir::check_lowering(l);
  lower::coalesce(l);
  ex.launch(l, Role::copy, nullptr);
  return out;
}

void StepExecutor::matmul_epilogue(const Node& mm, const std::vector<BufferView>& args, const BufferView& out,
                                   const lower::Lowered& epi, const Node& epi_node) {
  BufferView v = matmul(mm, args);
  lower::Lowered copy = lower::lower_copy(mm.dtype, mm.shape, v, out);
  kir::check_lowering(copy);
  lower::coalesce(copy);
  launch(copy, Role::copy, nullptr);
  launch(epi, Role::epilogue, &epi_node);
}

void run_schedule(StepExecutor& ex, const std::vector<ir::NodePtr>& roots, const sched::Schedule& S,
                  bool keep_grad_values) {
  if (verify_enabled()) {
    ir::verify_ir(roots, sched::kPasses[0]);
    ir::verify_schedule(S, sched::kPasses[1]);
  }
  std::unordered_map<Node*, BufferView> values;
  lower::ValueOf value_of = [&](Node* n) -> std::optional<BufferView> {
    if (n->realized()) return *n->buffer;
    if (auto it = values.find(n); it != values.end()) return it->second;
    return std::nullopt;
  };
  lower::DenseCopy copy = [&](DType t, const Shape& s, const BufferView& in) { return dense_copy(ex, t, s, in); };
  auto arg_values = [&](Node* n) {
    std::vector<BufferView> a;
    a.reserve(n->args.size());
    for (auto& x : n->args) {
      auto v = value_of(x.get());
      TESSEL_ASSERT("schedule", v.has_value());  // every input of a step is an earlier step or realized
      a.push_back(*v);
    }
    return a;
  };
  for (const sched::Step& step : S.steps) {
    Node* n = step.node;
    switch (step.kind) {
      case sched::StepKind::View: {
        auto v = value_of(n->args[0].get());
        TESSEL_ASSERT("schedule", v.has_value());  // a view step's source is materialized
        values[n] = lower::movement_view(*n, *v, copy);
        ex.on_view();
        break;
      }
      case sched::StepKind::Kernel:
      case sched::StepKind::Reduce: {
        BufferView out = ex.alloc(n->dtype, n->shape);
        lower::Lowered l = lower::lower_to_kernel_ir(*n, value_of, copy, out);
        kir::check_lowering(l);
        lower::coalesce(l);
        ex.launch(l, step.kind == sched::StepKind::Reduce ? Role::reduce : Role::elementwise, n);
        values[n] = std::move(out);
        break;
      }
      case sched::StepKind::RowProgram: {
        // One kernel computes the stages and `n`; a stage gets memory only
        // when something reads it after the kernel.
        std::vector<BufferView> stage_out(step.stages.size());
        for (size_t i = 0; i < step.stages.size(); ++i)
          if (step.stored[i]) stage_out[i] = ex.alloc(step.stages[i]->dtype, step.stages[i]->shape);
        BufferView out = ex.alloc(n->dtype, n->shape);
        lower::Lowered l = lower::lower_row_program(*n, step.stages, stage_out, value_of, copy, out);
        kir::check_lowering(l);
        lower::coalesce(l);
        ex.launch(l, Role::row, n);
        for (size_t i = 0; i < step.stages.size(); ++i)
          if (step.stored[i]) values[step.stages[i]] = stage_out[i];
        values[n] = std::move(out);
        break;
      }
      case sched::StepKind::MatMul: {
        std::vector<BufferView> args = arg_values(n);
        if (!step.epilogue) {
          values[n] = ex.matmul(*n, args);
          break;
        }
        // Operands BLAS cannot read in place (neither axis contiguous) become
        // dense here, by a copy kernel every executor sees.
        for (size_t i = 0; i < 2; ++i)
          if (!gemm::operand(n->args[i]->shape, args[i])) args[i] = dense_copy(ex, n->dtype, n->args[i]->shape, args[i]);
        // The epilogue's rows are the matmul's rows: lowered without
        // coalescing, so a band of rows of one is a band of the other.
        Node* e = step.epilogue;
        BufferView mm = ex.alloc(n->dtype, n->shape);
        values[n] = mm;
        // The product's only reader is the epilogue, element for element (the
        // scheduler's rule); unless backward keeps it, the result can overwrite it.
        const bool over = ex.epilogue_over_product() && e->dtype == n->dtype && e->shape == n->shape &&
                          !(keep_grad_values && n->requires_grad);
        BufferView out = over ? mm : ex.alloc(e->dtype, e->shape);
        lower::Lowered l = lower::lower_to_kernel_ir(*e, value_of, copy, out);
        kir::check_lowering(l);
        TESSEL_ASSERT("lower_to_kernel_ir", l.rows == n->shape.dims[0]);  // epilogue rows = matmul rows
        ex.matmul_epilogue(*n, args, mm, l, *e);
        values[e] = std::move(out);
        break;
      }
      case sched::StepKind::Conv:
        values[n] = ex.conv(*n, arg_values(n));
        break;
      case sched::StepKind::Attention:
        values[n] = ex.attention(*n, arg_values(n));
        break;
      case sched::StepKind::Fallback:
        values[n] = ex.host_eval(*n, arg_values(n));
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
    // A root is a tensor users may write into: never hand out aliased (0-stride) memory.
    bool aliased = false;
    for (size_t d = 0; d < v.strides.size(); ++d) aliased = aliased || (v.strides[d] == 0 && r->shape.dims[d] > 1);
    if (aliased) v = dense_copy(ex, r->dtype, r->shape, v);
    r->buffer = std::move(v);
  }
}

}  // namespace tessel::exec
