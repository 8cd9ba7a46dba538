#include "dsl/deferred_expr.h"

#include "codegen/backend.h"
#include "codegen/builders.h"
#include "dsl/tensor.h"
#include "runtime/errors.h"

namespace tessel {

void materialize(TensorImpl& impl) {
  if (!impl.deferred) return;
  std::shared_ptr<const DeferredExpr> d = std::move(impl.deferred);
  impl.node = d->lower();
}

bool ExprCache::signature(std::span<const Tensor* const> tensors, std::span<const int64_t> numbers,
                          std::vector<int64_t>& sig) {
  if (tensors.size() > kMaxLeaves) return false;
  sig.clear();
  sig.push_back(reinterpret_cast<intptr_t>(&cpu_backend()));
  sig.push_back(static_cast<int64_t>(tensors.size()));
  const ir::BufferView* views[kMaxLeaves];
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = *tensors[i];
    if (!t.device().is_cpu()) return false;
    const ir::NodePtr& n = t.node();  // a fresh leaf node if written in place since
    if (!n->realized()) return false;
    const ir::BufferView& v = *n->buffer;
    size_t same = i;  // the first leaf over the same memory
    for (size_t j = 0; j < i; ++j)
      if (views[j]->storage == v.storage) {
        same = j;
        break;
      }
    views[i] = &v;
    sig.push_back(static_cast<int64_t>(n->dtype) | static_cast<int64_t>(n->shape.dims.size()) << 8 |
                  static_cast<int64_t>(same) << 16);
    sig.push_back(v.offset);
    sig.insert(sig.end(), n->shape.dims.begin(), n->shape.dims.end());
    sig.insert(sig.end(), v.strides.begin(), v.strides.end());
  }
  sig.insert(sig.end(), numbers.begin(), numbers.end());
  return true;
}

const ExprCache::Entry* ExprCache::find(const std::vector<int64_t>& sig) const {
  const size_t count = published_.load(std::memory_order_acquire);
  for (size_t i = 0; i < count; ++i)
    if (entries_[i]->sig == sig) return entries_[i].get();
  return nullptr;
}

void ExprCache::record(std::vector<int64_t> sig, const ir::NodePtr& root, const std::vector<ir::NodePtr>& leaves) {
  Backend& backend = cpu_backend();
  if (sig.empty() || sig[0] != reinterpret_cast<intptr_t>(&backend)) {  // the backend changed since the signature
    backend.realize({root}, false);
    return;
  }
  auto e = std::make_unique<Entry>();
  e->sig = std::move(sig);
  const std::uint64_t interpreted = ref_stats().realizations;
  e->replay = backend.realize_recorded(root, leaves);
  if (!root->realized()) throw InternalError("ExprCache: the backend's realize_recorded left the root without a value");
  // The interpreter computed part of it, e.g. kernels still compiling in the
  // background (TESSEL_JIT_ASYNC), which record nothing: a later evaluation
  // tries again rather than the signature being remembered as not replayable.
  if (!e->replay && &backend != &ref_backend() && ref_stats().realizations != interpreted) return;
  e->dtype = root->dtype;
  e->shape = root->shape;
  std::lock_guard lock(mu_);
  const size_t n = published_.load(std::memory_order_relaxed);
  for (size_t i = 0; i < n; ++i)
    if (entries_[i]->sig == e->sig) return;  // another thread recorded it meanwhile
  if (n < kMaxEntries) {
    entries_[n] = std::move(e);
    published_.store(n + 1, std::memory_order_release);
  }
}

namespace {

bool any_reads(const ir::NodePtr* leaves, size_t n, const Storage* s) {
  for (size_t i = 0; i < n; ++i)
    if (leaves[i]->buffer->storage.get() == s) return true;
  return false;
}

// The IR of a cache miss, built when the tree became a tensor; its first
// evaluation records the launches.
class RecordingDeferred final : public DeferredExpr {
 public:
  RecordingDeferred(ExprCache& cache, std::vector<int64_t> sig, ir::NodePtr root, std::vector<ir::NodePtr> leaves)
      : cache_(cache), sig_(std::move(sig)), root_(std::move(root)), leaves_(std::move(leaves)) {}
  ir::NodePtr lower() const override { return root_; }
  bool compute(TensorImpl& out) const override {
    cache_.record(sig_, root_, leaves_);
    root_->args.clear();  // no gradient: the value never needs its inputs again
    out.node = root_;
    return true;
  }
  bool reads(const Storage* s) const override { return any_reads(leaves_.data(), leaves_.size(), s); }

 private:
  ExprCache& cache_;
  std::vector<int64_t> sig_;
  ir::NodePtr root_;
  std::vector<ir::NodePtr> leaves_;
};

}  // namespace

Tensor ExprCache::recording(std::vector<int64_t> sig, const Tensor& root, std::span<const Tensor* const> tensors) {
  const std::shared_ptr<TensorImpl>& impl = root.impl_ptr();
  if (!impl->node || impl->node->realized() || impl->node->requires_grad) return root;
  std::vector<ir::NodePtr> leaves;
  leaves.reserve(tensors.size());
  for (const Tensor* t : tensors) leaves.push_back(t->node());
  impl->deferred = std::make_shared<const RecordingDeferred>(*this, std::move(sig), std::move(impl->node), std::move(leaves));
  impl->node = nullptr;
  return root;
}

ReplayDeferred::ReplayDeferred(const ExprCache::Entry& entry, ir::NodePtr* leaves, size_t n)
    : entry_(entry), num_leaves_(n) {
  for (size_t i = 0; i < n; ++i) leaves_[i] = std::move(leaves[i]);
}

bool ReplayDeferred::compute(TensorImpl& out) const {
  if (reinterpret_cast<intptr_t>(&cpu_backend()) != entry_.sig[0]) return false;  // another backend: the IR path
  const ir::BufferView* views[ExprCache::kMaxLeaves];
  for (size_t i = 0; i < num_leaves_; ++i) views[i] = &*leaves_[i]->buffer;
  out.node = ir::input(entry_.replay->run(views), entry_.dtype, entry_.shape);
  return true;
}

bool ReplayDeferred::reads(const Storage* s) const { return any_reads(leaves_, num_leaves_, s); }

}  // namespace tessel
