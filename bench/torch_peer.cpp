#include "bench/torch_peer.h"

#include <ATen/native/ConvUtils.h>
#include <torch/torch.h>

#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>

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

// The per-batch work of fashion_epoch on a LibTorch model: randperm
// shuffling, index_select batch copies (as tessel's DataLoader), forward,
// cross_entropy, zero_grad, backward, SGD step, loss.item(), accuracy.
template <class Model>
std::function<double()> sgd_epoch(Model net, torch::Tensor X, torch::Tensor Y, int64_t n, int64_t batch, double lr,
                                  uint64_t seed) {
  auto opt = std::make_shared<torch::optim::SGD>(net->parameters(), torch::optim::SGDOptions(lr));
  auto gen = std::make_shared<at::Generator>(at::detail::createCPUGenerator(seed));
  return [=]() mutable {
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

std::function<double()> fashion_epoch(const Mlp& w, const float* x, const int64_t* labels, int64_t n,
                                      int64_t batch, double lr, uint64_t seed) {
  auto net = std::make_shared<Net>(w);
  auto X = view_of(x, {n, w.in});
  auto Y = torch::from_blob(const_cast<int64_t*>(labels), {n}, torch::kInt64);
  return sgd_epoch(net, X, Y, n, batch, lr, seed);
}

namespace {
struct ConvTensors {
  torch::Tensor x, w, b;
};
// Views of the caller's memory (forward only).
ConvTensors conv_views(const Conv2d& p) {
  return {view_of(p.x, {p.n, p.c, p.h, p.w}), view_of(p.weight, {p.o, p.c, p.k, p.k}), view_of(p.bias, {p.o})};
}
// Leaves of their own memory that require grad (a leaf over borrowed memory would
// work too; copies keep LibTorch from ever writing to the caller's buffers).
ConvTensors conv_leaves(const Conv2d& p) {
  auto v = conv_views(p);
  return {v.x.clone().requires_grad_(true), v.w.clone().requires_grad_(true), v.b.clone().requires_grad_(true)};
}
void copy_out(const torch::Tensor& t, float* out) {
  torch::Tensor c = t.contiguous();
  std::memcpy(out, c.data_ptr<float>(), static_cast<size_t>(c.numel()) * sizeof(float));
}
const char* conv_backend_name(at::native::ConvBackend b) {
  using B = at::native::ConvBackend;
  switch (b) {
    case B::Mkldnn: return "Mkldnn";
    case B::MkldnnEmpty: return "MkldnnEmpty";
    case B::NnpackSpatial: return "NnpackSpatial";
    case B::Slow2d: return "Slow2d";
    case B::SlowDilated2d: return "SlowDilated2d";
    case B::Winograd3x3Depthwise: return "Winograd3x3Depthwise";
    case B::Xnnpack2d: return "Xnnpack2d";
    case B::Empty: return "Empty";
    default: return "other";
  }
}
}  // namespace

std::string conv2d_backend(const Conv2d& p, bool need_backward) {
  // Backward is needed when grad mode is on and a leaf requires grad, as in the timed calls.
  auto t = need_backward ? conv_leaves(p) : conv_views(p);
  std::optional<torch::NoGradGuard> g;
  if (!need_backward) g.emplace();
  return conv_backend_name(at::native::select_conv_backend(t.x, t.w, t.b, {1, 1}, {p.pad, p.pad}, {1, 1},
                                                           /*transposed=*/false, {0, 0}, /*groups=*/1));
}

std::function<void()> conv2d_forward(const Conv2d& p) {
  auto t = conv_views(p);
  int64_t pad = p.pad;
  return [t, pad] {
    torch::NoGradGuard g;
    torch::Tensor y = torch::conv2d(t.x, t.w, t.b, /*stride=*/1, /*padding=*/pad);
    (void)y;
  };
}

void conv2d_forward_into(const Conv2d& p, float* y) {
  torch::NoGradGuard g;
  auto t = conv_views(p);
  copy_out(torch::conv2d(t.x, t.w, t.b, 1, p.pad), y);
}

std::function<void()> conv2d_forward_backward(const Conv2d& p, const float* gy) {
  auto t = conv_leaves(p);
  torch::Tensor GY = view_of(gy, {p.n, p.o, p.oh(), p.ow()});
  int64_t pad = p.pad;
  return [t, GY, pad] {
    for (auto* leaf : {&t.x, &t.w, &t.b}) leaf->mutable_grad().reset();
    torch::Tensor y = torch::conv2d(t.x, t.w, t.b, 1, pad);
    y.backward(GY);  // eager: the gradients exist when it returns
  };
}

void conv2d_grads_into(const Conv2d& p, const float* gy, float* gx, float* gw, float* gb) {
  auto t = conv_leaves(p);
  torch::Tensor y = torch::conv2d(t.x, t.w, t.b, 1, p.pad);
  y.backward(view_of(gy, {p.n, p.o, p.oh(), p.ow()}));
  copy_out(t.x.grad(), gx);
  copy_out(t.w.grad(), gw);
  copy_out(t.b.grad(), gb);
}

namespace {
struct EmbeddingTensors {
  torch::Tensor weight, ids, r;
};
EmbeddingTensors embedding_tensors(const Embedding& p) {
  return {view_of(p.weight, {p.v, p.d}).clone().requires_grad_(true),
          torch::from_blob(const_cast<int64_t*>(p.ids), {p.n}, torch::kInt64), view_of(p.r, {p.n, p.d})};
}
}  // namespace

std::function<void()> embedding_forward_backward(const Embedding& p) {
  auto t = embedding_tensors(p);
  return [t] {
    t.weight.mutable_grad().reset();
    torch::Tensor loss = (torch::embedding(t.weight, t.ids) * t.r).sum();
    loss.backward();  // eager: the loss and the gradient exist when it returns
  };
}

void embedding_into(const Embedding& p, float* e, float* gw) {
  auto t = embedding_tensors(p);
  torch::Tensor out = torch::embedding(t.weight, t.ids);
  (out * t.r).sum().backward();
  copy_out(out.detach(), e);
  copy_out(t.weight.grad(), gw);
}

namespace {
struct AttentionTensors {
  torch::Tensor q, k, v, r, keep_out;
};
AttentionTensors attention_tensors(const Attention& p) {
  auto leaf = [&](const float* x) { return view_of(x, {p.b, p.h, p.t, p.d}).clone().requires_grad_(true); };
  return {leaf(p.q), leaf(p.k), leaf(p.v), view_of(p.r, {p.b, p.h, p.t, p.d}),
          torch::ones({p.t, p.t}, torch::kBool).triu(1)};
}
torch::Tensor composite_attention(const AttentionTensors& t, int64_t d) {
  torch::Tensor s = torch::matmul(t.q, t.k.transpose(-2, -1)) / std::sqrt(static_cast<double>(d));
  return torch::matmul(torch::softmax(s.masked_fill(t.keep_out, -INFINITY), -1), t.v);
}
}  // namespace

std::function<void()> attention_forward_backward(const Attention& p) {
  auto t = attention_tensors(p);
  const int64_t d = p.d;
  return [t, d] {
    for (auto* leaf : {&t.q, &t.k, &t.v}) leaf->mutable_grad().reset();
    (composite_attention(t, d) * t.r).sum().backward();
  };
}

void attention_into(const Attention& p, float* out, float* gq, float* gk, float* gv) {
  auto t = attention_tensors(p);
  torch::Tensor y = composite_attention(t, p.d);
  (y * t.r).sum().backward();
  copy_out(y.detach(), out);
  copy_out(t.q.grad(), gq);
  copy_out(t.k.grad(), gk);
  copy_out(t.v.grad(), gv);
}

namespace {
torch::nn::Sequential make_lenet(const std::vector<NamedArray>& params) {
  namespace nn = torch::nn;
  nn::Sequential net(nn::Conv2d(nn::Conv2dOptions(1, 6, 5).padding(2)), nn::BatchNorm2d(6), nn::ReLU(),
                     nn::MaxPool2d(nn::MaxPool2dOptions(2)),
                     nn::Conv2d(nn::Conv2dOptions(6, 16, 5)), nn::BatchNorm2d(16), nn::ReLU(),
                     nn::MaxPool2d(nn::MaxPool2dOptions(2)),
                     nn::Flatten(),
                     nn::Linear(16 * 5 * 5, 120), nn::BatchNorm1d(120), nn::ReLU(),
                     nn::Linear(120, 84), nn::BatchNorm1d(84), nn::ReLU(),
                     nn::Linear(84, 10));
  torch::NoGradGuard g;
  auto named = net->named_parameters();
  if (named.size() != params.size())
    throw std::runtime_error("lenet peer: " + std::to_string(params.size()) + " parameters given, the model has " +
                             std::to_string(named.size()));
  for (auto& p : params) {
    torch::Tensor* t = named.find(p.name);
    if (!t || t->numel() != p.numel) throw std::runtime_error("lenet peer: no parameter '" + p.name + "' of that size");
    t->copy_(view_of(p.data, {p.numel}).view(t->sizes()));
  }
  return net;
}
}  // namespace

LenetStep lenet_first_step(const std::vector<NamedArray>& params, const float* x, const int64_t* labels,
                           int64_t batch) {
  auto net = make_lenet(params);
  net->train();
  auto X = view_of(x, {batch, 1, 28, 28});
  auto Y = torch::from_blob(const_cast<int64_t*>(labels), {batch}, torch::kInt64);
  torch::Tensor logits = net->forward(X);
  torch::Tensor loss = torch::nn::functional::cross_entropy(logits, Y);
  loss.backward();
  LenetStep out;
  out.loss = loss.item<double>();
  out.logits.resize(static_cast<size_t>(logits.numel()));
  copy_out(logits.detach(), out.logits.data());
  for (auto& kv : net->named_parameters()) {
    std::vector<float> g(static_cast<size_t>(kv.value().numel()));
    copy_out(kv.value().grad(), g.data());
    out.grads.emplace_back(kv.key(), std::move(g));
  }
  return out;
}

std::function<double()> lenet_epoch(const std::vector<NamedArray>& params, const float* x, const int64_t* labels,
                                    int64_t n, int64_t batch, double lr, uint64_t seed) {
  auto net = make_lenet(params);
  auto X = view_of(x, {n, 1, 28, 28});
  auto Y = torch::from_blob(const_cast<int64_t*>(labels), {n}, torch::kInt64);
  return sgd_epoch(net, X, Y, n, batch, lr, seed);
}

namespace {
struct GptState {
  std::map<std::string, torch::Tensor> w;
  std::vector<torch::Tensor> params;
  std::unique_ptr<torch::optim::AdamW> opt;
  torch::Tensor idx, targets, causal_out;
  int64_t heads = 0, d = 0;
  double dropout = 0;
};

torch::Tensor gpt_logits(GptState& s) {
  auto& w = s.w;
  const int64_t B = s.idx.size(0), T = s.idx.size(1), C = s.d, H = s.heads, hd = C / H;
  const double p = s.dropout;
  auto drop = [&](const torch::Tensor& x) { return p > 0 ? torch::dropout(x, p, /*train=*/true) : x; };
  auto ln = [&](const torch::Tensor& x, const std::string& n) {
    return torch::layer_norm(x, {C}, w.at(n + ".weight"), w.at(n + ".bias"), 1e-5);
  };
  auto linear = [&](const torch::Tensor& x, const std::string& n) {
    return torch::linear(x, w.at(n + ".weight"), w.at(n + ".bias"));
  };
  torch::Tensor x = drop(torch::embedding(w.at("transformer.wte.weight"), s.idx) +
                         torch::embedding(w.at("transformer.wpe.weight"), torch::arange(T, torch::kInt64)));
  for (int64_t l = 0;; ++l) {
    const std::string b = "transformer.h." + std::to_string(l);
    if (!w.count(b + ".ln_1.weight")) break;
    torch::Tensor qkv = linear(ln(x, b + ".ln_1"), b + ".attn.c_attn");
    auto heads = [&](int64_t i) { return qkv.narrow(2, i * C, C).reshape({B, T, H, hd}).transpose(1, 2); };
    torch::Tensor att = torch::matmul(heads(0), heads(1).transpose(-2, -1)) / std::sqrt(static_cast<double>(hd));
    att = drop(torch::softmax(att.masked_fill(s.causal_out.narrow(0, 0, T).narrow(1, 0, T), -INFINITY), -1));
    torch::Tensor y = torch::matmul(att, heads(2)).transpose(1, 2).reshape({B, T, C});
    x = x + drop(linear(y, b + ".attn.c_proj"));
    x = x + drop(linear(torch::gelu(linear(ln(x, b + ".ln_2"), b + ".mlp.c_fc")), b + ".mlp.c_proj"));
  }
  return torch::matmul(ln(x, "transformer.ln_f"), w.at("transformer.wte.weight").t());
}
}  // namespace

std::function<double()> gpt_train_step(const Gpt& p, const int64_t* idx, const int64_t* targets, int64_t batch,
                                       int64_t t, double lr) {
  auto s = std::make_shared<GptState>();
  s->heads = p.heads;
  s->d = p.d;
  s->dropout = p.dropout;
  for (const NamedArray& a : p.params) {
    torch::Tensor v = torch::from_blob(const_cast<float*>(a.data), {a.numel}, torch::kFloat32).clone();
    s->w[a.name] = v;
  }
  // Shapes from the names (the model is fixed by the config).
  auto shape_of = [&](const std::string& n) -> std::vector<int64_t> {
    const int64_t C = p.d;
    if (n == "transformer.wte.weight") return {p.vocab, C};
    if (n == "transformer.wpe.weight") return {p.block, C};
    if (n.find("c_attn.weight") != std::string::npos) return {3 * C, C};
    if (n.find("c_attn.bias") != std::string::npos) return {3 * C};
    if (n.find("c_fc.weight") != std::string::npos) return {4 * C, C};
    if (n.find("c_fc.bias") != std::string::npos) return {4 * C};
    if (n.find("mlp.c_proj.weight") != std::string::npos) return {C, 4 * C};
    if (n.find("attn.c_proj.weight") != std::string::npos) return {C, C};
    return {C};  // LayerNorm weights and biases, c_proj biases
  };
  // gpt::param_groups: weight decay on the Linear weights only.
  std::vector<torch::Tensor> decay, no_decay;
  for (auto& [n, v] : s->w) {
    v = v.reshape(shape_of(n)).requires_grad_(true);
    s->params.push_back(v);
    const bool linear_weight = n.find(".weight") != std::string::npos &&
                               (n.find("c_attn") != std::string::npos || n.find("c_proj") != std::string::npos ||
                                n.find("c_fc") != std::string::npos);
    (linear_weight ? decay : no_decay).push_back(v);
  }
  auto opts = [&](double wd) { return std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(lr).betas({0.9, 0.99}).weight_decay(wd)); };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, opts(0.1));
  groups.emplace_back(no_decay, opts(0.0));
  s->opt = std::make_unique<torch::optim::AdamW>(groups, torch::optim::AdamWOptions(lr).betas({0.9, 0.99}));
  s->idx = torch::from_blob(const_cast<int64_t*>(idx), {batch, t}, torch::kInt64);
  s->targets = torch::from_blob(const_cast<int64_t*>(targets), {batch * t}, torch::kInt64);
  s->causal_out = torch::ones({p.block, p.block}, torch::kBool).triu(1);
  return [s] {
    for (auto& p : s->params) p.mutable_grad().reset();  // set to none
    torch::Tensor logits = gpt_logits(*s);
    torch::Tensor loss = torch::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}), s->targets);
    loss.backward();
    torch::nn::utils::clip_grad_norm_(s->params, 1.0);
    s->opt->step();
    return loss.item<double>();
  };
}

}  // namespace bench::torch_peer
