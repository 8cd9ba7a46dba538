// A small ResNet as D2L's chapter "Residual Networks (ResNet)" builds it,
// sized for 28x28 Fashion-MNIST images on a CPU; shared by the sample
// (resnet.cpp), its training test (tests/train) and the PyTorch interop test
// (tests/interop).
//
//   Residual   D2L's residual block: conv3x3 -> BatchNorm2d -> ReLU -> conv3x3
//              -> BatchNorm2d, plus the input (through a 1x1 convolution with
//              the block's stride when the shape changes), then ReLU.
//   ResNet     nn::Sequential(
//                0  Sequential(Conv2d(1, 32, 3, padding 1), BatchNorm2d(32), ReLU(),
//                              MaxPool2d(3, stride 2, padding 1))                 28x28 -> 14x14
//                1  Sequential(Residual(32, 32))                                         14x14
//                2  Sequential(Residual(32, 64, use_1x1conv, stride 2))                   7x7
//                3  Sequential(Residual(64, 128, use_1x1conv, stride 2))                  4x4
//                4  AdaptiveAvgPool2d(1), 5  Flatten(), 6  Linear(128, 10))
//
// The stem is D2L's b1 (a convolution, batch norm, ReLU and a 3x3 max pool
// with stride 2) with a 3x3 convolution instead of 7x7/stride 2: the inputs
// are Fashion-MNIST's 28x28 images as they are (D2L resizes them to 96x96
// for its ResNet-18; this network is narrower and shallower instead, sized
// so that 0.90 test accuracy takes minutes on a 2-core CPU).
//
// A block registers conv1, conv2, conv3 (when it has one), bn1, bn2 in D2L's
// order, so the state-dict keys are those of the same torch.nn model:
// 0.0.weight, 0.0.bias, 0.1.weight, ... 1.0.conv1.weight, ... 2.0.conv3.bias,
// 2.0.bn1.weight, ... 6.weight, 6.bias.
//
//   auto net = resnet::make_resnet();          // one residual block per stage
//   Tensor logits = net(X);                    // X [N, 1, 28, 28] -> [N, 10]
#pragma once

#include <array>
#include <cstdint>
#include <optional>

#include "dsl/nn/batch_norm.h"
#include "dsl/nn/conv.h"
#include "dsl/nn/pooling.h"
#include "dsl/tessel.h"

namespace resnet {

/// D2L's Residual(input_channels, num_channels, use_1x1conv, strides).
struct ResidualImpl : tessel::nn::Module {
  tessel::nn::Conv2d conv1, conv2;
  std::optional<tessel::nn::Conv2d> conv3;  // the shortcut's 1x1 convolution, when the shape changes
  tessel::nn::BatchNorm2d bn1, bn2;

  ResidualImpl(int64_t input_channels, int64_t num_channels, bool use_1x1conv = false, int64_t strides = 1)
      : Module("Residual"),
        conv1(input_channels, num_channels, 3, {.stride = strides, .padding = 1}),
        conv2(num_channels, num_channels, 3, {.padding = 1}),
        bn1(num_channels),
        bn2(num_channels) {
    register_module("conv1", conv1);
    register_module("conv2", conv2);
    if (use_1x1conv) {
      conv3.emplace(input_channels, num_channels, 1, tessel::Conv2dOptions{.stride = strides});
      register_module("conv3", *conv3);
    }
    register_module("bn1", bn1);
    register_module("bn2", bn2);
  }

  tessel::Tensor forward(const tessel::Tensor& X) override {
    tessel::Tensor Y = tessel::relu(bn1(conv1(X)));
    Y = bn2(conv2(Y));
    return tessel::relu(Y + (conv3 ? (*conv3)(X) : X));
  }
};
TESSEL_MODULE(Residual);

/// D2L's resnet_block: num_residuals blocks; the first halves the height and
/// width and changes the channels (through the 1x1 shortcut) unless it is the
/// first stage's.
inline tessel::nn::Sequential resnet_block(int64_t input_channels, int64_t num_channels, int num_residuals,
                                           bool first_block = false) {
  tessel::nn::Sequential blk;
  for (int i = 0; i < num_residuals; ++i) {
    if (i == 0 && !first_block) blk->push_back(Residual(input_channels, num_channels, true, 2));
    else blk->push_back(Residual(num_channels, num_channels));
  }
  return blk;
}

/// The three stages' widths (the stem's is the first stage's), and residual
/// blocks per stage (a stage's blocks after its first are Residual(c, c)).
struct Config {
  std::array<int64_t, 3> channels{32, 64, 128};
  int blocks_per_stage = 1;
};

/// The ResNet above for [N, 1, 28, 28] inputs and 10 classes.
inline tessel::nn::Sequential make_resnet(const Config& c = {}) {
  namespace nn = tessel::nn;
  auto [c1, c2, c3] = c.channels;
  return nn::Sequential(nn::Sequential(nn::Conv2d(1, c1, 3, {.padding = 1}), nn::BatchNorm2d(c1), nn::ReLU(),
                                       nn::MaxPool2d(3, {.stride = 2, .padding = 1})),
                        resnet_block(c1, c1, c.blocks_per_stage, /*first_block=*/true),
                        resnet_block(c1, c2, c.blocks_per_stage),
                        resnet_block(c2, c3, c.blocks_per_stage),
                        nn::AdaptiveAvgPool2d(1), nn::Flatten(), nn::Linear(c3, 10));
}

}  // namespace resnet
