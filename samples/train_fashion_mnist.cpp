// The main demo: the chapter's MLP on Fashion-MNIST.
// Sequential(Flatten, LazyLinear(256), ReLU, LazyLinear(10)), SGD lr 0.1,
// batch 256, 10 epochs on the best device available; then save the
// state_dict, reload it into a fresh model and evaluate again.
#include <chrono>
#include <filesystem>

#include "dsl/data/fashion_mnist.h"
#include "dsl/io.h"
#include "dsl/tessel.h"
#include "dsl/train/trainer.h"

using namespace tessel;

static nn::Sequential make_mlp() {
  return nn::Sequential(nn::Flatten(), nn::LazyLinear(256), nn::ReLU(), nn::LazyLinear(10));
}

int main(int argc, char** argv) {
  int epochs = argc > 1 ? std::atoi(argv[1]) : 10;
  manual_seed(0);
  auto train_set = data::load_fashion_mnist(true);
  auto test_set = data::load_fashion_mnist(false);
  data::DataLoader train_loader(train_set.X, train_set.y, {.batch_size = 256, .shuffle = true, .seed = 0});
  data::DataLoader test_loader(test_set.X, test_set.y, {.batch_size = 1024});

  train::Trainer trainer({.max_epochs = epochs, .num_gpus = num_gpus(), .plot_path = "fashion_mnist_curves.png"});
  fmt::print("training on {} ({} train / {} test examples)\n", trainer.device(), train_loader.num_examples(),
             test_loader.num_examples());
  auto net = make_mlp();
  net->apply_init(train_set.X.narrow(0, 0, 2));
  fmt::print("{}\n", net->repr());
  optim::SGD opt(net->parameters(), {.lr = 0.1});
  auto t0 = std::chrono::steady_clock::now();
  auto history = trainer.fit(*net, opt, train_loader, &test_loader);
  double train_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  std::filesystem::path ckpt = "mlp.params";
  save(net->state_dict(), ckpt);
  auto fresh = make_mlp();  // lazy layers: shapes come from the checkpoint
  fresh->load_state_dict(load_dict(ckpt));
  fresh->to(trainer.device());  // the checkpoint loads on the host; evaluate where training ran
  auto loss = [](const Tensor& a, const Tensor& b) { return cross_entropy(a, b); };
  auto [test_loss, test_acc] = trainer.evaluate(*fresh, test_loader, loss);
  fmt::print("reloaded from {}: test_loss={:.4f} test_accuracy={:.4f} (trained model: {:.4f})\n", ckpt.string(),
             test_loss, test_acc, history.back().val_acc);
  fmt::print("final: test_accuracy={:.4f} epochs={} device={} train_seconds={:.1f}\n", test_acc, epochs,
             trainer.device(), train_seconds);
  return 0;
}
