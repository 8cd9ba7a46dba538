// LeNet-5 as D2L's chapter "Convolutional Neural Networks" builds it, shared
// by the sample (lenet.cpp), its training test (tests/train) and the
// PyTorch interop test (tests/interop):
//
//   sigmoid  D2L's LeNet: Conv2d(1, 6, 5, padding 2) -> Sigmoid -> AvgPool2d(2)
//            -> Conv2d(6, 16, 5) -> Sigmoid -> AvgPool2d(2) -> Flatten
//            -> Linear(400, 120) -> Sigmoid -> Linear(120, 84) -> Sigmoid -> Linear(84, 10)
//   relu-bn  the same layers with a BatchNorm2d / BatchNorm1d after each
//            convolution and hidden linear layer, ReLU and MaxPool2d(2)
//            (D2L's "LeNet with batch normalization", modernized).
//
// A pool's stride is its kernel size (2), as in PyTorch. Either variant is one
// nn::Sequential, so its state-dict keys are those of the same torch.nn.Sequential
// (0.weight, 0.bias, 1.weight, ... 1.num_batches_tracked, ...).
//
//   auto net = lenet::make_lenet(lenet::Variant::relu_bn);
//   net->apply(lenet::init_xavier);
//   Tensor logits = net(X);   // X [N, 1, 28, 28] -> [N, 10]
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "dsl/nn/batch_norm.h"
#include "dsl/nn/conv.h"
#include "dsl/nn/pooling.h"
#include "dsl/tessel.h"

namespace lenet {

enum class Variant { sigmoid, relu_bn };

inline std::string_view variant_name(Variant v) { return v == Variant::sigmoid ? "sigmoid" : "relu-bn"; }

inline std::optional<Variant> parse_variant(std::string_view s) {
  if (s == "sigmoid") return Variant::sigmoid;
  if (s == "relu-bn") return Variant::relu_bn;
  return std::nullopt;
}

/// LeNet for [N, 1, 28, 28] inputs and 10 classes.
inline tessel::nn::Sequential make_lenet(Variant v) {
  namespace nn = tessel::nn;
  if (v == Variant::sigmoid) {
    return nn::Sequential(nn::Conv2d(1, 6, 5, {.padding = 2}), nn::Sigmoid(),
                          nn::AvgPool2d(2),
                          nn::Conv2d(6, 16, 5), nn::Sigmoid(), nn::AvgPool2d(2),
                          nn::Flatten(),
                          nn::Linear(16 * 5 * 5, 120), nn::Sigmoid(),
                          nn::Linear(120, 84), nn::Sigmoid(),
                          nn::Linear(84, 10));
  }
  return nn::Sequential(nn::Conv2d(1, 6, 5, {.padding = 2}), nn::BatchNorm2d(6), nn::ReLU(),
                        nn::MaxPool2d(2),
                        nn::Conv2d(6, 16, 5), nn::BatchNorm2d(16), nn::ReLU(),
                        nn::MaxPool2d(2),
                        nn::Flatten(),
                        nn::Linear(16 * 5 * 5, 120), nn::BatchNorm1d(120), nn::ReLU(),
                        nn::Linear(120, 84), nn::BatchNorm1d(84), nn::ReLU(),
                        nn::Linear(84, 10));
}

/// D2L's init_cnn: Xavier-uniform weights for every convolution and linear
/// layer (biases keep PyTorch's default). Use with net->apply(init_xavier).
inline void init_xavier(tessel::nn::Module& m) {
  if (auto* conv = m.as_if<tessel::nn::Conv2dImpl>()) tessel::nn::init::xavier_uniform_(conv->weight);
  if (auto* linear = m.as_if<tessel::nn::LinearImpl>()) tessel::nn::init::xavier_uniform_(linear->weight);
}

}  // namespace lenet
