#include "codegen/cpu/cpu_backend.h"

#include "tessel/config.h"

#include <fmt/format.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <xxhash.h>

#include "codegen/conv_geometry.h"
#include "codegen/executor.h"
#include "codegen/movement.h"
#include "codegen/lower.h"
#include "codegen/schedule.h"
#include "runtime/errors.h"
#include "runtime/precompiled_kernels.h"
#include "runtime/trace.h"

#if TESSEL_HAS_LLVM
#include "codegen/cpu/banding.h"
#include "codegen/cpu/dump.h"
#include "codegen/cpu/jit_code_lifetime.h"
#include "codegen/cpu/jit_stats.h"
#include "codegen/cpu/kernel_table.h"
#include "codegen/cpu/launch.h"
#include "codegen/attention_geometry.h"
#include "codegen/cpu/flash_attention.h"
#include "codegen/cpu/onednn_conv.h"
#include "codegen/cpu/plan_cache.h"
#endif

namespace tessel {

#if !TESSEL_HAS_LLVM
Backend* cpu_jit_backend() { return nullptr; }
#else

namespace cpujit {
namespace {

using ir::BufferView;
using ir::Node;
using ir::Op;

class CpuExecutor final : public exec::StepExecutor {
 public:
  // Set while a realization is recorded for the plan cache; anything a plan
  // cannot replay (fallbacks, convolutions, attention, batched or copied
  // matmul operands) clears `plannable`.
  std::vector<Recorded>* record = nullptr;
  bool plannable = true;
  // A launch ran on the interpreter while its kernel compiles (jit_async.h):
  // the form is worth recording on a later realization, not remembering as
  // one that cannot be replayed.
  bool interpreted = false;

  BufferView alloc(DType t, const Shape& s) override { return host_dense(t, s); }
  // Not while ahead-of-time kernels are linked in: they have no such variant,
  // and a program built with them must not compile.
  bool epilogue_over_product() const override { return precompiled::size() == 0 && !precompiled::jit_disabled(); }

  bool kernel_over_input() const override { return epilogue_over_product(); }

  void launch(const lower::Lowered& l, exec::Role, const Node*) override { launch_with(l, false); }
  bool try_launch(const lower::Lowered& l, exec::Role, const Node*) override { return launch_with(l, true); }

  // The variant a launch of `l` needs: writing over a load param whose memory
  // is its output's (an epilogue over its product, an update into its
  // tensor: the aliasing variant), else streaming when it writes enough.
  static cpujit::EmitOptions variant_for(const lower::Lowered& l, const char* pass) {
    cpujit::EmitOptions variant;
    for (size_t p = 1; p < l.buffers.size(); ++p)
      if (l.buffers[p].storage == l.buffers[0].storage) {
        TESSEL_ASSERT(pass, variant.output_alias_param < 0 && lower::reads_in_store_layout(l, p));
        variant.output_alias_param = static_cast<int>(p);
      }
    // No streaming variant writes over its input.
    variant.streaming = variant.output_alias_param < 0 && cpujit::wants_streaming(l.kernel, l.args.data(), l.rows);
    return variant;
  }

  // With `may_defer`, a kernel still compiling runs nothing and gives false.
  bool launch_with(const lower::Lowered& l, bool may_defer) {
    const cpujit::EmitOptions variant = variant_for(l, "run_schedule");
    cpujit::KernelFn* fn = may_defer ? compiled_if_ready(l.kernel, variant) : compiled(l.kernel, variant);
    if (!fn) return interpreting();
    run_lowered(l, fn);
    bump(&AtomicStats::kernels_launched);
    if (record) {
      Recorded r;
      r.fn = fn;
      r.variant = variant;
      r.l = l;
      record->push_back(std::move(r));
    }
    return true;
  }

  // The caller computes the launch with the interpreter instead.
  bool interpreting() {
    plannable = false;
    interpreted = true;
    bump(&AtomicStats::kernels_interpreted);
    return false;
  }

