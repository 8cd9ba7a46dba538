#include "codegen/cpu/plan_cache.h"

#include <algorithm>
#include <atomic>
#include <iterator>

#include "codegen/cpu/jit_stats.h"
#include "codegen/cpu/kernel_table.h"
#include "codegen/cpu/launch.h"
#include "runtime/storage.h"

namespace tessel::cpujit {

using ir::BufferView;
using ir::Node;
using ir::Op;

PlanCache& plan_cache() {
  static PlanCache* c = new PlanCache;  // never destroyed: threads may still replay at exit
  return *c;
}
void drop_plans(cpujit::Garbage& g) {
  PlanCache& C = plan_cache();
  std::lock_guard<std::mutex> l(C.mu);
  // Threads of the old generation may still be replaying one: freed with the code.
  g.push_back(std::make_shared<decltype(C.plans)>(std::move(C.plans)));
  C.plans.clear();
}

bool Walk::build(const std::vector<ir::NodePtr>& roots, bool keep_grad_values) {
  order.clear();
  stack.clear();
  key.clear();
  for (const auto& r : roots) {
    if (seen(r.get())) continue;
    stack.push_back({r.get(), 0});
    while (!stack.empty()) {
      auto& [n, next] = stack.back();
      if (!n->realized() && next < n->args.size()) {
        Node* a = n->args[next++].get();
        if (!seen(a)) stack.push_back({a, 0});
        continue;
      }
      if (order.size() == kMaxPlanNodes) return false;
      order.push_back(n);
      stack.pop_back();
    }
  }
  key.push_back(keep_grad_values);
  for (size_t i = 0; i < order.size(); ++i) {
    const Node& n = *order[i];
    bool realized = n.realized();
    key.push_back(static_cast<int64_t>(n.op) | static_cast<int64_t>(n.dtype) << 8 | int64_t{realized} << 16 |
                  int64_t{n.requires_grad} << 17 | static_cast<int64_t>(n.args.size()) << 20 |
                  static_cast<int64_t>(n.shape.dims.size()) << 32);
    key.insert(key.end(), n.shape.dims.begin(), n.shape.dims.end());
    ir::append_attrs(key, n);
    if (realized) {
      const BufferView& v = *n.buffer;
      key.push_back(v.offset);
      key.push_back(static_cast<int64_t>(v.strides.size()));
      key.insert(key.end(), v.strides.begin(), v.strides.end());
      size_t same = i;  // the first leaf over the same storage
      for (size_t j = 0; j < i; ++j)
        if (order[j]->realized() && order[j]->buffer->storage == v.storage) {
          same = j;
          break;
        }
      key.push_back(static_cast<int64_t>(same));
    } else {
      for (auto& a : n.args) key.push_back(index_of(a.get()));
    }
    if (n.op == Op::Constant && !realized) {  // values are arguments; which constants are equal is structure
      size_t same = i;
      int64_t bits = lower::constant_bits(n);
      for (size_t j = 0; j < i; ++j)
        if (order[j]->op == Op::Constant && !order[j]->realized() && order[j]->dtype == n.dtype &&
            lower::constant_bits(*order[j]) == bits) {
          same = j;
          break;
        }
      key.push_back(static_cast<int64_t>(same));
    }
  }
  key.push_back(static_cast<int64_t>(roots.size()));
  for (const auto& r : roots) key.push_back(index_of(r.get()));
  return true;
}

// A plan from a recorded realization; replayable stays false when some
// buffer or constant cannot be traced back to the DAG.
void make_plan(Plan& P, const std::vector<Node*>& order, const std::vector<bool>& was_realized,
               const std::vector<Recorded>& rec) {
  auto leaf_of = [&](const Storage* st) -> int32_t {
    for (size_t j = 0; j < order.size(); ++j)
      if (was_realized[j] && order[j]->buffer->storage.get() == st) return static_cast<int32_t>(j);
    return -1;
  };
  auto step_of = [&](const Storage* st, size_t upto) -> int32_t {
    for (size_t s = 0; s < upto; ++s)
      if (P.steps[s].nbytes && rec[s].l.buffers[0].storage.get() == st) return static_cast<int32_t>(s);
    return -1;
  };
  for (size_t s = 0; s < rec.size(); ++s) {
    const lower::Lowered& l = rec[s].l;
    PlanStep st;
    st.fn = rec[s].fn;
    st.variant = rec[s].variant;
    st.kernel = l.kernel;
    st.args = l.args;
    st.rows = l.rows;
    const Node& n = *rec[s].node;
    st.nbytes = static_cast<size_t>(std::max<int64_t>(n.numel(), 1)) * dtype_size(n.dtype);
    if (l.buffers.empty() || l.buffers[0].storage->nbytes() < st.nbytes) return;
    st.bufs.push_back(-1 - static_cast<int32_t>(s));
    for (size_t p = 1; p < l.buffers.size(); ++p) {
      const Storage* sp = l.buffers[p].storage.get();
      int32_t src = leaf_of(sp);
      if (src < 0) {
        int32_t from = step_of(sp, s);
        if (from < 0) return;
        src = -1 - from;
      }
      st.bufs.push_back(src);
    }
    const size_t cb = l.kernel.const_base();
    for (size_t c = 0; c < l.kernel.const_types.size(); ++c) {
      int64_t bits = l.args[cb + c];
      int found = -1;
      for (size_t j = 0; j < order.size() && found < 0; ++j)
        if (order[j]->op == Op::Constant && !was_realized[j] && order[j]->dtype == l.kernel.const_types[c] &&
            lower::constant_bits(*order[j]) == bits)
          found = static_cast<int>(j);
      if (found < 0) return;
      st.consts.push_back({static_cast<uint32_t>(cb + c), static_cast<uint32_t>(found)});
    }
    P.steps.push_back(std::move(st));
  }
  // The nodes this realization gave values: roots (and values kept for backward).
  for (size_t j = 0; j < order.size(); ++j) {
    if (was_realized[j] || !order[j]->realized()) continue;
    const BufferView& v = *order[j]->buffer;
    int32_t s = step_of(v.storage.get(), P.steps.size());
    if (s < 0 || v.offset != 0 || v.strides != contiguous_strides(order[j]->shape)) return;
    P.sets.emplace_back(static_cast<uint32_t>(j), static_cast<uint32_t>(s), v.strides);
  }
  P.replayable = true;
}

namespace {

// Runs recorded steps with kernels `fns` (null: each step's own fn):
// `leaf_data(b)` is the memory of buffer source b >= 0, `patch(step, args)`
// may rewrite launch arguments; the steps' outputs land in `outs`.
template <class LeafData, class Patch>
void run_steps(const std::vector<PlanStep>& steps, cpujit::KernelFn* const* fns, std::shared_ptr<Storage>* outs,
               LeafData&& leaf_data, Patch&& patch) {
  for (size_t s = 0; s < steps.size(); ++s) {
    const PlanStep& st = steps[s];
    outs[s] = Storage::allocate(st.nbytes);
    BufPtrs bufs(st.bufs.size());
    for (size_t p = 0; p < st.bufs.size(); ++p) {
      int32_t b = st.bufs[p];
      bufs.ptrs[p] = b >= 0 ? leaf_data(b) : outs[static_cast<size_t>(-1 - b)]->data();
    }
    int64_t small_args[64];
    std::vector<int64_t> large_args;
    int64_t* args = small_args;
    if (st.args.size() > std::size(small_args)) {
      large_args.resize(st.args.size());
      args = large_args.data();
    }
    std::copy(st.args.begin(), st.args.end(), args);
    patch(st, args);
    launch_kernel(fns ? fns[s] : st.fn, bufs.ptrs, args, st.args.size(), st.kernel, st.rows);
    bump(&AtomicStats::kernels_launched);
  }
}

// Step outputs: on the stack for the usual few steps.
struct StepOutputs {
  static constexpr size_t kSmall = 8;
  std::shared_ptr<Storage> small[kSmall];
  std::vector<std::shared_ptr<Storage>> large;
  std::shared_ptr<Storage>* data;
  explicit StepOutputs(size_t n) : data(small) {
    if (n > kSmall) {
      large.resize(n);
      data = large.data();
    }
  }
};

// A plan over a caller's leaves: buffer sources >= 0 index the caller's leaf
// list, and the recorded constants stand (the caller's key holds their values).
// Expression caches keep it for the life of the program, across code
// generations: its kernels are looked up again when the generation changes.
class CpuLeafReplay final : public LeafReplay {
 public:
  std::vector<PlanStep> steps;
  uint32_t out_step = 0;
  Strides out_strides;

