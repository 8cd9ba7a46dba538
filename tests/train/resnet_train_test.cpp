// ResNet (samples/resnet): its state dict is PyTorch's key for key, and it
// learns Fashion-MNIST: a short training run brings the loss well below its
// initial ~2.3 and eval mode (running statistics) classifies held-out images.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "dsl/data/dataloader.h"
#include "dsl/data/fashion_mnist.h"
#include "dsl/tessel.h"
#include "dsl/train/optimizer.h"
#include "samples/resnet/resnet_model.h"

using namespace tessel;
namespace fs = std::filesystem;

namespace {

// Bounds for the training run below, with margin over what it measured on the CPU
// (deterministic there: first loss 2.34, last-20 mean 0.569, accuracy 0.772;
// about 30 s on 2 cores).
constexpr double kLossBound = 0.8;
constexpr double kAccuracyBound = 0.68;

bool have_fashion_mnist() {
  return fs::exists(data::fashion_mnist_dir() / "train-images-idx3-ubyte.gz") &&
         fs::exists(data::fashion_mnist_dir() / "t10k-images-idx3-ubyte.gz");
}

}  // namespace

TEST_CASE("ResNet's state_dict has the torch.nn model's keys in order", "[resnet]") {
  // print(list(net.state_dict())) for the same model in torch.nn (D2L's Residual:
  // conv1, conv2, conv3 when the shape changes, bn1, bn2).
  const std::vector<std::string> expected = {
      "0.0.weight", "0.0.bias",
      "0.1.weight", "0.1.bias", "0.1.running_mean", "0.1.running_var", "0.1.num_batches_tracked",
      "1.0.conv1.weight", "1.0.conv1.bias", "1.0.conv2.weight", "1.0.conv2.bias",
      "1.0.bn1.weight", "1.0.bn1.bias", "1.0.bn1.running_mean", "1.0.bn1.running_var",
      "1.0.bn1.num_batches_tracked",
      "1.0.bn2.weight", "1.0.bn2.bias", "1.0.bn2.running_mean", "1.0.bn2.running_var",
      "1.0.bn2.num_batches_tracked",
      "2.0.conv1.weight", "2.0.conv1.bias", "2.0.conv2.weight", "2.0.conv2.bias",
      "2.0.conv3.weight", "2.0.conv3.bias",
      "2.0.bn1.weight", "2.0.bn1.bias", "2.0.bn1.running_mean", "2.0.bn1.running_var",
      "2.0.bn1.num_batches_tracked",
      "2.0.bn2.weight", "2.0.bn2.bias", "2.0.bn2.running_mean", "2.0.bn2.running_var",
      "2.0.bn2.num_batches_tracked",
      "3.0.conv1.weight", "3.0.conv1.bias", "3.0.conv2.weight", "3.0.conv2.bias",
      "3.0.conv3.weight", "3.0.conv3.bias",
      "3.0.bn1.weight", "3.0.bn1.bias", "3.0.bn1.running_mean", "3.0.bn1.running_var",
      "3.0.bn1.num_batches_tracked",
      "3.0.bn2.weight", "3.0.bn2.bias", "3.0.bn2.running_mean", "3.0.bn2.running_var",
      "3.0.bn2.num_batches_tracked",
      "6.weight", "6.bias",
  };
  auto sd = resnet::make_resnet()->state_dict();
  CHECK(sd.keys() == expected);
  CHECK(sd["0.0.weight"].shape() == Shape{32, 1, 3, 3});
  CHECK(sd["1.0.conv1.weight"].shape() == Shape{32, 32, 3, 3});
  CHECK(sd["2.0.conv1.weight"].shape() == Shape{64, 32, 3, 3});
  CHECK(sd["2.0.conv3.weight"].shape() == Shape{64, 32, 1, 1});
  CHECK(sd["3.0.conv2.weight"].shape() == Shape{128, 128, 3, 3});
  CHECK(sd["3.0.conv3.weight"].shape() == Shape{128, 64, 1, 1});
  CHECK(sd["3.0.bn2.running_var"].shape() == Shape{128});
  CHECK(sd["6.weight"].shape() == Shape{10, 128});
  CHECK(sd["1.0.bn1.num_batches_tracked"].dtype() == DType::i64);
  CHECK(sd["1.0.bn1.num_batches_tracked"].dim() == 0);

  SECTION("two blocks per stage: the second block of a stage has no shortcut convolution") {
    auto sd2 = resnet::make_resnet({.blocks_per_stage = 2})->state_dict();
    CHECK(sd2.size() == expected.size() + 3 * 14);
    CHECK(sd2.contains("2.1.conv2.weight"));
    CHECK_FALSE(sd2.contains("2.1.conv3.weight"));
    CHECK(sd2["2.1.conv1.weight"].shape() == Shape{64, 64, 3, 3});
  }
}

TEST_CASE("ResNet learns Fashion-MNIST in 200 steps", "[resnet][train]") {
  if (!have_fashion_mnist()) {
    FAIL("Fashion-MNIST not installed; scripts/setup-deps.sh installs it (Debian's dataset-fashion-mnist)");
  }
  constexpr int64_t kTrain = 4096, kTest = 1000, kBatch = 32, kSteps = 200, kTail = 20;
  manual_seed(0);
  auto train_set = data::load_fashion_mnist(true);
  auto test_set = data::load_fashion_mnist(false);
  data::DataLoader loader(train_set.X.narrow(0, 0, kTrain), train_set.y.narrow(0, 0, kTrain),
                          {.batch_size = kBatch, .shuffle = true, .drop_last = true, .seed = 0});
  auto net = resnet::make_resnet();
  optim::SGD opt(net->parameters(), {.lr = 0.05, .momentum = 0.9});

  net->train();
  std::vector<double> losses;
  while (static_cast<int64_t>(losses.size()) < kSteps) {
    for (auto& [X, y] : loader.epoch()) {
      Tensor loss = cross_entropy(net(X), y);
      opt.zero_grad();
      loss.backward();
      opt.step();
      losses.push_back(loss.item<double>());
      if (static_cast<int64_t>(losses.size()) == kSteps) break;
    }
  }
  double tail = 0;
  for (int64_t i = kSteps - kTail; i < kSteps; ++i) tail += losses[static_cast<size_t>(i)];
  tail /= kTail;
  INFO("first loss " << losses.front() << ", mean of the last " << kTail << " losses " << tail);
  CHECK(losses.front() > 1.9);  // about ln 10 from an untrained net
  CHECK(tail < kLossBound);

  // Every batch norm, nested in the blocks too, counted every step.
  auto sd = net->state_dict();
  CHECK(sd["0.1.num_batches_tracked"].item<int64_t>() == kSteps);
  CHECK(sd["3.0.bn2.num_batches_tracked"].item<int64_t>() == kSteps);

  NoGradGuard g;
  net->eval();
  Tensor logits = net(test_set.X.narrow(0, 0, kTest));
  double acc = (logits.argmax(1) == test_set.y.narrow(0, 0, kTest)).to(DType::f32).mean().item<double>();
  INFO("eval-mode accuracy on " << kTest << " test images: " << acc);
  CHECK(acc > kAccuracyBound);
}
