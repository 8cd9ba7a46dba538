#include "codegen/cpu/onednn_conv.h"

#include <atomic>
#include <string>

#include "runtime/errors.h"

#if TESSEL_HAS_ONEDNN
#include <dnnl.hpp>

#include <algorithm>
#include <cstddef>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <new>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "runtime/thread_pool.h"

// The OpenMP runtime oneDNN is built on (libgomp here). Declared rather than
// included so that no OpenMP compiler flag or header is needed: this file only
// sets the thread count oneDNN's parallel regions use.
extern "C" {
int omp_get_max_threads();
void omp_set_num_threads(int n);
}
#endif

namespace tessel::onednn {

namespace {
std::atomic<std::int64_t> g_primitives_created{0};
}  // namespace

std::int64_t primitives_created() { return g_primitives_created.load(std::memory_order_relaxed); }

#if TESSEL_HAS_ONEDNN

namespace {

using dnnl::memory;
using Tag = memory::format_tag;
using Dt = memory::data_type;

// Alignment of the workspace and of each copy in it: oneDNN's own allocations use 64 bytes.
constexpr std::size_t kAlign = 64;

enum class Direction { Forward, BackwardData, BackwardWeights };

const char* name(Direction d) {
  switch (d) {
    case Direction::Forward: return "forward";
    case Direction::BackwardData: return "backward-data";
    case Direction::BackwardWeights: return "backward-weights";
  }
  return "?";
}

std::string describe(const ConvGeometry& g) {
  return fmt::format(
      "conv2d x [{}, {}, {}, {}], w [{}, {}, {}, {}], groups {}, stride ({}, {}), padding (top {}, left {}, bottom "
      "{}, right {}), dilation ({}, {}) -> y [{}, {}, {}, {}]",
      g.n, g.c, g.h, g.w, g.o, g.groups > 0 ? g.c / g.groups : g.c, g.kh, g.kw, g.groups, g.stride_h, g.stride_w,
      g.pad_t, g.pad_l, g.pad_b, g.pad_r, g.dilation_h, g.dilation_w, g.n, g.o, g.oh, g.ow);
}

// The callers compute the geometry; one that does not add up is a bug there,
// and oneDNN's own complaint would not say which number is off.
void check(const ConvGeometry& g) {
  const auto out = [](std::int64_t in, std::int64_t k, std::int64_t stride, std::int64_t before, std::int64_t after,
                      std::int64_t dilation) { return (in + before + after - dilation * (k - 1) - 1) / stride + 1; };
  const bool positive = g.n > 0 && g.c > 0 && g.h > 0 && g.w > 0 && g.o > 0 && g.kh > 0 && g.kw > 0 && g.groups > 0 &&
                        g.stride_h > 0 && g.stride_w > 0 && g.dilation_h > 0 && g.dilation_w > 0 && g.pad_t >= 0 &&
                        g.pad_l >= 0 && g.pad_b >= 0 && g.pad_r >= 0 && g.oh > 0 && g.ow > 0;
  if (!positive || g.c % g.groups != 0 || g.o % g.groups != 0 ||
      g.oh != out(g.h, g.kh, g.stride_h, g.pad_t, g.pad_b, g.dilation_h) ||
      g.ow != out(g.w, g.kw, g.stride_w, g.pad_l, g.pad_r, g.dilation_w))
    throw InternalError(fmt::format("onednn: inconsistent convolution geometry: {} (channels must divide by groups, "
                                    "and oh, ow must follow from the input, kernel, stride, padding and dilation)",
                                    describe(g)));
}

// One engine and one stream for the process (CPU streams hold no queue: every
// execute runs to completion on the calling thread and its OpenMP team).
struct Context {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
};

Context& context() {
  static Context c;
  return c;
}

// A primitive and its arguments, bound once to the plan's memory objects.
struct Step {
  dnnl::primitive primitive;
  std::unordered_map<int, memory> args;
};

// A memory object that lives in the shared workspace, `offset` bytes in.
struct Placed {
  memory mem;
  std::size_t offset;
};

// Everything one (geometry, direction, bias, threads) needs, made once: the
// memory objects that wrap the caller's buffers, those of the oneDNN-layout
// copies and the scratchpads (placed in the workspace), and the steps: the
// reorders in, the convolution, the reorders out. Each call points the
// memory objects at its buffers and the workspace (set_data_handle).
struct Plan {
  std::vector<memory> user;  // one per argument slot; empty for an absent bias
  std::vector<Placed> placed;
  std::size_t workspace_bytes = 0;
  std::vector<Step> steps;
};

struct Key {
  ConvGeometry g;
  Direction dir;
  bool bias;
  int threads;
  bool operator==(const Key&) const = default;
};

memory::dims weight_dims(const ConvGeometry& g) {
  if (g.groups == 1) return {g.o, g.c, g.kh, g.kw};
  return {g.groups, g.o / g.groups, g.c / g.groups, g.kh, g.kw};
}

memory::desc plain_x(const ConvGeometry& g) { return {{g.n, g.c, g.h, g.w}, Dt::f32, Tag::nchw}; }
memory::desc plain_y(const ConvGeometry& g) { return {{g.n, g.o, g.oh, g.ow}, Dt::f32, Tag::nchw}; }
memory::desc plain_w(const ConvGeometry& g) {
  return {weight_dims(g), Dt::f32, g.groups == 1 ? Tag::oihw : Tag::goihw};
}
memory::desc plain_bias(const ConvGeometry& g) { return {{g.o}, Dt::f32, Tag::x}; }
// The same shapes with the layout left to oneDNN.
memory::desc any_x(const ConvGeometry& g) { return {{g.n, g.c, g.h, g.w}, Dt::f32, Tag::any}; }
memory::desc any_y(const ConvGeometry& g) { return {{g.n, g.o, g.oh, g.ow}, Dt::f32, Tag::any}; }
memory::desc any_w(const ConvGeometry& g) { return {weight_dims(g), Dt::f32, Tag::any}; }

struct Shape {
  memory::dims strides, dilates, pad_l, pad_r;
};

Shape shape(const ConvGeometry& g) {
  return {{g.stride_h, g.stride_w}, {g.dilation_h - 1, g.dilation_w - 1}, {g.pad_t, g.pad_l}, {g.pad_b, g.pad_r}};
}

// Scratchpads are the caller's (scratchpad_mode::user): the plan's own buffer,
// so a primitive may run on any thread and a call allocates nothing.
dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

dnnl::convolution_forward::primitive_desc forward_pd(const ConvGeometry& g, bool bias) {
  const Shape s = shape(g);
  const auto prop = dnnl::prop_kind::forward_training;  // the backward passes' hint must be a training forward
  const auto algo = dnnl::algorithm::convolution_direct;
  const auto desc = bias ? dnnl::convolution_forward::desc(prop, algo, any_x(g), any_w(g), plain_bias(g), any_y(g),
                                                           s.strides, s.dilates, s.pad_l, s.pad_r)
                         : dnnl::convolution_forward::desc(prop, algo, any_x(g), any_w(g), any_y(g), s.strides,
                                                           s.dilates, s.pad_l, s.pad_r);
  return {desc, user_scratchpad(), context().engine};
}

// Builds a plan's steps: the caller's buffer for each slot, bridged to the
// layout the convolution wants by a reorder when the two differ.
class Builder {
 public:
  explicit Builder(std::size_t slots) { plan_.user.resize(slots); }

