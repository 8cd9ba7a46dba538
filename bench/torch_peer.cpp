#include "bench/torch_peer.h"

#include <torch/torch.h>

#include <memory>

namespace bench::torch_peer {

namespace {
torch::Tensor view_of(const float* p, std::vector<int64_t> shape) {
  // from_blob does not copy; the caller keeps the memory alive.
  return torch::from_blob(const_cast<float*>(p), shape, torch::kFloat32);
}

struct Net : torch::nn::Module {
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  Net(const Mlp& w) {
    fc1 = register_module("fc1", torch::nn::Linear(w.in, w.hidden));
    fc2 = register_module("fc2", torch::nn::Linear(w.hidden, w.out));
    torch::NoGradGuard g;
    fc1->weight.copy_(view_of(w.w1, {w.hidden, w.in}));
    fc1->bias.copy_(view_of(w.b1, {w.hidden}));
    fc2->weight.copy_(view_of(w.w2, {w.out, w.hidden}));
    fc2->bias.copy_(view_of(w.b2, {w.out}));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc2(torch::relu(fc1(x))); }
};
}  // namespace

void use_one_thread() {
  torch::set_num_threads(1);
  // The inter-op pool can be sized only before its first use.
  try {
    at::set_num_interop_threads(1);
  } catch (...) {
  }
}
int num_threads() { return torch::get_num_threads(); }
const char* version() { return TORCH_VERSION; }

std::function<void()> chain_eager(const float* a, const float* b, const float* c, const float* d, int64_t n) {
  return chain_eager_2d(a, b, c, d, 1, n);
}

std::function<void()> chain_eager_2d(const float* a, const float* b, const float* c, const float* d, int64_t rows,
                                     int64_t cols) {
  auto A = view_of(a, {rows, cols}), B = view_of(b, {rows, cols}), C = view_of(c, {rows, cols}),
       D = view_of(d, {rows, cols});
  return [=] {
    torch::Tensor y = torch::relu(A * B + C) * D;
    (void)y;
  };
}

std::function<void()> chain_prealloc(const float* a, const float* b, const float* c, const float* d, int64_t n) {
  auto A = view_of(a, {n}), B = view_of(b, {n}), C = view_of(c, {n}), D = view_of(d, {n});
  auto t = torch::empty({n}), y = torch::empty({n});
  t.fill_(0);
  y.fill_(0);
  return [=]() mutable {
    torch::mul_out(t, A, B);
    torch::add_out(t, t, C);
    torch::relu_(t);
    torch::mul_out(y, t, D);
  };
}

std::function<void()> mlp_forward(const Mlp& w, const float* x, int64_t batch) {
  auto net = std::make_shared<Net>(w);
  net->eval();
  auto X = view_of(x, {batch, w.in});
  return [=] {
    torch::NoGradGuard g;
    torch::Tensor y = net->forward(X);
    (void)y;
  };
}

std::function<void()> train_step(const Mlp& w, const float* x, const int64_t* labels, int64_t batch, double lr) {
  auto net = std::make_shared<Net>(w);
  auto opt = std::make_shared<torch::optim::SGD>(net->parameters(), torch::optim::SGDOptions(lr));
  auto X = view_of(x, {batch, w.in});
  auto Y = torch::from_blob(const_cast<int64_t*>(labels), {batch}, torch::kInt64);
  return [=] {
    torch::Tensor loss = torch::nn::functional::cross_entropy(net->forward(X), Y);
    opt->zero_grad();
    loss.backward();
    opt->step();
  };
}

std::function<double()> fashion_epoch(const Mlp& w, const float* x, const int64_t* labels, int64_t n,
                                      int64_t batch, double lr, uint64_t seed) {
  auto net = std::make_shared<Net>(w);
  auto opt = std::make_shared<torch::optim::SGD>(net->parameters(), torch::optim::SGDOptions(lr));
  auto X = view_of(x, {n, w.in});
  auto Y = torch::from_blob(const_cast<int64_t*>(labels), {n}, torch::kInt64);
  auto gen = std::make_shared<at::Generator>(at::detail::createCPUGenerator(seed));
  return [=] {
    net->train();
    torch::Tensor order = torch::randperm(n, *gen, torch::kInt64);
    double total = 0, correct = 0;
    for (int64_t s = 0; s < n; s += batch) {
      int64_t len = std::min(batch, n - s);
      torch::Tensor idx = order.narrow(0, s, len);
      torch::Tensor xb = X.index_select(0, idx), yb = Y.index_select(0, idx);  // copies, as tessel's DataLoader
      torch::Tensor logits = net->forward(xb);
      torch::Tensor loss = torch::nn::functional::cross_entropy(logits, yb);
      opt->zero_grad();
      loss.backward();
      opt->step();
      total += loss.item<double>() * static_cast<double>(len);
      {
        torch::NoGradGuard g;
        correct += logits.argmax(1).eq(yb).to(torch::kFloat32).sum().item<double>();
      }
    }
    (void)correct;
    return total / static_cast<double>(n);
  };
}

}  // namespace bench::torch_peer
