// Hooks into backward() (PyTorch's Tensor.register_post_accumulate_grad_hook
// and the autograd engine's queue_callback), for code that must act while
// backward is still running: DistributedDataParallel starts a bucket's
// all-reduce as soon as backward has produced every gradient in it.
//
//   auto h = autograd::register_post_accumulate_grad_hook(w, [](const Tensor& leaf) {
//     fmt::print("{} is ready\n", leaf.grad());   // leaf.grad() already holds this backward's part
//   });
//   loss.backward();   // the hook runs once, inside backward
//   h.remove();
//
// How gradients become ready one by one: backward() builds every gradient as
// IR and realizes it. With no hook registered it realizes them all at once
// (one realization, fused as the backend likes). When a leaf it reaches has a
// hook, it realizes the gradients in the order reverse-mode produces them
// (a leaf's gradient is complete once every op that consumed it in the forward
// pass was differentiated: the last layer's parameters first), one stage per
// hooked leaf, and runs that leaf's hooks before computing the next stage.
// Values two stages share are computed once (the earlier stage keeps them).
#pragma once

#include <functional>
#include <memory>

#include "dsl/tensor.h"

namespace tessel::autograd {

/// Called with the leaf after backward accumulated into leaf.grad().
using PostAccumulateGradHook = std::function<void(const Tensor& leaf)>;

/// Removes its hook on remove() (idempotent); dropping the handle keeps the hook.
class HookHandle {
 public:
  HookHandle() = default;
  explicit HookHandle(uint64_t id) : id_(id) {}
  void remove();
  uint64_t id() const { return id_; }

 private:
  uint64_t id_ = 0;
};

/// Runs `hook` inside every later backward() that reaches `leaf` (a tensor
/// that requires grad and is a leaf: a parameter, or x.requires_grad_()),
/// right after its gradient has been accumulated. Hooks on one leaf run in
/// the order they were registered; a hook that throws ends backward with its error.
HookHandle register_post_accumulate_grad_hook(const Tensor& leaf, PostAccumulateGradHook hook);

/// Runs `fn` once when the backward() now running on this thread ends (after
/// every gradient is accumulated and every hook ran); outside backward it is
/// a ValueError. What DDP uses to wait for its all-reduces before backward returns.
void queue_callback(std::function<void()> fn);

namespace detail {
// tensor.cpp's side of the hooks.
bool has_post_accumulate_grad_hooks(const TensorImpl* leaf);
void run_post_accumulate_grad_hooks(const std::shared_ptr<TensorImpl>& leaf);
/// backward() brackets itself with these; the outermost exit runs the queued callbacks.
void backward_enter();
void backward_exit(bool ok);
}  // namespace detail

}  // namespace tessel::autograd
