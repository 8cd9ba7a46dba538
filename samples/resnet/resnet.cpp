// A small ResNet (samples/resnet/resnet_model.h) on Fashion-MNIST, trained as
// D2L's chapter "Residual Networks (ResNet)" does (train_ch6: batch 256,
// cross-entropy, on the first GPU when there is one), with SGD momentum 0.9,
// weight decay 5e-4 and a cosine learning-rate schedule stepped every batch.
//
//   resnet [--epochs N] [--limit N] [--lr LR] [--blocks N]
//
//   --epochs   passes over the training set (default 3)
//   --limit    train on the first N training images only (a quick run)
//   --lr       peak learning rate of the cosine schedule (default 0.1)
//   --blocks   residual blocks per stage (default 1)
//
// Prints per epoch the train loss and accuracy, the test accuracy (eval mode)
// and the training throughput, then
//   final: test_accuracy=0.XXXX epochs=N blocks=1 train_seconds=S
// and saves the state_dict to resnet.params (safetensors; an atomic write).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>
#include <string_view>

#include "dsl/data/dataloader.h"
#include "dsl/data/fashion_mnist.h"
#include "dsl/io.h"
#include "dsl/tessel.h"
#include "dsl/train/lr_scheduler.h"
#include "dsl/train/optimizer.h"
#include "samples/resnet/resnet_model.h"

using namespace tessel;

namespace {

struct Args {
  int epochs = 3;
  int64_t limit = 0;  // 0: the whole training set
  double lr = 0.1;
  int blocks = 1;
};

[[noreturn]] void usage(const std::string& why) {
  if (!why.empty()) fmt::print(stderr, "resnet: {}\n", why);
  fmt::print(stderr, "usage: resnet [--epochs N] [--limit N] [--lr LR] [--blocks N]\n");
  std::exit(2);
}

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string_view flag = argv[i];
    if (flag == "-h" || flag == "--help") usage("");
    if (i + 1 >= argc) usage(fmt::format("{} needs a value", flag));
    std::string value = argv[++i];
    char* end = nullptr;
    if (flag == "--epochs" || flag == "--blocks") {
      long n = std::strtol(value.c_str(), &end, 10);
      if (*end || n <= 0) usage(fmt::format("{} wants a positive integer, got '{}'", flag, value));
      (flag == "--epochs" ? a.epochs : a.blocks) = static_cast<int>(n);
    } else if (flag == "--limit") {
      long long n = std::strtoll(value.c_str(), &end, 10);
      if (*end || n <= 0) usage(fmt::format("--limit wants a positive integer, got '{}'", value));
      a.limit = n;
    } else if (flag == "--lr") {
      double lr = std::strtod(value.c_str(), &end);
      if (*end || !(lr > 0)) usage(fmt::format("--lr wants a positive number, got '{}'", value));
      a.lr = lr;
    } else {
      usage(fmt::format("unknown option '{}'", flag));
    }
  }
  return a;
}

// Number of correct predictions in a batch.
double correct(const Tensor& logits, const Tensor& y) {
  NoGradGuard g;
  return (logits.argmax(1) == y).to(DType::f32).sum().item<double>();
}

// Accuracy of `net` in eval mode over `loader`.
double evaluate_accuracy(nn::Module& net, data::DataLoader& loader, Device dev) {
  NoGradGuard g;
  net.eval();
  double right = 0, n = 0;
  for (auto& [X, y] : loader.epoch()) {
    Tensor yd = y.to(dev);
    right += correct(net(X.to(dev)), yd);
    n += static_cast<double>(y.size(0));
  }
  return right / n;
}

}  // namespace

static int run(const Args& args) {
  manual_seed(0);

  auto train_set = data::load_fashion_mnist(true);
  auto test_set = data::load_fashion_mnist(false);
  if (args.limit > 0 && args.limit < train_set.X.size(0)) {
    train_set.X = train_set.X.narrow(0, 0, args.limit);
    train_set.y = train_set.y.narrow(0, 0, args.limit);
  }
  data::DataLoader train_loader(train_set.X, train_set.y, {.batch_size = 256, .shuffle = true, .seed = 0});
  data::DataLoader test_loader(test_set.X, test_set.y, {.batch_size = 1000});
  Device dev = num_gpus() > 0 ? try_gpu(0) : cpu();

  nn::Sequential net = resnet::make_resnet({.blocks_per_stage = args.blocks});
  net->to(dev);
  optim::SGD opt(net->parameters(), {.lr = args.lr, .momentum = 0.9, .weight_decay = 5e-4});
  optim::CosineAnnealingLR sched(opt, args.epochs * train_loader.num_batches());
  fmt::print("ResNet ({} block(s) per stage) on {}: {} train / {} test images, batch 256, "
             "SGD momentum 0.9, cosine lr from {}\n{}\n",
             args.blocks, dev, train_loader.num_examples(), test_loader.num_examples(), args.lr, net->repr());
  std::fflush(stdout);

  double train_seconds = 0, test_acc = 0;
  for (int epoch = 1; epoch <= args.epochs; ++epoch) {
    net->train();
    double total_loss = 0, right = 0, n = 0;
    auto t0 = std::chrono::steady_clock::now();
    for (auto& [Xh, yh] : train_loader.epoch()) {
      Tensor X = Xh.to(dev), y = yh.to(dev);
      Tensor logits = net(X);
      Tensor loss = cross_entropy(logits, y);
      opt.zero_grad();
      loss.backward();
      opt.step();
      sched.step();
      auto bs = static_cast<double>(y.size(0));
      total_loss += loss.item<double>() * bs;
      right += correct(logits, y);
      n += bs;
    }
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    train_seconds += seconds;
    test_acc = evaluate_accuracy(*net, test_loader, dev);
    fmt::print("epoch {:>2}: train_loss={:.4f} train_acc={:.4f} test_acc={:.4f} images/s={:.0f} time={:.1f}s\n",
               epoch, total_loss / n, right / n, test_acc, n / seconds, seconds);
    std::fflush(stdout);
  }

  std::filesystem::path ckpt = "resnet.params";
  save(net->state_dict(), ckpt);
  fmt::print("saved {}\n", ckpt.string());
  fmt::print("final: test_accuracy={:.4f} epochs={} blocks={} train_seconds={:.1f}\n", test_acc, args.epochs,
             args.blocks, train_seconds);
  return 0;
}

int main(int argc, char** argv) {
  Args args = parse_args(argc, argv);
  try {
    return run(args);
  } catch (const std::exception& e) {
    fmt::print(stderr, "resnet: {}\n", e.what());
    return 1;
  }
}