  BufferView host_eval(const Node& n, const std::vector<BufferView>& args) override {
    plannable = false;
    bump(&AtomicStats::fallbacks);
    return eval_with_ref(n, args);
  }

  // A 2-D product of operands in BLAS form straight into its memory (what
  // the interpreter computes, without its per-call setup); others by it.
  BufferView matmul(const Node& n, const std::vector<BufferView>& args) override {
    bump(&AtomicStats::matmuls);
    const Shape& sa = n.args[0]->shape;
    std::optional<gemm::Operand> a, b;
    if (sa.rank() == 2) a = gemm::operand(sa, args[0]), b = gemm::operand(n.args[1]->shape, args[1]);
    if (!a || !b) {
      plannable = false;
      return eval_with_ref(n, args);
    }
    const int64_t M = sa.dims[0], K = sa.dims[1], N = n.shape.dims[1];
    BufferView out = alloc(n.dtype, n.shape);
    if (M > 0 && N > 0) gemm::rows(n.dtype, *a, *b, a->v.bytes(n.dtype), b->v.bytes(n.dtype), out.bytes(n.dtype), M, N, K, 0, M);
    if (record) {
      Recorded r;
      r.kind = Recorded::Kind::matmul;
      r.gemm = {n.dtype, M, N, K, *a, *b};
      r.out = out;
      record->push_back(std::move(r));
    }
    return out;
  }

  // f32 convolutions on oneDNN (dense NCHW / OIHW operands), others by the ref loops.
  BufferView conv(const Node& n, const std::vector<BufferView>& args) override {
    plannable = false;
    bump(&AtomicStats::convs);
    if (n.dtype != DType::f32 || !onednn::available()) return eval_with_ref(n, args);
    std::vector<BufferView> dense(args);
    for (size_t i = 0; i < 2; ++i)
      if (!ir::is_contiguous(n.args[i]->shape, dense[i].strides))
        dense[i] = exec::dense_copy(*this, n.args[i]->dtype, n.args[i]->shape, dense[i]);
    const ir::ConvGeometry g = ir::conv_geometry(n);
    BufferView out = alloc(n.dtype, n.shape);
    const float* a = dense[0].ptr<float>();
    const float* b = dense[1].ptr<float>();
    switch (n.op) {
      case Op::Conv: onednn::conv_forward(g, a, b, nullptr, out.ptr<float>()); break;
      case Op::ConvGradInput: onednn::conv_backward_data(g, a, b, out.ptr<float>()); break;
      case Op::ConvGradWeight: onednn::conv_backward_weights(g, a, b, out.ptr<float>(), nullptr); break;
      case Op::MatMul: case Op::Attention: case Op::AttentionGrad:
      TESSEL_IR_CASES_NOT_CONTRACTION throw InternalError("cpu backend: conv() of a node that is no convolution");
    }
    return out;
  }

  // Attention nodes by the fused kernel (codegen/cpu/flash_attention.h),
  // reading q, k, v and the mask in place where their layouts allow.
  BufferView attention(const Node& n, const std::vector<BufferView>& args) override {
    plannable = false;
    bump(&AtomicStats::attentions);
    ir::PreparedAttention p = ir::prepare_attention(n, args, [&](size_t i) {
      return exec::dense_copy(*this, n.args[i]->dtype, n.args[i]->shape, args[i]);
    });
    BufferView out = alloc(n.dtype, n.shape);
    auto run = [&](auto tag) {
      using T = decltype(tag);
      const ir::AttentionOperands<T> a = p.operands<T>();
      if (n.op == Op::Attention) cpu_attention::forward(p.geometry, a, out.ptr<T>());
      else cpu_attention::backward(p.geometry, a, p.views[3].ptr<T>(), p.views[4].ptr<T>(), p.layouts.operands[4], out.ptr<T>());
    };
    if (n.dtype == DType::f32) run(float{});
    else if (n.dtype == DType::f64) run(double{});
    else return eval_with_ref(n, args);
    return out;
  }

