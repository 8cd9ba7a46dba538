#include "codegen/ref/attention_loops.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace tessel::ref {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Row i's scaled, masked scores s[0 .. tk).
template <class T>
void scores(const ir::AttentionGeometry& g, const ir::AttentionOperands<T>& a, int64_t bh, int64_t i, double* s) {
  for (int64_t j = 0; j < g.tk; ++j) {
    double dot = 0;
    for (int64_t c = 0; c < g.d; ++c)
      dot += static_cast<double>(a.q[a.lq.at(bh, a.inner, i, c)]) * static_cast<double>(a.k[a.lk.at(bh, a.inner, j, c)]);
    double x = g.scale * dot;
    if (g.causal && j > i) x = kNegInf;
    const int64_t m = g.mask == ir::AttentionMask::None ? 0 : a.lm.at(bh, a.inner, i, j);
    switch (g.mask) {
      case ir::AttentionMask::None: break;
      case ir::AttentionMask::Bool:
        if (!static_cast<const uint8_t*>(a.mask)[m]) x = kNegInf;
        break;
      case ir::AttentionMask::Additive: x += static_cast<double>(static_cast<const T*>(a.mask)[m]); break;
    }
    s[j] = x;
  }
}

double keep_scale(const ir::AttentionGeometry& g, int64_t bh, int64_t i, int64_t j) {
  if (g.dropout_p == 0) return 1.0;
  return ir::attention_keep(g, bh, i, j) ? ir::dropout_scale(g.dropout_p) : 0.0;
}

}  // namespace

template <class T> void attention_forward(const ir::AttentionGeometry& g, const ir::AttentionOperands<T>& a, T* out) {
  std::vector<double> s(static_cast<size_t>(g.tk)), o(static_cast<size_t>(g.dv));
  for (int64_t bh = 0; bh < g.batch; ++bh)
    for (int64_t i = 0; i < g.tq; ++i) {
      scores(g, a, bh, i, s.data());
      double m = kNegInf;
      for (double x : s) m = std::max(m, x);
      T* row = out + (bh * g.tq + i) * (g.dv + 1);
      std::fill(o.begin(), o.end(), 0.0);
      double lse = kNegInf;
      if (m != kNegInf) {
        double l = 0;
        for (double x : s) l += std::exp(x - m);
        lse = m + std::log(l);
        for (int64_t j = 0; j < g.tk; ++j) {
          const double p = std::exp(s[static_cast<size_t>(j)] - lse) * keep_scale(g, bh, i, j);
          if (p == 0) continue;
          for (int64_t c = 0; c < g.dv; ++c) o[static_cast<size_t>(c)] += p * static_cast<double>(a.v[a.lv.at(bh, a.inner, j, c)]);
        }
      }
      for (int64_t c = 0; c < g.dv; ++c) row[c] = static_cast<T>(o[static_cast<size_t>(c)]);
      row[g.dv] = static_cast<T>(lse);
    }
}

template <class T>
void attention_backward(const ir::AttentionGeometry& g, const ir::AttentionOperands<T>& a, const T* fwd, const T* go,
                        const ir::OperandLayout& lg, T* grads) {
  const int64_t per = g.tq * g.d + g.tk * g.d + g.tk * g.dv;
  std::vector<double> s(static_cast<size_t>(g.tk)), dq, dk, dv;
  for (int64_t bh = 0; bh < g.batch; ++bh) {
    dq.assign(static_cast<size_t>(g.tq * g.d), 0.0);
    dk.assign(static_cast<size_t>(g.tk * g.d), 0.0);
    dv.assign(static_cast<size_t>(g.tk * g.dv), 0.0);
    for (int64_t i = 0; i < g.tq; ++i) {
      const T* row = fwd + (bh * g.tq + i) * (g.dv + 1);
      const double lse = static_cast<double>(row[g.dv]);
      if (lse == kNegInf) continue;  // every key masked out: zero gradients
      scores(g, a, bh, i, s.data());
      double delta = 0;
      for (int64_t c = 0; c < g.dv; ++c) delta += static_cast<double>(go[lg.at(bh, a.inner, i, c)]) * static_cast<double>(row[c]);
      for (int64_t j = 0; j < g.tk; ++j) {
        const double x = s[static_cast<size_t>(j)];
        if (x == kNegInf) continue;
        const double p = std::exp(x - lse), ks = keep_scale(g, bh, i, j);
        double gv = 0;
        for (int64_t c = 0; c < g.dv; ++c) {
          const double gi = static_cast<double>(go[lg.at(bh, a.inner, i, c)]);
          gv += gi * static_cast<double>(a.v[a.lv.at(bh, a.inner, j, c)]);
          dv[static_cast<size_t>(j * g.dv + c)] += p * ks * gi;
        }
        const double ds = p * (ks * gv - delta) * g.scale;
        for (int64_t c = 0; c < g.d; ++c) {
          dq[static_cast<size_t>(i * g.d + c)] += ds * static_cast<double>(a.k[a.lk.at(bh, a.inner, j, c)]);
          dk[static_cast<size_t>(j * g.d + c)] += ds * static_cast<double>(a.q[a.lq.at(bh, a.inner, i, c)]);
        }
      }
    }
    T* out = grads + bh * per;
    for (size_t e = 0; e < dq.size(); ++e) out[e] = static_cast<T>(dq[e]);
    out += g.tq * g.d;
    for (size_t e = 0; e < dk.size(); ++e) out[e] = static_cast<T>(dk[e]);
    out += g.tk * g.d;
    for (size_t e = 0; e < dv.size(); ++e) out[e] = static_cast<T>(dv[e]);
  }
}

template void attention_forward<float>(const ir::AttentionGeometry&, const ir::AttentionOperands<float>&, float*);
template void attention_forward<double>(const ir::AttentionGeometry&, const ir::AttentionOperands<double>&, double*);
template void attention_backward<float>(const ir::AttentionGeometry&, const ir::AttentionOperands<float>&, const float*,
                                        const float*, const ir::OperandLayout&, float*);
template void attention_backward<double>(const ir::AttentionGeometry&, const ir::AttentionOperands<double>&,
                                         const double*, const double*, const ir::OperandLayout&, double*);

}  // namespace tessel::ref
