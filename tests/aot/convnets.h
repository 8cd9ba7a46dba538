// The convolutional networks of the AOT tests -- D2L's LeNet in both variants
// (samples/lenet/lenet_model.h) and the ResNet sample
// (samples/resnet/resnet_model.h) -- and the steps run on them, shared by the
// build-time generator (convnet_gen.cpp) and the program that links its
// kernels (convnet_run_test.cpp): the kernels depend on the structure, the
// shapes and the order of realizations, so both sides run exactly these steps
// on a batch of Fashion-MNIST's shape.
#pragma once

#include <fmt/format.h>

#include <optional>
#include <string>
#include <string_view>

#include "dsl/tessel.h"
#include "dsl/train/optimizer.h"
#include "samples/lenet/lenet_model.h"
#include "samples/resnet/resnet_model.h"

namespace aot_convnets {

using namespace tessel;

struct Spec {
  std::string_view name;  // the generator's --model
  int64_t batch;          // images per batch, [batch, 1, 28, 28]
  int train_steps;        // SGD steps the run compares with the JIT's
  // The training loop's optimizer (tessel::aot::parse_optimizer's text); the
  // CMake export passes the same text and the run checks it. Only which terms
  // are on (momentum, weight decay, Nesterov) shapes the kernels; the rates
  // are launch arguments.
  std::string_view optimizer;
};

// LeNet: plain SGD at the relu-bn sample's rate, 0.1, for both variants (on
// one batch of 32 the sigmoid sample's 0.9, D2L's for batches of 256,
// overshoots: the loss goes up and down). ResNet: the sample's SGD with
// momentum 0.9 and weight decay 5e-4, on a batch of 8 (its convolutions are
// the costly part of the test).
inline constexpr Spec specs[] = {
    {"lenet-sigmoid", 32, 5, "sgd:lr=0.1"},
    {"lenet-relu-bn", 32, 5, "sgd:lr=0.1"},
    {"resnet", 8, 3, "sgd:lr=0.05,momentum=0.9,weight_decay=0.0005"},
};

inline const Spec& spec(std::string_view name) {
  for (const Spec& s : specs)
    if (s.name == name) return s;
  throw ValueError(fmt::format("unknown convnet '{}': lenet-sigmoid, lenet-relu-bn or resnet", name));
}

// Seed of the weights and of the batch, on both sides.
inline constexpr uint64_t seed = 11;

// The model as its sample builds it, before any initialization of its own
// (the layers' constructors draw PyTorch's default init).
inline nn::Sequential make_model(std::string_view name) {
  if (name == "lenet-sigmoid") return lenet::make_lenet(lenet::Variant::sigmoid);
  if (name == "lenet-relu-bn") return lenet::make_lenet(lenet::Variant::relu_bn);
  if (name == "resnet") return resnet::make_resnet();
  throw ValueError(fmt::format("unknown convnet '{}'", name));
}

// The model with its sample's first weights (LeNet: D2L's Xavier-uniform
// init; ResNet: the layers' defaults), drawn from the current seed, realized.
inline nn::Sequential make_initialized(std::string_view name) {
  nn::Sequential net = make_model(name);
  if (name.starts_with("lenet")) net->apply(lenet::init_xavier);
  for (auto& [k, t] : net->state_dict()) t.eval();
  return net;
}

// The example batch: pixels in [0, 1) and labels in [0, 10), realized.
struct Batch {
  Tensor x, y;
};
inline Batch make_batch(const Spec& s) {
  Batch b{rand({s.batch, 1, 28, 28}), randint(0, 10, {s.batch})};
  realize({b.x, b.y});
  return b;
}

// Inference as a deployment runs it: eval mode (running statistics), no
// autograd. Logits [batch, 10].
inline Tensor eval_logits(nn::Sequential& net, const Tensor& x) {
  NoGradGuard g;
  net->eval();
  Tensor logits = net(x);
  logits.eval();
  return logits;
}

// The loss of a training step: the train-mode forward (batch statistics;
// running ones updated in place) and cross_entropy, the batch's mean.
inline Tensor train_loss(nn::Sequential& net, const Tensor& x, const Tensor& y) { return cross_entropy(net(x), y); }

// One iteration of the training loop: zero_grad, the loss (realized: the
// loop reads it), backward, the optimizer's step. Returns the loss.
inline Tensor train_step(nn::Sequential& net, optim::Optimizer& opt, const Tensor& x, const Tensor& y) {
  net->train();
  opt.zero_grad();
  Tensor loss = train_loss(net, x, y);
  loss.eval();
  loss.backward();
  opt.step();
  return loss;
}

}  // namespace aot_convnets
