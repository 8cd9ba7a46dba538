// Builders' Guide, section 7: GPUs (S7.1-S7.8).
// Each block below reproduces one snippet of the chapter, in order. On a
// machine without a GPU every device helper falls back to the CPU and the
// program says so; with GPUs the same code runs there.
#include <vector>

#include "dsl/tessel.h"
#include "dsl/train/trainer.h"

using namespace tessel;

static const char* py_bool(bool b) { return b ? "True" : "False"; }

static std::string device_list(const std::vector<Device>& ds) {
  std::string s;
  for (auto& d : ds) s += fmt::format("{}{}", s.empty() ? "" : ", ", d);
  return "[" + s + "]";
}

// Snippets: @d2l.add_to_class(d2l.Trainer) __init__ / prepare_batch / prepare_model.
// The chapter adds these three methods to its trainer; this is the same logic.
struct Trainer {
  int max_epochs;
  int num_gpus_wanted;
  double gradient_clip_val;
  std::vector<Device> gpus;
  explicit Trainer(int max_epochs, int num_gpus_wanted = 0, double gradient_clip_val = 0)
      : max_epochs(max_epochs), num_gpus_wanted(num_gpus_wanted), gradient_clip_val(gradient_clip_val) {
    for (int i = 0; i < std::min(num_gpus_wanted, num_gpus()); ++i) gpus.push_back(gpu(i));
  }
  std::vector<Tensor> prepare_batch(std::vector<Tensor> batch) const {
    if (!gpus.empty())
      for (auto& a : batch) a = a.to(gpus[0]);
    return batch;
  }
  void prepare_model(nn::Module& model) const {
    if (!gpus.empty()) model.to(gpus[0]);
  }
};

int main() {
  manual_seed(0);
  int n = num_gpus();
  if (n == 0) fmt::print("S7 no GPU here: try_gpu() falls back to cpu and everything below runs on the CPU\n");
  else fmt::print("S7 {} GPU(s) here: the tensors below live on {}\n", n, try_gpu());

  // Snippet: cpu(), gpu(), gpu(1)
  fmt::print("S7.1 ({}, {}, {})\n", cpu(), gpu(), gpu(1));

  // Snippet: num_gpus()
  fmt::print("S7.1 num_gpus(): {}\n", n);

  // Snippet: try_gpu(), try_gpu(10), try_all_gpus()
  fmt::print("S7.1 ({}, {}, {})\n", try_gpu(), try_gpu(10), device_list(try_all_gpus()));

  // Snippet: x = torch.tensor([1, 2, 3]); x.device
  Tensor x = tensor({1, 2, 3});
  fmt::print("S7.2 x.device: {}\n", x.device());

  // Snippet: X = torch.ones(2, 3, device=try_gpu()); X
  // (printing a device tensor copies its values to the host first)
  Tensor X = ones({2, 3}, try_gpu());
  fmt::print("S7.2 X.device: {}\n", X.device());
  fmt::print("{}\n", X);

  // Snippet: Y = torch.rand(2, 3, device=try_gpu(1)); Y
  Tensor Y = rand({2, 3}, try_gpu(1));
  fmt::print("S7.2 Y.device: {}\n", Y.device());
  fmt::print("{}\n", Y);

  // Snippet: Z = X.cuda(1); print(X); print(Z)
  // X.cuda(1) needs a second GPU; to(try_gpu(1)) is the same copy where there
  // is one and no copy at all where there is not.
  Tensor Z = n >= 2 ? X.cuda(1) : X.to(try_gpu(1));
  fmt::print("S7.3 Z.device: {}\n", Z.device());
  fmt::print("{}\n{}\n", X, Z);

  // Snippet: Z.cuda(1) is Z
  // Asking for the device a tensor is already on returns the same tensor.
  Tensor Z2 = n >= 2 ? Z.cuda(1) : Z.to(Z.device());
  fmt::print("S7.3 Z.to(Z.device()) is Z: {}\n", py_bool(Z2.is_same(Z)));

  // Side notes: data never moves silently. An op on tensors of two devices
  // is an error, not a hidden copy.
  if (n >= 1) {
    try {
      fmt::print("S7.4 {}\n", X + ones({2, 3}));
    } catch (const DeviceError& e) {
      fmt::print("S7.4 X (gpu) + ones (cpu): DeviceError: {}\n", e.what());
    }
  } else {
    fmt::print("S7.4 cross-device error: skipped, every tensor here is on the cpu\n");
  }
  // Taking the values to the host is an explicit copy too.
  fmt::print("S7.5 X.sum() on the host: {}\n", (X.sum()).item());

  // Snippet: net = nn.Sequential(); net.add(nn.Dense(1)); net.initialize(ctx=try_gpu()); net(X)
  // (the chapter's MXNet lines; in PyTorch: net = nn.Sequential(nn.LazyLinear(1)); net = net.to(try_gpu()))
  nn::Sequential net(nn::LazyLinear(1));
  net->to(try_gpu());
  Tensor out = net(X);
  fmt::print("S7.6 net(X).shape: {}, device: {}\n", out.shape(), out.device());
  fmt::print("S7.6 net[0].weight.device: {}\n", net[0].as<nn::Linear>()->weight.device());
  fmt::print("S7.6 {}\n", out);

  // Snippets: Trainer(max_epochs, num_gpus, gradient_clip_val); prepare_batch; prepare_model
  Trainer trainer(/*max_epochs=*/3, /*num_gpus=*/1);
  fmt::print("S7.7 trainer.gpus: {}\n", device_list(trainer.gpus));
  nn::Sequential model(nn::Linear(3, 1));
  trainer.prepare_model(*model);
  auto batch = trainer.prepare_batch({ones({4, 3}), zeros({4, 1})});
  Device where = trainer.gpus.empty() ? cpu() : trainer.gpus[0];
  fmt::print("S7.7 batch on {}: {}\n", where, py_bool(batch[0].device() == where && batch[1].device() == where));
  fmt::print("S7.7 model on {}: {}\n", where, py_bool(model[0].as<nn::Linear>()->weight.device() == where));
  fmt::print("S7.7 model(batch[0]).shape: {}\n", model(batch[0]).shape());

  // tessel's own trainer (train::Trainer) has the same three pieces built in.
  train::Trainer lib({.max_epochs = 3, .num_gpus = 1, .gradient_clip_val = 1.0, .progress = false});
  auto [bx, by] = lib.prepare_batch({ones({4, 3}), zeros({4, 1})});
  fmt::print("S7.7 train::Trainer runs on {}; its batch is on {}\n", lib.device(), bx.device());
}
