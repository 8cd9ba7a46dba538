#include "codegen/executor.h"

#include <fmt/format.h>

#include <unordered_map>
#include <unordered_set>

#include "codegen/backend.h"
#include "codegen/blas/gemm.h"
#include "codegen/ir_verifier.h"
#include "codegen/kernel_ir_verifier.h"
#include "codegen/movement.h"
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
  // Its kernel still compiling: the same bytes, copied on the host.
  if (!ex.try_launch(l, Role::copy, nullptr)) ref_backend().copy_into(out, in, t, s);
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

namespace {

// Whether a step after `from` reads memory of `storage` through a realized
// leaf of its kernel (the nodes it fuses stop at materialized ones).
bool read_after(const sched::Schedule& S, size_t from, const Storage* storage) {
  std::unordered_set<const Node*> materialized;
  for (const sched::Step& st : S.steps) {
    materialized.insert(st.node);
    for (const Node* g : st.stages) materialized.insert(g);
    if (st.epilogue) materialized.insert(st.epilogue);
  }
  for (size_t s = from + 1; s < S.steps.size(); ++s) {
    const sched::Step& st = S.steps[s];
    std::vector<const Node*> stack{st.node};
    if (st.epilogue) stack.push_back(st.epilogue);
    std::unordered_set<const Node*> seen;
    while (!stack.empty()) {
      const Node* n = stack.back();
      stack.pop_back();
      if (!seen.insert(n).second) continue;
      for (const auto& a : n->args) {
        if (a->realized()) {
          if (a->buffer->storage.get() == storage) return true;
        } else if (!materialized.count(a.get()) || a.get() == st.node) {
          stack.push_back(a.get());
        }
      }
    }
  }
  return false;
}

// The memory root `n` is headed for, if its kernel may write it there.
const BufferView* target_of(const Node* n, const std::vector<ir::NodePtr>& roots, const std::vector<BufferView>* into) {
  if (!into) return nullptr;
  for (size_t i = 0; i < roots.size(); ++i)
    if (roots[i].get() == n && (*into)[i].storage && ir::is_contiguous(n->shape, (*into)[i].strides)) return &(*into)[i];
  return nullptr;
}

// A copy of the nodes a step's kernel fuses below `root`, down to the values
// that exist (earlier steps, realized leaves), which become leaves: what the
// kernel computes, for the ref interpreter. Iterative: fused chains can be long.
ir::NodePtr clone_fused(Node* root, const lower::ValueOf& value_of, std::unordered_map<const Node*, ir::NodePtr>& clones) {
  std::vector<std::pair<Node*, size_t>> stack{{root, 0}};
  while (!stack.empty()) {
    auto [m, i] = stack.back();
    if (clones.count(m)) {
      stack.pop_back();
      continue;
    }
    if (i == 0)
      if (std::optional<BufferView> v = value_of(m)) {
        auto leaf = std::make_shared<Node>();
        leaf->op = ir::Op::Input;
        leaf->dtype = m->dtype;
        leaf->shape = m->shape;
        leaf->buffer = std::move(*v);
        clones.emplace(m, std::move(leaf));
        stack.pop_back();
        continue;
      }
    if (i < m->args.size()) {
      ++stack.back().second;
      stack.push_back({m->args[i].get(), 0});
      continue;
    }
    auto c = std::make_shared<Node>(*m);
    c->buffer.reset();
    c->requires_grad = false;
    c->owner.reset();
    c->owner_hold.reset();
    for (size_t a = 0; a < m->args.size(); ++a) c->args[a] = clones.at(m->args[a].get());
    clones.emplace(m, std::move(c));
    stack.pop_back();
  }
  return clones.at(root);
}

// The values of `targets` (a step's node, and the stages of a row program
// that it stores) by the ref interpreter, for a step whose kernel is not
// compiled yet. Its results equal the compiled kernel's bit for bit.
std::vector<BufferView> ref_values(const std::vector<Node*>& targets, const lower::ValueOf& value_of) {
  std::unordered_map<const Node*, ir::NodePtr> clones;
  std::vector<ir::NodePtr> roots;
  roots.reserve(targets.size());
  for (Node* t : targets) roots.push_back(clone_fused(t, value_of, clones));
  ref_backend().realize(roots, false);
  std::vector<BufferView> out;
  out.reserve(roots.size());
  for (const ir::NodePtr& r : roots) out.push_back(*r->buffer);
  return out;
}

}  // namespace

void run_schedule(StepExecutor& ex, const std::vector<ir::NodePtr>& roots, const sched::Schedule& S,
                  bool keep_grad_values, const std::vector<BufferView>* into) {
  TESSEL_ASSERT("run_schedule", !into || into->size() == roots.size());
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
  for (size_t si = 0; si < S.steps.size(); ++si) {
    const sched::Step& step = S.steps[si];
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
        lower::Lowered l;
        bool placed = false;
        if (const BufferView* t = step.kind == sched::StepKind::Kernel && ex.kernel_over_input()
                                      ? target_of(n, roots, into)
                                      : nullptr) {
          // Written into its destination when every read of that memory is
          // at the element written and nothing after this step reads it.
          l = lower::lower_to_kernel_ir(*n, value_of, copy, *t);
          placed = true;
          for (size_t p = 1; p < l.buffers.size() && placed; ++p)
            placed = l.buffers[p].storage != t->storage || lower::reads_in_store_layout(l, p);
          placed = placed && !read_after(S, si, t->storage.get());
        }
        if (!placed) l = lower::lower_to_kernel_ir(*n, value_of, copy, ex.alloc(n->dtype, n->shape));
        const BufferView out = l.buffers[0];
        kir::check_lowering(l);
        lower::coalesce(l);
        if (ex.try_launch(l, step.kind == sched::StepKind::Reduce ? Role::reduce : Role::elementwise, n))
          values[n] = std::move(out);
        else
          values[n] = ref_values({n}, value_of)[0];  // in memory of its own, for a root: the caller copies it
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
        if (!ex.try_launch(l, Role::row, n)) {
          std::vector<Node*> targets{n};
          for (size_t i = 0; i < step.stages.size(); ++i)
            if (step.stored[i]) targets.push_back(step.stages[i]);
          std::vector<BufferView> v = ref_values(targets, value_of);
          for (size_t i = 0, j = 1; i < step.stages.size(); ++i)
            if (step.stored[i]) stage_out[i] = v[j++];
          out = v[0];
        }
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
        if (!ex.try_matmul_epilogue(*n, args, mm, l, *e)) {
          values[n] = ex.matmul(*n, args);
          values[e] = ref_values({e}, value_of)[0];
          break;
        }
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
