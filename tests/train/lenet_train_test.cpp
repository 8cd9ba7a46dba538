// LeNet (samples/lenet): its state dict is PyTorch's key for key, and the
// relu-bn variant learns Fashion-MNIST: a short training run brings the loss
// well below its initial ~2.3 and eval mode classifies held-out images.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "dsl/data/dataloader.h"
#include "dsl/data/fashion_mnist.h"
#include "dsl/tessel.h"
#include "dsl/train/optimizer.h"
#include "samples/lenet/lenet_model.h"

using namespace tessel;
namespace fs = std::filesystem;

namespace {

// Bounds for the training run below, with margin over what it measured on the CPU
// (deterministic there: first loss 2.84, last-20 mean 0.409, accuracy 0.785).
constexpr double kLossBound = 0.6;
constexpr double kAccuracyBound = 0.7;

// PyTorch's BatchNorm state: parameters, then buffers.
void add_bn(std::vector<std::string>& keys, int i) {
  for (const char* k : {"weight", "bias", "running_mean", "running_var", "num_batches_tracked"})
    keys.push_back(std::to_string(i) + "." + k);
}
void add_affine(std::vector<std::string>& keys, int i) {
  keys.push_back(std::to_string(i) + ".weight");
  keys.push_back(std::to_string(i) + ".bias");
}

bool have_fashion_mnist() {
  return fs::exists(data::fashion_mnist_dir() / "train-images-idx3-ubyte.gz") &&
         fs::exists(data::fashion_mnist_dir() / "t10k-images-idx3-ubyte.gz");
}

}  // namespace

TEST_CASE("LeNet's state_dict has torch.nn.Sequential's keys in order", "[lenet]") {
  SECTION("relu-bn") {
    // Conv2d, BatchNorm2d, ReLU, MaxPool2d, Conv2d, BatchNorm2d, ReLU, MaxPool2d, Flatten,
    // Linear, BatchNorm1d, ReLU, Linear, BatchNorm1d, ReLU, Linear
    std::vector<std::string> expected;
    add_affine(expected, 0);
    add_bn(expected, 1);
    add_affine(expected, 4);
    add_bn(expected, 5);
    add_affine(expected, 9);
    add_bn(expected, 10);
    add_affine(expected, 12);
    add_bn(expected, 13);
    add_affine(expected, 15);
    auto sd = lenet::make_lenet(lenet::Variant::relu_bn)->state_dict();
    CHECK(sd.keys() == expected);
    CHECK(sd["0.weight"].shape() == Shape{6, 1, 5, 5});
    CHECK(sd["4.weight"].shape() == Shape{16, 6, 5, 5});
    CHECK(sd["5.running_var"].shape() == Shape{16});
    CHECK(sd["9.weight"].shape() == Shape{120, 400});
    CHECK(sd["10.running_mean"].shape() == Shape{120});
    CHECK(sd["15.weight"].shape() == Shape{10, 84});
    CHECK(sd["1.num_batches_tracked"].dtype() == DType::i64);
    CHECK(sd["1.num_batches_tracked"].dim() == 0);
  }
  SECTION("sigmoid") {
    std::vector<std::string> expected;
    for (int i : {0, 3, 7, 9, 11}) add_affine(expected, i);
    auto sd = lenet::make_lenet(lenet::Variant::sigmoid)->state_dict();
    CHECK(sd.keys() == expected);
    CHECK(sd["7.weight"].shape() == Shape{120, 400});
  }
}

TEST_CASE("relu-bn LeNet learns Fashion-MNIST in 200 steps", "[lenet][train]") {
  if (!have_fashion_mnist()) {
    FAIL("Fashion-MNIST not installed; scripts/setup-deps.sh installs it (Debian's dataset-fashion-mnist)");
  }
  constexpr int64_t kTrain = 4096, kTest = 1000, kBatch = 64, kSteps = 200, kTail = 20;
  manual_seed(0);
  auto train_set = data::load_fashion_mnist(true);
  auto test_set = data::load_fashion_mnist(false);
  data::DataLoader loader(train_set.X.narrow(0, 0, kTrain), train_set.y.narrow(0, 0, kTrain),
                          {.batch_size = kBatch, .shuffle = true, .drop_last = true, .seed = 0});
  auto net = lenet::make_lenet(lenet::Variant::relu_bn);
  net->apply(lenet::init_xavier);
  optim::SGD opt(net->parameters(), {.lr = 0.1});

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

  // Running statistics now stand in for the batch's.
  auto sd = net->state_dict();
  CHECK(sd["1.num_batches_tracked"].item<int64_t>() == kSteps);

  NoGradGuard g;
  net->eval();
  Tensor logits = net(test_set.X.narrow(0, 0, kTest));
  double acc = (logits.argmax(1) == test_set.y.narrow(0, 0, kTest)).to(DType::f32).mean().item<double>();
  INFO("eval-mode accuracy on " << kTest << " test images: " << acc);
  CHECK(acc > kAccuracyBound);
}