  // `gen`: the code generation the steps' fns belong to.
  explicit CpuLeafReplay(std::uint64_t gen) : resolved_(new Resolved{gen, {}}) {}
  ~CpuLeafReplay() override { delete resolved_.load(std::memory_order_relaxed); }

  // Call once `steps` is final.
  void take_fns() {
    for (const PlanStep& st : steps) resolved_.load(std::memory_order_relaxed)->fns.push_back(st.fn);
  }

  ir::BufferView run(const ir::BufferView* const* leaves) const override {
    cpujit::CodeInUse in_use;
    const Resolved* r = resolved_.load(std::memory_order_acquire);
    if (r->gen != cpujit::code_generation()) r = resolve();
    StepOutputs outs(steps.size());
    run_steps(
        steps, r->fns.data(), outs.data, [&](int32_t b) { return leaves[b]->storage->data(); },
        [](const PlanStep&, int64_t*) {});
    BufferView v;
    v.storage = std::move(outs.data[out_step]);
    v.strides = out_strides;
    return v;
  }

 private:
  struct Resolved {
    std::uint64_t gen;
    std::vector<cpujit::KernelFn*> fns;  // per step
  };
  mutable std::atomic<Resolved*> resolved_;
  mutable std::mutex mu_;

  // The steps' kernels in the current generation. Other threads may still
  // read the old array: it is freed once they are done.
  const Resolved* resolve() const {
    std::lock_guard<std::mutex> l(mu_);
    Resolved* cur = resolved_.load(std::memory_order_relaxed);
    const std::uint64_t gen = cpujit::code_generation();
    if (cur->gen == gen) return cur;
    auto next = std::make_unique<Resolved>(Resolved{gen, {}});
    for (const PlanStep& st : steps) next->fns.push_back(compiled(st.kernel, st.variant));
    resolved_.store(next.get(), std::memory_order_release);
    cpujit::free_when_unused(std::shared_ptr<Resolved>(cur));
    return next.release();
  }
};

}  // namespace

void replay(const Plan& P, const std::vector<Node*>& order) {
  StepOutputs outs(P.steps.size());
  run_steps(
      P.steps, nullptr, outs.data, [&](int32_t b) { return order[static_cast<size_t>(b)]->buffer->storage->data(); },
      [&](const PlanStep& st, int64_t* args) {
        for (auto [pos, node] : st.consts) args[pos] = lower::constant_bits(*order[node]);
      });
  for (const auto& [node, step, strides] : P.sets) {
    BufferView v;
    v.storage = outs.data[step];
    v.strides = strides;
    order[node]->buffer = std::move(v);
  }
}

std::unique_ptr<LeafReplay> leaf_replay(const Plan& P, std::uint64_t gen, const Walk& w, const ir::NodePtr& root,
                                        const std::vector<ir::NodePtr>& leaves) {
  const auto& [node, step, strides] = P.sets[0];
  if (static_cast<int>(node) != w.index_of(root.get())) return nullptr;
  auto r = std::make_unique<CpuLeafReplay>(gen);
  r->out_step = step;
  r->out_strides = strides;
  for (const PlanStep& st : P.steps) {
    PlanStep c = st;
    for (int32_t& b : c.bufs) {
      if (b < 0) continue;
      auto it = std::find_if(leaves.begin(), leaves.end(),
                             [&](const ir::NodePtr& n) { return n.get() == w.order[static_cast<size_t>(b)]; });
      if (it == leaves.end()) return nullptr;  // reads a value the caller does not pass
      b = static_cast<int32_t>(it - leaves.begin());
    }
    // The plan may come from an earlier realization with other constant
    // values: this DAG's values are the ones the caller's key holds.
    for (auto [pos, n] : c.consts) c.args[pos] = lower::constant_bits(*w.order[n]);
    c.consts.clear();
    r->steps.push_back(std::move(c));
  }
  r->take_fns();
  return r;
}

}  // namespace tessel::cpujit
