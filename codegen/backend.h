// A backend realizes IR: given roots, it computes each one's value and sets
// its buffer. Backends register themselves (BackendRegistration, below), so
// backend.cpp and the DSL include none of their headers; the one for CPU
// tensors is chosen by TESSEL_BACKEND (ref | cpu) or is the best one built.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "codegen/ir.h"
#include "runtime/device.h"

namespace tessel {

/// A realization reduced to its kernel launches, to run again over new leaf
/// buffers with the same dtypes, shapes, offsets, strides and storage sharing
/// (and the same constants). Expression templates keep one per expression type
/// and leaf signature, so a repeated `relu(a * b + c) * d` builds no IR.
///
///   auto r = backend.realize_recorded(root, {a.node(), b.node()});
///   ir::BufferView y = r->run(views);   // later: views[i] replaces leaf i
class LeafReplay {
 public:
  virtual ~LeafReplay() = default;
  /// The root's value computed from `leaves` (in the order given to realize_recorded).
  virtual ir::BufferView run(const ir::BufferView* const* leaves) const = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  /// Computes every root (and, when `keep_grad_values`, caches the values of
  /// nodes that carry gradients, which backward reads) and sets their buffers.
  virtual void realize(const std::vector<ir::NodePtr>& roots, bool keep_grad_values) = 0;
  /// realize({root}, false), then, where the backend can, the launches it made
  /// as a replay over `leaves` (realized nodes of root's DAG). Null when the
  /// realization was not a sequence of kernels reading only those leaves.
  virtual std::unique_ptr<LeafReplay> realize_recorded(const ir::NodePtr& root, const std::vector<ir::NodePtr>& leaves) {
    (void)leaves;
    realize({root}, false);
    return nullptr;
  }
  /// realize(values, false), writing value i straight into `dsts[i]` where the
  /// backend can (an in-place update, `w -= lr * g`, computed into w's memory
  /// with no copy). A value left in memory of its own (its buffer is not
  /// dsts[i]) is for the caller to copy; the default leaves them all so.
  virtual void realize_into(const std::vector<ir::NodePtr>& values, const std::vector<ir::BufferView>& dsts) {
    (void)dsts;
    realize(values, false);
  }
  /// Writes the realized view `src` into `dst` (views of shape `s` and dtype
  /// `t` in this backend's memory; dst has no elements sharing memory): the
  /// memory side of in-place writes (x += 1, x[0] = 42, optimizer steps).
  /// Overlapping views are fine. The default copies host memory.
  virtual void copy_into(const ir::BufferView& dst, const ir::BufferView& src, DType t, const Shape& s);
  /// A dense copy of the realized view `v` (dtype t, shape s) that lives on
  /// `from`, placed on `to`; one of the two is this backend's device. The
  /// default copies host memory to host memory.
  virtual ir::BufferView transfer(const ir::BufferView& v, DType t, const Shape& s, Device from, Device to);
  /// False for a backend that allocates results without computing them (an
  /// ahead-of-time trace): code that reads a value back to decide something
  /// -- a bounds check of computed indices -- must not read there.
  virtual bool computes_values() const { return true; }
};

/// The plain interpreter: the oracle every compiled result is tested against.
Backend& ref_backend();

/// How often the ref interpreter computed anything in this process: a test
/// that must evaluate nothing (an AOT export's trace) checks it stays put.
struct RefStats {
  std::uint64_t realizations = 0;  // realize() calls (compiled backends' fallbacks included)
};
RefStats ref_stats();
namespace detail {
void count_ref_realization();  // the interpreter's one hook
}

/// Dense host memory (contiguous strides) for a value of this dtype and shape.
ir::BufferView host_dense(DType t, const Shape& s);

/// `n` evaluated by the ref interpreter over its arguments' values -- the
/// compiled backends' fallback. It runs on a clone over leaves holding those
/// values, so the real node keeps its laziness.
ir::BufferView eval_with_ref(const ir::Node& n, const std::vector<ir::BufferView>& args);

/// A backend as it registers itself: its name, the kind of device whose
/// values it computes, its rank among the backends of that kind (the highest
/// is the default) and how to get its instance for device `index`.
struct BackendInfo {
  std::string_view name;  // what TESSEL_BACKEND names: "ref", "cpu", ...
  Device::Kind device = Device::Kind::cpu;
  int rank = 0;
  Backend& (*get)(int index) = nullptr;
};
/// Adds a backend to the registry (BackendRegistration calls it).
void register_backend(const BackendInfo& info);

/// Registers a backend while the program starts, from a namespace-scope
/// object in the backend's own .cpp:
///
///   const BackendRegistration registration{{"cpu", Device::Kind::cpu, 1, [](int) -> Backend& { return instance(); }}};
///
/// A static archive member that nothing refers to is left out of a program,
/// its registration with it: each backend's .cpp also has an anchor,
///
///   TESSEL_BACKEND_ANCHOR(cpu)
///
/// an empty function that the registry calls through link_backends()
/// (codegen/backends_linked.cpp), so the object and its registration stay.
struct BackendRegistration {
  explicit BackendRegistration(const BackendInfo& info) { register_backend(info); }
};
#define TESSEL_BACKEND_ANCHOR(name) \
  extern "C" void tessel_backend_anchor_##name() {}
namespace detail {
void link_backends();  // calls every backend's anchor (backends_linked.cpp)
}

/// The backend for CPU tensors: the registered CPU backend TESSEL_BACKEND
/// names, else the highest-ranked one.
Backend& cpu_backend();
/// The backend that computes values living on `d`: cpu_backend() for the
/// CPU, the highest-ranked backend of that device kind (the CUDA backend of
/// that GPU for gpu(i)). Realization, in-place writes and transfers go
/// through it, so the DSL names no concrete backend.
///
///   backend_for(x.device()).realize({x.node()}, false);
Backend& backend_for(Device d);

/// A dense copy of the realized view `v` (on `from`) placed on `to`, by the
/// backend of whichever side is not the CPU.
///
///   ir::BufferView on_gpu = transfer(x.buffer(), x.dtype(), x.shape(), cpu(), gpu(0));
ir::BufferView transfer(const ir::BufferView& v, DType t, const Shape& s, Device from, Device to);

/// Makes `b` the CPU backend for this thread's scope (tests compare backends).
struct BackendOverride {
  explicit BackendOverride(Backend& b);
  ~BackendOverride();
  BackendOverride(const BackendOverride&) = delete;
  BackendOverride& operator=(const BackendOverride&) = delete;

 private:
  Backend* prev_;
};

}  // namespace tessel
