#include "bench/hand.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>

namespace bench::hand {

void chain(const float* __restrict a, const float* __restrict b, const float* __restrict c,
           const float* __restrict d, float* __restrict out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = std::max(a[i] * b[i] + c[i], 0.0f) * d[i];
}

Mlp::Mlp(int64_t batch_, const float* w1_, const float* b1_, const float* w2_, const float* b2_)
    : batch(batch_),
      w1(w1_, w1_ + hidden * in),
      b1(b1_, b1_ + hidden),
      w2(w2_, w2_ + out * hidden),
      b2(b2_, b2_ + out),
      h(batch * hidden),
      z(batch * out),
      dz(batch * out),
      dh(batch * hidden),
      dw1(hidden * in),
      db1(hidden),
      dw2(out * hidden),
      db2(out) {}

void Mlp::forward(const float* x) {
  const int B = static_cast<int>(batch), I = static_cast<int>(in), H = static_cast<int>(hidden),
            O = static_cast<int>(out);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, H, I, 1.0f, x, I, w1.data(), I, 0.0f, h.data(), H);
  for (int r = 0; r < B; ++r) {
    float* hr = h.data() + static_cast<int64_t>(r) * H;
    for (int j = 0; j < H; ++j) hr[j] = std::max(hr[j] + b1[j], 0.0f);
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, O, H, 1.0f, h.data(), H, w2.data(), H, 0.0f, z.data(), O);
  for (int r = 0; r < B; ++r) {
    float* zr = z.data() + static_cast<int64_t>(r) * O;
    for (int j = 0; j < O; ++j) zr[j] += b2[j];
  }
}

float Mlp::sgd_step(const float* x, const int64_t* labels, float lr) {
  const int B = static_cast<int>(batch), I = static_cast<int>(in), H = static_cast<int>(hidden),
            O = static_cast<int>(out);
  forward(x);
  // Softmax cross-entropy and its gradient (softmax - one_hot) / B in one pass per row.
  double loss = 0;
  const float inv_b = 1.0f / static_cast<float>(B);
  for (int r = 0; r < B; ++r) {
    const float* zr = z.data() + static_cast<int64_t>(r) * O;
    float* gr = dz.data() + static_cast<int64_t>(r) * O;
    float m = *std::max_element(zr, zr + O);
    float s = 0;
    for (int j = 0; j < O; ++j) s += (gr[j] = std::exp(zr[j] - m));
    float inv_s = 1.0f / s;
    loss += std::log(s) + m - zr[labels[r]];
    for (int j = 0; j < O; ++j) gr[j] *= inv_s * inv_b;
    gr[labels[r]] -= inv_b;
  }
  // Layer 2: dW2 = dz^T h, db2 = sum_rows dz, dh = dz W2 masked by relu.
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, O, H, B, 1.0f, dz.data(), O, h.data(), H, 0.0f, dw2.data(), H);
  std::fill(db2.begin(), db2.end(), 0.0f);
  for (int r = 0; r < B; ++r)
    for (int j = 0; j < O; ++j) db2[j] += dz[static_cast<int64_t>(r) * O + j];
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, H, O, 1.0f, dz.data(), O, w2.data(), H, 0.0f, dh.data(), H);
  std::fill(db1.begin(), db1.end(), 0.0f);
  for (int r = 0; r < B; ++r) {
    const float* hr = h.data() + static_cast<int64_t>(r) * H;
    float* dr = dh.data() + static_cast<int64_t>(r) * H;
    for (int j = 0; j < H; ++j) {
      dr[j] = hr[j] > 0 ? dr[j] : 0.0f;
      db1[j] += dr[j];
    }
  }
  // Layer 1: dW1 = dh^T x.
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, H, I, B, 1.0f, dh.data(), H, x, I, 0.0f, dw1.data(), I);
  // SGD.
  auto update = [lr](std::vector<float>& w, const std::vector<float>& g) {
    float* __restrict wp = w.data();
    const float* __restrict gp = g.data();
    for (size_t i = 0; i < w.size(); ++i) wp[i] -= lr * gp[i];
  };
  update(w1, dw1);
  update(b1, db1);
  update(w2, dw2);
  update(b2, db2);
  return static_cast<float>(loss / B);
}

}  // namespace bench::hand
