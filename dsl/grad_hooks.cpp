#include "dsl/grad_hooks.h"

#include <fmt/format.h>

#include <atomic>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace tessel::autograd {

namespace {

struct Entry {
  uint64_t id;
  std::weak_ptr<TensorImpl> leaf;  // an address reused by a later tensor is not this one
  PostAccumulateGradHook fn;
};

struct Registry {
  std::mutex mu;
  std::unordered_map<const TensorImpl*, std::vector<Entry>> hooks;
  std::atomic<size_t> count{0};
  uint64_t next_id = 1;
};

Registry& registry() {
  static auto* r = new Registry;  // never destroyed: backward may run during exit
  return *r;
}

thread_local int backward_depth = 0;
thread_local std::vector<std::function<void()>> queued;

}  // namespace

void HookHandle::remove() {
  if (!id_) return;
  Registry& r = registry();
  std::lock_guard<std::mutex> l(r.mu);
  for (auto it = r.hooks.begin(); it != r.hooks.end(); ++it) {
    auto& v = it->second;
    auto e = std::find_if(v.begin(), v.end(), [&](const Entry& x) { return x.id == id_; });
    if (e == v.end()) continue;
    v.erase(e);
    r.count--;
    if (v.empty()) r.hooks.erase(it);
    break;
  }
  id_ = 0;
}

HookHandle register_post_accumulate_grad_hook(const Tensor& leaf, PostAccumulateGradHook hook) {
  if (!leaf.defined() || !leaf.requires_grad() || !leaf.is_leaf())
    throw ValueError("register_post_accumulate_grad_hook: the tensor must be a leaf that requires grad (a parameter, "
                     "or x.requires_grad_()); backward accumulates gradients into leaves only");
  if (!hook) throw ValueError("register_post_accumulate_grad_hook: the hook is empty");
  Registry& r = registry();
  std::lock_guard<std::mutex> l(r.mu);
  const TensorImpl* key = leaf.impl();
  auto& v = r.hooks[key];
  // Entries of a dead tensor that had this address are dropped first.
  std::erase_if(v, [&](const Entry& e) {
    bool dead = e.leaf.expired() || e.leaf.lock().get() != key;
    if (dead) r.count--;
    return dead;
  });
  uint64_t id = r.next_id++;
  v.push_back({id, leaf.impl_ptr(), std::move(hook)});
  r.count++;
  return HookHandle(id);
}

void queue_callback(std::function<void()> fn) {
  if (backward_depth == 0)
    throw ValueError("queue_callback: no backward() is running on this thread; call it from a gradient hook");
  queued.push_back(std::move(fn));
}

namespace detail {

bool has_post_accumulate_grad_hooks(const TensorImpl* leaf) {
  Registry& r = registry();
  if (r.count.load(std::memory_order_relaxed) == 0) return false;
  std::lock_guard<std::mutex> l(r.mu);
  auto it = r.hooks.find(leaf);
  if (it == r.hooks.end()) return false;
  for (const Entry& e : it->second)
    if (e.leaf.lock().get() == leaf) return true;
  return false;
}

void run_post_accumulate_grad_hooks(const std::shared_ptr<TensorImpl>& leaf) {
  std::vector<PostAccumulateGradHook> fns;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> l(r.mu);
    auto it = r.hooks.find(leaf.get());
    if (it == r.hooks.end()) return;
    for (const Entry& e : it->second)
      if (e.leaf.lock() == leaf) fns.push_back(e.fn);
  }
  Tensor t(leaf);
  for (auto& f : fns) f(t);  // outside the lock: a hook may register or remove hooks
}

void backward_enter() { ++backward_depth; }

void backward_exit(bool ok) {
  if (--backward_depth > 0) return;
  std::vector<std::function<void()>> fns = std::move(queued);
  queued.clear();
  if (!ok) return;  // backward failed: its error is what the caller sees
  for (auto& f : fns) f();
}

}  // namespace detail

}  // namespace tessel::autograd