  // The memory the convolution reads for `slot`: the caller's own when the layouts agree.
  memory in(std::size_t slot, const memory::desc& plain, const memory::desc& wanted) {
    memory user = bind(slot, plain);
    if (wanted == plain) return user;
    memory inner = place(wanted);
    before_.push_back(reorder(user, inner));
    return inner;
  }

  // The memory the convolution writes for `slot`, reordered into the caller's afterwards.
  memory out(std::size_t slot, const memory::desc& plain, const memory::desc& wanted) {
    memory user = bind(slot, plain);
    if (wanted == plain) return user;
    memory inner = place(wanted);
    after_.push_back(reorder(inner, user));
    return inner;
  }

  void convolution(dnnl::primitive primitive, const memory::desc& scratch, std::unordered_map<int, memory> args) {
    ++g_primitives_created;
    conv_ = {Step{std::move(primitive), std::move(args)}, scratch};
  }

  std::shared_ptr<Plan> finish() {
    std::vector<std::pair<Step, memory::desc>> all = std::move(before_);
    all.push_back(std::move(conv_));
    for (auto& s : after_) all.push_back(std::move(s));
    // The steps run one after another: their scratchpads share one region, after the copies.
    const std::size_t scratch_offset = plan_.workspace_bytes;
    for (auto& [step, md] : all) {
      if (md.get_size() > 0) {
        memory m(md, context().engine, DNNL_MEMORY_NONE);
        plan_.placed.push_back({m, scratch_offset});
        plan_.workspace_bytes = std::max(plan_.workspace_bytes, scratch_offset + md.get_size());
        step.args.emplace(DNNL_ARG_SCRATCHPAD, m);
      }
      plan_.steps.push_back(std::move(step));
    }
    return std::make_shared<Plan>(std::move(plan_));
  }

