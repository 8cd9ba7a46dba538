// The LibTorch peer of every figure, behind plain C++ types so that only
// torch_peer.cpp includes LibTorch's (heavy) headers.
#pragma once

#include <cstdint>
#include <functional>

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

}  // namespace bench::torch_peer
