// Hand-written baselines: what a careful C++ programmer writes without a
// framework -- fused loops and OpenBLAS sgemm calls into buffers made once.
#pragma once

#include <cstdint>
#include <vector>

namespace bench::hand {

/// out[i] = relu(a[i]*b[i] + c[i]) * d[i], one pass.
void chain(const float* a, const float* b, const float* c, const float* d, float* out, int64_t n);

/// The 784-256-10 MLP (W [out, in], PyTorch layout), its buffers, and a
/// forward / SGD-step of cross-entropy written with sgemm + fused loops.
struct Mlp {
  int64_t in = 784, hidden = 256, out = 10, batch = 0;
  std::vector<float> w1, b1, w2, b2;           // parameters
  std::vector<float> h, z;                     // activations [batch, hidden], [batch, out]
  std::vector<float> dz, dh, dw1, db1, dw2, db2;  // gradients

  Mlp(int64_t batch, const float* w1, const float* b1, const float* w2, const float* b2);
  /// z = relu(x W1^T + b1) W2^T + b2.
  void forward(const float* x);
  /// forward, mean cross-entropy against labels, backward, and w -= lr * grad. Returns the loss.
  float sgd_step(const float* x, const int64_t* labels, float lr);
};

}  // namespace bench::hand