 private:
  memory bind(std::size_t slot, const memory::desc& plain) {
    // No buffer yet: each call points it at the caller's.
    plan_.user[slot] = memory(plain, context().engine, DNNL_MEMORY_NONE);
    return plan_.user[slot];
  }

  memory place(const memory::desc& md) {
    memory m(md, context().engine, DNNL_MEMORY_NONE);
    plan_.placed.push_back({m, plan_.workspace_bytes});
    plan_.workspace_bytes += (md.get_size() + kAlign - 1) / kAlign * kAlign;
    return m;
  }

  static std::pair<Step, memory::desc> reorder(const memory& from, const memory& to) {
    const dnnl::reorder::primitive_desc pd(context().engine, from.get_desc(), context().engine, to.get_desc(),
                                           user_scratchpad());
    dnnl::reorder r(pd);
    ++g_primitives_created;
    return {Step{std::move(r), {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}}}, pd.scratchpad_desc()};
  }

  Plan plan_;
  std::vector<std::pair<Step, memory::desc>> before_, after_;
  std::pair<Step, memory::desc> conv_;
};

// Argument slots, in the order each direction's call passes its pointers.
std::shared_ptr<Plan> make_plan(const Key& k) {
  const ConvGeometry& g = k.g;
  const Shape s = shape(g);
  const auto algo = dnnl::algorithm::convolution_direct;
  switch (k.dir) {
    case Direction::Forward: {  // x, w, bias, y
      const auto pd = forward_pd(g, k.bias);
      Builder b(4);
      std::unordered_map<int, memory> args{{DNNL_ARG_SRC, b.in(0, plain_x(g), pd.src_desc())},
                                           {DNNL_ARG_WEIGHTS, b.in(1, plain_w(g), pd.weights_desc())}};
      if (k.bias) args.emplace(DNNL_ARG_BIAS, b.in(2, plain_bias(g), pd.bias_desc()));
      args.emplace(DNNL_ARG_DST, b.out(3, plain_y(g), pd.dst_desc()));
      b.convolution(dnnl::convolution_forward(pd), pd.scratchpad_desc(), std::move(args));
      return b.finish();
    }
    case Direction::BackwardData: {  // gy, w, gx
      const dnnl::convolution_backward_data::desc desc(algo, any_x(g), any_w(g), any_y(g), s.strides, s.dilates,
                                                       s.pad_l, s.pad_r);
      const dnnl::convolution_backward_data::primitive_desc pd(desc, user_scratchpad(), context().engine,
                                                               forward_pd(g, false));
      Builder b(3);
      std::unordered_map<int, memory> args{{DNNL_ARG_DIFF_DST, b.in(0, plain_y(g), pd.diff_dst_desc())},
                                           {DNNL_ARG_WEIGHTS, b.in(1, plain_w(g), pd.weights_desc())},
                                           {DNNL_ARG_DIFF_SRC, b.out(2, plain_x(g), pd.diff_src_desc())}};
      b.convolution(dnnl::convolution_backward_data(pd), pd.scratchpad_desc(), std::move(args));
      return b.finish();
    }
    case Direction::BackwardWeights: {  // x, gy, gw, gbias
      const auto desc = k.bias ? dnnl::convolution_backward_weights::desc(algo, any_x(g), any_w(g), plain_bias(g),
                                                                          any_y(g), s.strides, s.dilates, s.pad_l,
                                                                          s.pad_r)
                               : dnnl::convolution_backward_weights::desc(algo, any_x(g), any_w(g), any_y(g),
                                                                          s.strides, s.dilates, s.pad_l, s.pad_r);
      const dnnl::convolution_backward_weights::primitive_desc pd(desc, user_scratchpad(), context().engine,
                                                                  forward_pd(g, k.bias));
      Builder b(4);
      std::unordered_map<int, memory> args{{DNNL_ARG_SRC, b.in(0, plain_x(g), pd.src_desc())},
                                           {DNNL_ARG_DIFF_DST, b.in(1, plain_y(g), pd.diff_dst_desc())},
                                           {DNNL_ARG_DIFF_WEIGHTS, b.out(2, plain_w(g), pd.diff_weights_desc())}};
      if (k.bias) args.emplace(DNNL_ARG_DIFF_BIAS, b.out(3, plain_bias(g), pd.diff_bias_desc()));
      b.convolution(dnnl::convolution_backward_weights(pd), pd.scratchpad_desc(), std::move(args));
      return b.finish();
    }
  }
  throw InternalError("onednn: unknown convolution direction");
}

// The plans of the shapes in use, least recently used evicted first. A model
// has a handful of convolutions, each with three directions: a linear scan
// over a few dozen keys costs less than hashing a geometry would save.
class PlanCache {
 public:
  std::shared_ptr<Plan> get(const Key& k) {
    std::lock_guard lock(mu_);
    ++clock_;
    for (auto& e : entries_)
      if (e.key == k) {
        e.last_use = clock_;
        return e.plan;
      }
    std::shared_ptr<Plan> plan;
    try {
      plan = make_plan(k);
    } catch (const dnnl::error& e) {
      throw CompileError(fmt::format("oneDNN could not set up the {} pass of {} (bias: {}, {} threads): {} (status {})",
                                     name(k.dir), describe(k.g), k.bias ? "yes" : "no", k.threads, e.what(),
                                     static_cast<int>(e.status)));
    }
    if (entries_.size() >= kCapacity) {
      auto oldest = std::min_element(entries_.begin(), entries_.end(),
                                     [](const Entry& a, const Entry& b) { return a.last_use < b.last_use; });
      entries_.erase(oldest);  // a call running it holds its own reference
    }
    entries_.push_back({k, plan, clock_});
    return plan;
  }