  void matmul_epilogue(const Node& mm, const std::vector<BufferView>& args, const BufferView& out,
                       const lower::Lowered& epi, const Node&) override {
    epilogue_with(mm, args, out, epi, false);
  }
  bool try_matmul_epilogue(const Node& mm, const std::vector<BufferView>& args, const BufferView& out,
                           const lower::Lowered& epi, const Node&) override {
    return epilogue_with(mm, args, out, epi, true);
  }

  // With `may_defer`, an epilogue still compiling runs nothing (not even the
  // product) and gives false.
  bool epilogue_with(const Node& mm, const std::vector<BufferView>& args, const BufferView& out,
                     const lower::Lowered& epi, bool may_defer) {
    // Written over the product (epilogue_over_product): the product's load
    // param shares the output's memory, offset and strides. Never streaming:
    // a band (half of L2) is far below kStreamBytes.
    cpujit::EmitOptions variant = variant_for(epi, "matmul epilogue");
    variant.streaming = false;
    cpujit::KernelFn* fn = may_defer ? compiled_if_ready(epi.kernel, variant) : compiled(epi.kernel, variant);
    if (!fn) return interpreting();
    matmul_with_epilogue(mm, args, out, epi, fn);
    if (record) {
      Recorded r;
      r.kind = Recorded::Kind::matmul_epilogue;
      r.fn = fn;
      r.variant = variant;
      r.l = epi;
      r.gemm = {mm.dtype, mm.args[0]->shape.dims[0], mm.shape.dims[1], mm.args[0]->shape.dims[1],
                *gemm::operand(mm.args[0]->shape, args[0]), *gemm::operand(mm.args[1]->shape, args[1])};
      r.out = out;
      record->push_back(std::move(r));
    }
    bump(&AtomicStats::matmuls);
    bump(&AtomicStats::matmul_epilogues);
    bump(&AtomicStats::kernels_launched);
    return true;
  }

  void on_view() override {
    bump(&AtomicStats::views);
  }
};

class CpuBackend final : public Backend {
 public:
  std::string_view name() const override { return "cpu"; }

  void realize(const std::vector<ir::NodePtr>& roots, bool keep_grad_values) override {
    realize_planned(roots, keep_grad_values, nullptr);
  }

  void realize_into(const std::vector<ir::NodePtr>& values, const std::vector<BufferView>& dsts) override {
    realize_planned(values, false, &dsts);
  }

