// The LibTorch peer of every figure, behind plain C++ types so that only
// torch_peer.cpp includes LibTorch's (heavy) headers.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace bench::torch_peer {

/// LibTorch's intra-op and inter-op pools at one thread.
void use_one_thread();
int num_threads();
const char* version();

/// relu(a*b+c)*d over n floats (inputs are not copied and must outlive the call).
/// eager: each op allocates its result; prealloc: *_out ops into buffers made once.
std::function<void()> chain_eager(const float* a, const float* b, const float* c, const float* d, int64_t n);
std::function<void()> chain_prealloc(const float* a, const float* b, const float* c, const float* d, int64_t n);
/// Same chain on a [rows, cols] tensor (for the dispatch figure).
std::function<void()> chain_eager_2d(const float* a, const float* b, const float* c, const float* d, int64_t rows,
                                     int64_t cols);

/// The 784-256-10 MLP's weights (PyTorch layout: W [out, in]); copied in.
struct Mlp {
  const float* w1;
  const float* b1;
  const float* w2;
  const float* b2;
  int64_t in = 784, hidden = 256, out = 10;
};
/// Forward under NoGradGuard on x [batch, in].
std::function<void()> mlp_forward(const Mlp& w, const float* x, int64_t batch);
/// One SGD step (lr) of cross-entropy on (x [batch, in], labels [batch]) with
/// torch::nn::Linear layers and torch::optim::SGD.
std::function<void()> train_step(const Mlp& w, const float* x, const int64_t* labels, int64_t batch, double lr);

/// One epoch over (x [n, in], labels [n]) shuffled with a seeded generator,
/// batch `batch` (last one partial), the same per-batch work as tessel's
/// Trainer: forward, cross_entropy, zero_grad, backward, step, loss.item(),
/// argmax accuracy count. Returns a callable that runs one epoch and returns
/// the mean training loss.
std::function<double()> fashion_epoch(const Mlp& w, const float* x, const int64_t* labels, int64_t n,
                                      int64_t batch, double lr, uint64_t seed);

/// A conv2d over NCHW f32 memory (not copied; must outlive the calls):
/// x [n, c, h, w], weight [o, c, k, k], bias [o], zero padding `pad`, stride 1.
struct Conv2d {
  const float* x;
  const float* weight;
  const float* bias;
  int64_t n, c, h, w, o, k, pad;
  int64_t oh() const { return h + 2 * pad - k + 1; }
  int64_t ow() const { return w + 2 * pad - k + 1; }
};
/// The implementation torch::conv2d picks for these shapes (ATen's
/// select_conv_backend: "Mkldnn", "Slow2d", ...), with and without backward.
std::string conv2d_backend(const Conv2d& p, bool need_backward);
/// torch::conv2d under NoGradGuard, result dropped.
std::function<void()> conv2d_forward(const Conv2d& p);
/// The same once, into y [n, o, oh, ow].
void conv2d_forward_into(const Conv2d& p, float* y);
/// Forward and backward with the upstream gradient gy [n, o, oh, ow] to the
/// input, weight and bias (leaves whose gradients are reset to undefined
/// before each call, as zero_grad(set_to_none) does).
std::function<void()> conv2d_forward_backward(const Conv2d& p, const float* gy);
/// The same once, gradients copied out (gx like x, gw like weight, gb [o]).
void conv2d_grads_into(const Conv2d& p, const float* gy, float* gx, float* gw, float* gb);

/// An embedding lookup over memory that must outlive the calls: weight [v, d]
/// f32, ids [n] int64 in [0, v), and r [n, d], the fixed tensor the output
/// is multiplied by before the sum.
struct Embedding {
  const float* weight;
  const int64_t* ids;
  const float* r;
  int64_t v, d, n;
};
/// sum(torch::embedding(weight, ids) * r), backward to the weight (a leaf
/// whose gradient is reset to undefined before each call; the dense gradient
/// torch.nn.Embedding gives), loss and gradient computed when it returns.
std::function<void()> embedding_forward_backward(const Embedding& p);
/// The same once: the lookup e [n, d] and the weight's gradient [v, d] copied out.
void embedding_into(const Embedding& p, float* e, float* gw);

/// Causal self-attention over memory that must outlive the calls: q, k, v
/// and r [b, h, t, d] f32; r multiplies the output before the sum.
struct Attention {
  const float *q, *k, *v, *r;
  int64_t b, h, t, d;
};
/// LibTorch 1.13's composite (it has no scaled_dot_product_attention):
/// q k^T / sqrt(d), masked_fill of the upper triangle with -inf, softmax,
/// @ v; sum(out * r) backward to q, k, v (leaves whose gradients are reset
/// before each call), everything computed when it returns.
std::function<void()> attention_forward_backward(const Attention& p);
/// The same once: the output and the three gradients copied out ([b, h, t, d] each).
void attention_into(const Attention& p, float* out, float* gq, float* gk, float* gv);

/// A parameter of a model by its state-dict name, f32 memory of `numel` values.
struct NamedArray {
  std::string name;
  const float* data;
  int64_t numel;
};
/// D2L's LeNet with BatchNorm (torch::nn::Sequential of Conv2d(1,6,5,pad 2),
/// BatchNorm2d(6), ReLU, MaxPool2d(2), Conv2d(6,16,5), BatchNorm2d(16), ReLU,
/// MaxPool2d(2), Flatten, Linear(400,120), BatchNorm1d(120), ReLU,
/// Linear(120,84), BatchNorm1d(84), ReLU, Linear(84,10)), its parameters
/// copied in by name ("0.weight", "1.bias", ...; every one must be given).
/// One training-mode step on (x [batch, 1, 28, 28], labels): the loss, the
/// logits and every parameter's gradient by name (no update).
struct LenetStep {
  double loss = 0;
  std::vector<float> logits;
  std::vector<std::pair<std::string, std::vector<float>>> grads;
};
LenetStep lenet_first_step(const std::vector<NamedArray>& params, const float* x, const int64_t* labels,
                           int64_t batch);
/// An epoch of that model over (x [n, 1, 28, 28], labels [n]) with SGD(lr):
/// the same per-batch work as fashion_epoch. Returns the mean training loss.
std::function<double()> lenet_epoch(const std::vector<NamedArray>& params, const float* x, const int64_t* labels,
                                    int64_t n, int64_t batch, double lr, uint64_t seed);

/// The character GPT of samples/gpt (minGPT's state-dict names, lm_head tied
/// to transformer.wte.weight), written functionally with LibTorch ops (1.13
/// has no fused attention: the composite with a causal mask), its parameters
/// copied in by name (every one but the tied lm_head.weight).
struct Gpt {
  int64_t vocab = 0, block = 0, layers = 0, heads = 0, d = 0;
  double dropout = 0;  // on the embeddings, attention weights and residual branches
  std::vector<NamedArray> params;
};
/// The sample's training step on (idx, targets) [batch, t]: forward in
/// training mode, mean cross entropy, gradients set to none, backward,
/// clip_grad_norm_(1.0), AdamW(lr, betas (0.9, 0.99), weight decay 0.1 on the
/// Linear weights only, as gpt::param_groups). The step returns its loss.
std::function<double()> gpt_train_step(const Gpt& p, const int64_t* idx, const int64_t* targets, int64_t batch,
                                       int64_t t, double lr);

}  // namespace bench::torch_peer