 private:
  static constexpr std::size_t kCapacity = 64;
  struct Entry {
    Key key;
    std::shared_ptr<Plan> plan;
    std::uint64_t last_use;
  };
  std::mutex mu_;
  std::vector<Entry> entries_;
  std::uint64_t clock_ = 0;
};

PlanCache& cache() {
  static PlanCache c;
  return c;
}

// Where the oneDNN-layout copies and the scratchpads of the running plan
// live: one buffer for all plans, since one convolution runs at a time, so a
// cached plan holds no activation-sized memory of its own. It only grows (to
// the largest plan run so far), so a repeated call allocates nothing.
class Workspace {
 public:
  std::byte* reserve(std::size_t bytes) {
    if (bytes > size_) {
      data_.reset(static_cast<std::byte*>(::operator new(bytes, std::align_val_t{kAlign})));
      size_ = bytes;
    }
    return data_.get();
  }

 private:
  struct Free {
    void operator()(std::byte* p) const { ::operator delete(p, std::align_val_t{kAlign}); }
  };
  std::unique_ptr<std::byte, Free> data_;
  std::size_t size_ = 0;
};

// One convolution at a time: the workspace and the plans' memory objects serve
// one call, the stream is the process's only one, and each call already
// spreads over all the threads tessel is allowed. Guards the workspace too.
struct Execution {
  std::mutex mu;
  Workspace workspace;
};

Execution& execution() {
  static Execution e;
  return e;
}

// As many threads as tessel's own kernels use; one inside a parallel_for chunk,
// where tessel runs nested loops inline too. OpenMP's count is per calling
// thread, so it is checked on every call.
int use_threads() {
  const int n = in_parallel_region() ? 1 : num_threads();
  if (omp_get_max_threads() != n) omp_set_num_threads(n);
  return n;
}

void run(Direction dir, const ConvGeometry& g, bool bias, std::initializer_list<const void*> buffers) {
  check(g);
  const Key key{g, dir, bias, use_threads()};
  const std::shared_ptr<Plan> plan = cache().get(key);
  Execution& ex = execution();
  std::lock_guard lock(ex.mu);
  try {
    std::byte* base = ex.workspace.reserve(plan->workspace_bytes);
    for (const Placed& p : plan->placed) p.mem.set_data_handle(base + p.offset);
    std::size_t slot = 0;
    for (const void* p : buffers) {
      // Inputs are never written: oneDNN's handles are just not const-qualified.
      if (plan->user[slot]) plan->user[slot].set_data_handle(const_cast<void*>(p));
      ++slot;
    }
    dnnl::stream& stream = context().stream;
    for (Step& s : plan->steps) s.primitive.execute(stream, s.args);
    stream.wait();
  } catch (const dnnl::error& e) {
    throw InternalError(fmt::format("oneDNN failed running the {} pass of {} (bias: {}): {} (status {})", name(dir),
                                    describe(g), bias ? "yes" : "no", e.what(), static_cast<int>(e.status)));
  }
}

void require(const void* p, const char* what, Direction dir, const ConvGeometry& g) {
  if (!p) throw InternalError(fmt::format("onednn: {} of the {} pass of {} is null", what, name(dir), describe(g)));
}

}  // namespace