  // A realization, replayed from the plan cache when its form was seen; with
  // `into`, the roots' destinations (run_schedule) are part of the form: each
  // is a leaf of the walk (its index in the key), or the form is not planned.
  void realize_planned(const std::vector<ir::NodePtr>& roots, bool keep_grad_values,
                       const std::vector<BufferView>* into) {
    bump(&AtomicStats::realizations);
    cpujit::CodeInUse in_use;
    const std::uint64_t gen = cpujit::code_generation();
    // Traces and dumps describe every schedule: those runs take the general path.
    const bool planning = !dump_at_start() && !detail::trace_enabled("jit");
    thread_local Walk walk;
    uint64_t hash = 0;
    bool keyed = planning && walk.build(roots, keep_grad_values) && (!into || walk.add_destinations(*into));
    if (keyed) {
      hash = XXH3_64bits(walk.key.data(), walk.key.size() * sizeof(int64_t));
      // Each thread remembers its last few plans without the cache's lock;
      // plans of an older code generation are no longer in the cache.
      struct Recent {
        uint64_t hash = 0;
        uint64_t gen = 0;
        const Plan* plan = nullptr;
      };
      thread_local Recent recent[4] = {};
      Recent& slot = recent[hash & 3];
      const Plan* hit = slot.hash == hash && slot.gen == gen ? slot.plan : nullptr;
      if (!hit) {
        PlanCache& C = plan_cache();
        std::lock_guard<std::mutex> l(C.mu);
        auto it = C.plans.find(hash);
        if (it != C.plans.end()) hit = it->second.get();
      }
      if (hit && hit->key != walk.key) {
        hit = nullptr;
        keyed = false;  // a hash collision: this form is not planned
      }
      if (hit) slot = {hash, gen, hit};
      if (hit && hit->replayable) {
        replay(*hit, walk.order);
        bump(&AtomicStats::plan_replays);
        return;
      }
      if (hit) keyed = false;  // known not to be replayable
    }
    sched::Schedule S = sched::schedule(roots, {.max_inputs = 16, .keep_grad_values = keep_grad_values});
    static std::atomic<int> dump_seq{0};
    if (!dump_dir().empty())
      dump_file(fmt::format("schedule_{}.txt", dump_seq++), ir::to_string(roots) + "\n" + S.to_string());
    CpuExecutor ex;
    std::vector<Recorded> rec;
    std::vector<bool> was_realized;
    // This realization's own copy of the walk: the thread's scratch is reused
    // by any realization a launch might make.
    std::vector<Node*> order;
    std::vector<int64_t> key;
    if (keyed) {
      ex.record = &rec;
      order = walk.order;
      key = walk.key;
      was_realized.reserve(order.size());
      for (Node* n : order) was_realized.push_back(n->realized());
    }
    exec::run_schedule(ex, roots, S, keep_grad_values, into);
    // A launch the interpreter ran while its kernel compiled: the form is
    // recorded by a later realization, once every kernel is compiled.
    if (!keyed || ex.interpreted) return;
    // Forms that cannot be replayed are remembered too, so they are not recorded again.
    auto plan = std::make_unique<Plan>();
    plan->key = std::move(key);
    if (ex.plannable) make_plan(*plan, order, was_realized, rec);
    // Not if the code was dropped meanwhile: the plan would call old kernels.
    cpujit::insert_if_current(gen, [&] {
      PlanCache& C = plan_cache();
      std::lock_guard<std::mutex> l(C.mu);
      const size_t n = plan->steps.size();
      if (C.plans.size() < kMaxPlans && C.steps + n <= kMaxPlanSteps && C.plans.emplace(hash, std::move(plan)).second)
        C.steps += n;
    });
  }

  std::unique_ptr<LeafReplay> realize_recorded(const ir::NodePtr& root, const std::vector<ir::NodePtr>& leaves) override {
    cpujit::CodeInUse in_use;
    const std::uint64_t gen = cpujit::code_generation();  // the found plan's, or older (then run() looks again)
    Walk w;  // its own: realize() reuses the thread's
    const bool keyed = !dump_at_start() && !detail::trace_enabled("jit") && w.build({root}, false);
    realize({root}, false);
    if (!keyed) return nullptr;
    const uint64_t hash = XXH3_64bits(w.key.data(), w.key.size() * sizeof(int64_t));
    const Plan* P = nullptr;
    {
      PlanCache& C = plan_cache();
      std::lock_guard<std::mutex> l(C.mu);
      auto it = C.plans.find(hash);
      if (it != C.plans.end()) P = it->second.get();
    }
    if (!P || P->key != w.key || !P->replayable || P->sets.size() != 1) return nullptr;
    return leaf_replay(*P, gen, w, root, leaves);
  }
};

CpuBackend& instance() {
  static CpuBackend b;
  return b;
}

// The default CPU backend wherever LLVM is built in (TESSEL_BACKEND=ref
// forces the interpreter).
const BackendRegistration g_registration{{"cpu", Device::Kind::cpu, 1, [](int) -> Backend& { return instance(); }}};

}  // namespace
}  // namespace cpujit

Backend* cpu_jit_backend() { return &cpujit::instance(); }

#endif  // TESSEL_HAS_LLVM

}  // namespace tessel

// Called through link_backends() (codegen/backends_linked.cpp), in every
// build: keeps this object, and so its registration, in every program.
TESSEL_BACKEND_ANCHOR(cpu)
