// The models of the AOT tests, shared by the build-time generator and the
// programs that run the exported kernels: kernels depend on the structure and
// the shapes, so both sides must build exactly these graphs, in this order.
#pragma once

#include "dsl/nn/symbolic.h"
#include "dsl/tessel.h"
#include "dsl/train/optimizer.h"

namespace aot_models {

using namespace tessel;

// The chapter MLP: 20 -> 256 -> ReLU -> 10, parameters as symbols.
inline auto mlp_expr() { return relu(param<"X"> % param<"W1"> + param<"b1">) % param<"W2"> + param<"b2">; }
inline nn::SymbolicOptions mlp_options() { return {.widths = {{"W1", 256}, {"W2", 10}}}; }
inline auto make_mlp() { return nn::symbolic(mlp_expr(), mlp_options()); }
inline Shape mlp_input_shape() { return {64, 20}; }

// A training step's kernels: forward realized (as a loop reading the loss
// does), then backward of its sum.
template <class Net>
Tensor mlp_step(Net& net, const Tensor& x) {
  Tensor y = net(x);
  y.eval();
  y.sum().backward();
  return y;
}

// One iteration of a training loop: zero_grad, forward (realized, as reading
// the loss does), backward of the outputs' sum, optimizer step.
template <class Net>
Tensor train_step(Net& net, optim::Optimizer& opt, const Tensor& x) {
  opt.zero_grad();
  Tensor y = net(x);
  y.eval();
  y.sum().backward();
  opt.step();
  return y;
}
// Enough steps to pass from the first (the optimizer creates its state) to
// the steady state.
inline constexpr int train_steps = 3;

// An elementwise chain with broadcasting, and a softmax (reductions + epilogue).
inline std::vector<Tensor> chain(const Tensor& x, const Tensor& b) {
  Tensor u = x * b + 1.0;
  Tensor v = u.tanh() * x.sigmoid();
  Tensor t = v.exp() - b;
  Tensor d = x - x.max(1, true);
  Tensor e = d.exp();
  Tensor s = e / e.sum({1}, true);
  return {t, s};
}
inline Shape chain_x_shape() { return {128, 96}; }
inline Shape chain_b_shape() { return {96}; }

}  // namespace aot_models
