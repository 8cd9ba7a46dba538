// Deferred expressions: converting an expression template to a Tensor can
// skip building IR. A cache owned by the expression *type* maps the leaves'
// signature (dtypes, shapes, offsets, strides, storage sharing, the numbers'
// values, the backend) to the launches the backend made the first time; on a
// hit the tensor keeps the typed tree and a reference to those launches, so
//
//   Tensor y = relu(a * b + c) * d;   // a signature compare, no IR
//   y.eval();                         // the recorded kernel launch
//
// The IR is still built the moment something needs it (shape(), another op
// on y, an in-place write), so fusion across statements is unchanged. A miss
// builds the IR at once (shape errors are raised where the op is written, as
// on the IR path) and records its launches when the tensor is evaluated.
// Only trees over realized CPU tensors that need no gradient are deferred.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "codegen/backend.h"
#include "codegen/ir.h"

namespace tessel {

class Tensor;
struct TensorImpl;

/// A value waiting in a TensorImpl (TensorImpl::deferred).
class DeferredExpr {
 public:
  virtual ~DeferredExpr() = default;
  /// The value's IR, built now if it was not (no gradient: deferral requires none).
  virtual ir::NodePtr lower() const = 0;
  /// Computes the value into `out` (sets out.node); false when it must be
  /// lowered and realized the ordinary way instead.
  virtual bool compute(TensorImpl& out) const = 0;
  /// Whether some leaf's memory is `s` (an in-place write to it realizes this first).
  virtual bool reads(const Storage* s) const = 0;
};

/// Replaces a deferred value by its IR (no-op otherwise).
void materialize(TensorImpl& impl);

/// One expression type's recorded launches, by leaf signature.
class ExprCache {
 public:
  /// Up to this many tensor leaves take the fast path.
  static constexpr size_t kMaxLeaves = 16;
  /// Signatures kept per expression type; later ones take the IR path.
  static constexpr size_t kMaxEntries = 16;

  struct Entry {
    std::vector<int64_t> sig;            // sig[0]: the backend whose launches these are
    std::unique_ptr<LeafReplay> replay;  // null: this signature is not replayable
    DType dtype = DType::f32;
    Shape shape;
  };

  /// The signature of realized CPU leaves `tensors` and numbers `numbers`
  /// (kind, exact bits) under the current backend, into `sig`; false when a
  /// leaf is not realized CPU memory.
  static bool signature(std::span<const Tensor* const> tensors, std::span<const int64_t> numbers,
                        std::vector<int64_t>& sig);
  /// The entry recorded for `sig`, or null. Never blocks.
  const Entry* find(const std::vector<int64_t>& sig) const;
  bool full() const { return published_.load(std::memory_order_acquire) >= kMaxEntries; }

  /// A tensor for `root` (IR just built from the tree) that records the
  /// launches of its first evaluation under `sig`.
  Tensor recording(std::vector<int64_t> sig, const Tensor& root, std::span<const Tensor* const> tensors);
  /// Realizes `root` through the backend and records its launches under `sig`.
  void record(std::vector<int64_t> sig, const ir::NodePtr& root, const std::vector<ir::NodePtr>& leaves);

 private:
  // Append-only: readers scan the published prefix without the lock (an
  // entry never changes once `published_` counts it); writers take `mu_`.
  std::mutex mu_;
  std::unique_ptr<Entry> entries_[kMaxEntries];
  std::atomic<size_t> published_{0};
};

/// A deferred value whose launches are recorded: the leaves' nodes as they
/// were when the tree became a tensor, and the entry to run over them.
class ReplayDeferred : public DeferredExpr {
 public:
  /// Takes the leaves' nodes (moved from `leaves`).
  ReplayDeferred(const ExprCache::Entry& entry, ir::NodePtr* leaves, size_t n);
  bool compute(TensorImpl& out) const override;
  bool reads(const Storage* s) const override;

 private:
  const ExprCache::Entry& entry_;
  ir::NodePtr leaves_[ExprCache::kMaxLeaves];
  size_t num_leaves_;
};

}  // namespace tessel
