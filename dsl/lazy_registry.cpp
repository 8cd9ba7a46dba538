#include "dsl/lazy_registry.h"

#include <algorithm>
#include <mutex>
#include <vector>

#include "dsl/deferred_expr.h"
#include "dsl/tensor.h"

namespace tessel {
namespace {

struct Registry {
  std::mutex mu;
  std::vector<std::weak_ptr<TensorImpl>> pending;
  size_t prune_at = 64;
};
Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

bool reads(const ir::NodePtr& root, const Storage* s) {
  for (ir::Node* n : ir::topo_order({root}))
    if (n->realized() && n->buffer->storage.get() == s) return true;
  return false;
}

}  // namespace

namespace {
thread_local int t_defer_depth = 0;
}  // namespace

DeferPendingScope::DeferPendingScope() { ++t_defer_depth; }
DeferPendingScope::~DeferPendingScope() { --t_defer_depth; }
bool DeferPendingScope::active() { return t_defer_depth > 0; }

void register_if_lazy(const std::shared_ptr<TensorImpl>& impl) {
  if (impl && (impl->deferred || (impl->node && !impl->node->realized()))) register_pending(impl);
}

void register_pending(const std::shared_ptr<TensorImpl>& impl) {
  Registry& R = registry();
  std::lock_guard lock(R.mu);
  if (R.pending.size() >= R.prune_at) {
    std::erase_if(R.pending, [](const std::weak_ptr<TensorImpl>& w) {
      auto p = w.lock();
      return !p || (!p->deferred && (!p->node || p->node->realized()));
    });
    R.prune_at = std::max<size_t>(64, R.pending.size() * 2);
  }
  R.pending.push_back(impl);
}

std::vector<Tensor> pending_among(const ir::NodeTable& nodes) {
  std::vector<Tensor> out;
  Registry& R = registry();
  std::lock_guard lock(R.mu);
  for (auto& w : R.pending) {
    auto p = w.lock();
    if (p && !p->deferred && p->node && !p->node->realized() && nodes.find(p->node.get())) out.emplace_back(p);
  }
  return out;
}

void realize_readers_of(const std::vector<const Storage*>& storages, const ir::NodeTable& except) {
  std::vector<Tensor> todo;
  {
    Registry& R = registry();
    std::lock_guard lock(R.mu);
    for (auto& w : R.pending) {
      auto p = w.lock();
      if (!p || (p->node && except.find(p->node.get()))) continue;
      bool hit = false;
      if (p->deferred) {
        for (const Storage* s : storages) hit = hit || p->deferred->reads(s);
      } else if (p->node && !p->node->realized()) {
        for (ir::Node* n : ir::topo_order({p->node}))
          if (n->realized() && std::find(storages.begin(), storages.end(), n->buffer->storage.get()) != storages.end()) {
            hit = true;
            break;
          }
      }
      if (hit) todo.emplace_back(p);
    }
  }
  if (!todo.empty()) realize(todo);
}

void realize_readers_of(const Storage* storage) {
  std::vector<Tensor> todo;
  {
    Registry& R = registry();
    std::lock_guard lock(R.mu);
    for (auto& w : R.pending) {
      auto p = w.lock();
      if (!p) continue;
      if (p->deferred ? p->deferred->reads(storage) : p->node && !p->node->realized() && reads(p->node, storage))
        todo.emplace_back(p);
    }
  }
  if (!todo.empty()) realize(todo);
}

}  // namespace tessel