bool available() { return true; }

void conv_forward(const ConvGeometry& g, const float* x, const float* w, const float* bias, float* y) {
  const auto dir = Direction::Forward;
  require(x, "x", dir, g), require(w, "w", dir, g), require(y, "y", dir, g);
  run(dir, g, bias != nullptr, {x, w, bias, y});
}

void conv_backward_data(const ConvGeometry& g, const float* gy, const float* w, float* gx) {
  const auto dir = Direction::BackwardData;
  require(gy, "gy", dir, g), require(w, "w", dir, g), require(gx, "gx", dir, g);
  run(dir, g, false, {gy, w, gx});
}

void conv_backward_weights(const ConvGeometry& g, const float* x, const float* gy, float* gw, float* gbias) {
  const auto dir = Direction::BackwardWeights;
  require(x, "x", dir, g), require(gy, "gy", dir, g), require(gw, "gw", dir, g);
  run(dir, g, gbias != nullptr, {x, gy, gw, gbias});
}

#else  // !TESSEL_HAS_ONEDNN

namespace {
[[noreturn]] void not_built(const char* what) {
  throw InternalError(std::string("onednn::") + what +
                      ": this build of tessel has no oneDNN (install libdnnl-dev and reconfigure); callers check "
                      "onednn::available() first");
}
}  // namespace

bool available() { return false; }

void conv_forward(const ConvGeometry&, const float*, const float*, const float*, float*) {
  not_built("conv_forward");
}

void conv_backward_data(const ConvGeometry&, const float*, const float*, float*) { not_built("conv_backward_data"); }

void conv_backward_weights(const ConvGeometry&, const float*, const float*, float*, float*) {
  not_built("conv_backward_weights");
}

#endif  // TESSEL_HAS_ONEDNN

}  // namespace tessel::onednn
