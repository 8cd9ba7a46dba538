// Whether new nodes record autograd history (thread-local, like PyTorch's).
#pragma once

namespace tessel {

bool grad_enabled();
void set_grad_enabled(bool on);

/// Disables gradient recording in a scope:
///   { NoGradGuard g; w.data() -= lr * w.grad(); }
struct NoGradGuard {
  NoGradGuard() : prev_(grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace tessel
