#include "codegen/cpu/plan_cache.h"

#include <algorithm>
#include <atomic>
#include <iterator>
#include <optional>

#include "codegen/cpu/jit_stats.h"
#include "codegen/cpu/kernel_table.h"
#include "codegen/cpu/banding.h"
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
  C.steps = 0;
}

bool Walk::build(const std::vector<ir::NodePtr>& roots, bool keep_grad_values) {
  order.clear();
  stack.clear();
  key.clear();
  met.clear();
  for (const auto& r : roots) {
    if (seen(r.get())) continue;
    stack.push_back({r.get(), 0});
    met.put(r.get(), kOnStack);
    while (!stack.empty()) {
      auto& [n, next] = stack.back();
      if (!n->realized() && next < n->args.size()) {
        Node* a = n->args[next++].get();
        if (!seen(a)) {
          stack.push_back({a, 0});
          met.put(a, kOnStack);
        }
        continue;
      }
      if (order.size() == kMaxPlanNodes) return false;
      met.put(n, static_cast<int>(order.size()));
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

bool Walk::add_destinations(const std::vector<ir::BufferView>& into) {
  for (const BufferView& d : into) {
    int64_t leaf = -1;
    if (d.storage) {
      for (size_t j = 0; j < order.size() && leaf < 0; ++j) {
        const Node& n = *order[j];
        if (n.realized() && n.buffer->storage == d.storage && n.buffer->offset == d.offset && n.buffer->strides == d.strides)
          leaf = static_cast<int64_t>(j);
      }
      if (leaf < 0) return false;
    }
    key.push_back(leaf);
  }
  return true;
}

// A plan from a recorded realization; replayable stays false when some
// buffer or constant cannot be traced back to the DAG.
void make_plan(Plan& P, const std::vector<Node*>& order, const std::vector<bool>& was_realized,
               const std::vector<Recorded>& rec) {
  // Every storage a launch touched is a leaf's or one this realization made
  // (its first appearance is the write of the launch that made it).
  std::vector<std::pair<const Storage*, BufSource>> known;
  for (size_t j = 0; j < order.size(); ++j)
    if (was_realized[j]) known.push_back({order[j]->buffer->storage.get(), static_cast<BufSource>(j)});
  auto find = [&](const Storage* st) -> std::optional<BufSource> {
    for (auto& [k, src] : known)
      if (k == st) return src;
    return std::nullopt;
  };
  auto written = [&](const Storage* st) -> BufSource {
    if (auto s = find(st)) return *s;
    P.allocs.push_back(st->nbytes());
    const BufSource src = -static_cast<BufSource>(P.allocs.size());
    known.push_back({st, src});
    return src;
  };
  // A kernel's params: the loads must be known; the others are its stores.
  auto kernel_bufs = [&](const lower::Lowered& l, PlanStep& st) -> bool {
    std::vector<bool> loaded(l.buffers.size(), false);
    for (int p : l.kernel.load_params) loaded[static_cast<size_t>(p)] = true;
    st.bufs.resize(l.buffers.size());
    for (size_t p = 0; p < l.buffers.size(); ++p) {
      if (!loaded[p]) continue;
      auto src = find(l.buffers[p].storage.get());
      if (!src) return false;
      st.bufs[p] = *src;
    }
    for (size_t p = 0; p < l.buffers.size(); ++p)
      if (!loaded[p]) st.bufs[p] = written(l.buffers[p].storage.get());
    const size_t cb = l.kernel.const_base();
    for (size_t c = 0; c < l.kernel.const_types.size(); ++c) {
      int64_t bits = l.args[cb + c];
      int found = -1;
      for (size_t j = 0; j < order.size() && found < 0; ++j)
        if (order[j]->op == Op::Constant && !was_realized[j] && order[j]->dtype == l.kernel.const_types[c] &&
            lower::constant_bits(*order[j]) == bits)
          found = static_cast<int>(j);
      if (found < 0) return false;
      st.consts.push_back({static_cast<uint32_t>(cb + c), static_cast<uint32_t>(found)});
    }
    st.fn = nullptr;
    st.kernel = l.kernel;
    st.args = l.args;
    st.rows = l.rows;
    return true;
  };
  for (const Recorded& r : rec) {
    PlanStep st;
    st.kind = r.kind;
    if (r.kind != Recorded::Kind::kernel) {
      auto a = find(r.gemm.a.v.storage.get()), b = find(r.gemm.b.v.storage.get());
      if (!a || !b) return;
      st.gemm = r.gemm;
      st.gemm.a.v = st.gemm.b.v = ir::BufferView{};  // the replay's memory is its own
      st.a_src = *a, st.b_src = *b;
      st.a_off = r.gemm.a.v.offset, st.b_off = r.gemm.b.v.offset;
      st.out_src = written(r.out.storage.get());
      st.out_off = r.out.offset;
    }
    if (r.kind != Recorded::Kind::matmul && !kernel_bufs(r.l, st)) return;
    st.fn = r.fn;
    st.variant = r.variant;
    P.steps.push_back(std::move(st));
  }
  // The nodes this realization gave values: roots (and values kept for backward).
  for (size_t j = 0; j < order.size(); ++j) {
    if (was_realized[j] || !order[j]->realized()) continue;
    const BufferView& v = *order[j]->buffer;
    auto src = find(v.storage.get());
    if (!src) return;
    P.sets.push_back({static_cast<uint32_t>(j), *src, v.offset, v.strides});
  }
  P.replayable = true;
}

namespace {

// Memory for a replay's allocations: on the stack for the usual few.
struct Allocations {
  static constexpr size_t kSmall = 16;
  std::shared_ptr<Storage> small[kSmall];
  std::vector<std::shared_ptr<Storage>> large;
  std::shared_ptr<Storage>* data;
  explicit Allocations(const std::vector<size_t>& bytes) : data(small) {
    if (bytes.size() > kSmall) {
      large.resize(bytes.size());
      data = large.data();
    }
    for (size_t a = 0; a < bytes.size(); ++a) data[a] = Storage::allocate(bytes[a]);
  }
};

// Runs recorded steps with kernels `fns` (null: each step's own fn):
// `leaf_data(b)` is the memory of leaf source b >= 0, `patch(step, args)`
// may rewrite launch arguments.
template <class LeafData, class Patch>
void run_steps(const std::vector<PlanStep>& steps, cpujit::KernelFn* const* fns, const Allocations& mem,
               LeafData&& leaf_data, Patch&& patch) {
  auto data = [&](BufSource b) -> void* { return b >= 0 ? leaf_data(b) : mem.data[-1 - b]->data(); };
  for (size_t s = 0; s < steps.size(); ++s) {
    const PlanStep& st = steps[s];
    cpujit::KernelFn* fn = fns ? fns[s] : st.fn;
    const GemmForm& g = st.gemm;
    const size_t es = dtype_size(g.dtype);
    auto at = [&](BufSource b, int64_t off) { return static_cast<std::byte*>(data(b)) + off * static_cast<int64_t>(es); };
    if (st.kind == Recorded::Kind::matmul) {
      gemm::rows(g.dtype, g.a, g.b, at(st.a_src, st.a_off), at(st.b_src, st.b_off), at(st.out_src, st.out_off), g.M, g.N,
                 g.K, 0, g.M);
      bump(&AtomicStats::matmuls);
      continue;
    }
    BufPtrs bufs(st.bufs.size());
    for (size_t p = 0; p < st.bufs.size(); ++p) bufs.ptrs[p] = data(st.bufs[p]);
    int64_t small_args[64];
    std::vector<int64_t> large_args;
    int64_t* args = small_args;
    if (st.args.size() > std::size(small_args)) {
      large_args.resize(st.args.size());
      args = large_args.data();
    }
    std::copy(st.args.begin(), st.args.end(), args);
    patch(st, args);
    if (st.kind == Recorded::Kind::matmul_epilogue) {
      banded_matmul_epilogue(g.dtype, g.a, g.b, at(st.a_src, st.a_off), at(st.b_src, st.b_off),
                             at(st.out_src, st.out_off), g.M, g.N, g.K, fn, bufs.ptrs, args);
      bump(&AtomicStats::matmuls);
      bump(&AtomicStats::matmul_epilogues);
    } else {
      launch_kernel(fn, bufs.ptrs, args, st.args.size(), st.kernel, st.rows);
    }
    bump(&AtomicStats::kernels_launched);
  }
}

// A plan over a caller's leaves: buffer sources >= 0 index the caller's leaf
// list, and the recorded constants stand (the caller's key holds their values).
// Expression caches keep it for the life of the program, across code
// generations: its kernels are looked up again when the generation changes.
class CpuLeafReplay final : public LeafReplay {
 public:
  std::vector<PlanStep> steps;
  std::vector<size_t> allocs;
  PlanSet out;

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
    Allocations mem(allocs);
    run_steps(
        steps, r->fns.data(), mem, [&](BufSource b) { return leaves[b]->storage->data(); },
        [](const PlanStep&, int64_t*) {});
    BufferView v;
    v.storage = out.src >= 0 ? leaves[out.src]->storage : std::move(mem.data[-1 - out.src]);
    v.offset = out.offset;
    v.strides = out.strides;
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
  Allocations mem(P.allocs);
  auto leaf = [&](BufSource b) -> const std::shared_ptr<Storage>& { return order[static_cast<size_t>(b)]->buffer->storage; };
  run_steps(
      P.steps, nullptr, mem, [&](BufSource b) { return leaf(b)->data(); },
      [&](const PlanStep& st, int64_t* args) {
        for (auto [pos, node] : st.consts) args[pos] = lower::constant_bits(*order[node]);
      });
  for (const PlanSet& s : P.sets) {
    BufferView v;
    v.storage = s.src >= 0 ? leaf(s.src) : mem.data[-1 - s.src];
    v.offset = s.offset;
    v.strides = s.strides;
    order[s.node]->buffer = std::move(v);
  }
}

std::unique_ptr<LeafReplay> leaf_replay(const Plan& P, std::uint64_t gen, const Walk& w, const ir::NodePtr& root,
                                        const std::vector<ir::NodePtr>& leaves) {
  if (static_cast<int>(P.sets[0].node) != w.index_of(root.get())) return nullptr;
  for (const PlanStep& st : P.steps)
    if (st.kind != Recorded::Kind::kernel) return nullptr;  // the expression caches' replays are kernels only
  auto r = std::make_unique<CpuLeafReplay>(gen);
  r->allocs = P.allocs;
  r->out = P.sets[0];
  auto to_leaf = [&](BufSource& b) {
    if (b < 0) return true;
    auto it = std::find_if(leaves.begin(), leaves.end(),
                           [&](const ir::NodePtr& n) { return n.get() == w.order[static_cast<size_t>(b)]; });
    if (it == leaves.end()) return false;  // reads a value the caller does not pass
    b = static_cast<BufSource>(it - leaves.begin());
    return true;
  };
  if (!to_leaf(r->out.src)) return nullptr;
  for (const PlanStep& st : P.steps) {
    PlanStep c = st;
    for (BufSource& b : c.bufs) {
      if (!to_leaf(b)) return nullptr;
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
