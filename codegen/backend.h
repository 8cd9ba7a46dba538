// A backend realizes IR: given roots, it computes each one's value and sets
// its buffer. The ref interpreter is always there; compiled backends register
// themselves and are chosen by TESSEL_BACKEND (ref | cpu | cuda) or by default.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "codegen/ir.h"

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

/// The backend for CPU tensors: TESSEL_BACKEND, else the best one built.
Backend& cpu_backend();
/// Installs the compiled CPU backend (called by the JIT at start-up).
void register_cpu_backend(Backend* b);
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
