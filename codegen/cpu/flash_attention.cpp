#include "codegen/cpu/flash_attention.h"

#include <cblas.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "runtime/thread_pool.h"

// The row loops below are where the time goes besides the GEMMs; they are
// compiled for the host's vector width at load time (ifunc clones), never for
// a CPU chosen here.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TESSEL_VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define TESSEL_VECTOR_CLONES
#endif

namespace tessel::cpu_attention {
namespace {

constexpr int64_t kBQ = 64;
constexpr int64_t kOpenBlasSingleThread = 64 * 64 * 64;

void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* A, int64_t lda, const float* B,
          int64_t ldb, float beta, float* C, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), alpha, A, static_cast<int>(lda), B, static_cast<int>(ldb), beta,
              C, static_cast<int>(ldc));
}
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* A, int64_t lda,
          const double* B, int64_t ldb, double beta, double* C, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), alpha, A, static_cast<int>(lda), B, static_cast<int>(ldb), beta,
              C, static_cast<int>(ldc));
}

// e^x for x <= 0 (scores minus their row max), Cephes' expf: a degree-6
// polynomial on [-ln2/2, ln2/2] times 2^n; -inf gives 0. Written so that
// it vectorizes (no libm call per element): ~1 ulp.
inline float exp_nonpositive(float x) {
  const bool zero = x < -87.0f;  // -inf included
  x = zero ? -87.0f : x;
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round to nearest
  const float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const float two_n = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  return zero ? 0.0f : p * two_n;
}
inline double exp_nonpositive(double x) { return std::exp(x); }

// Row reductions keep kLanes partial results (summed in a fixed order at
// the end) so that they vectorize without reassociating floating math.
constexpr int64_t kLanes = 16;

// s[c] = exp(s[c] - m) (0 where s[c] is -inf); returns the sum.
template <class T> TESSEL_VECTOR_CLONES T exp_shifted(T* s, int64_t n, T m) {
  T part[kLanes] = {};
  int64_t c = 0;
  for (; c + kLanes <= n; c += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) {
      const T e = exp_nonpositive(s[c + l] - m);
      s[c + l] = e;
      part[l] += e;
    }
  for (; c < n; ++c) {
    const T e = exp_nonpositive(s[c] - m);
    s[c] = e;
    part[0] += e;
  }
  T sum = 0;
  for (int64_t l = 0; l < kLanes; ++l) sum += part[l];
  return sum;
}

template <class T> TESSEL_VECTOR_CLONES T row_max(const T* s, int64_t n) {
  T part[kLanes];
  for (int64_t l = 0; l < kLanes; ++l) part[l] = -std::numeric_limits<T>::infinity();
  int64_t c = 0;
  for (; c + kLanes <= n; c += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) part[l] = s[c + l] > part[l] ? s[c + l] : part[l];
  for (; c < n; ++c) part[0] = s[c] > part[0] ? s[c] : part[0];
  T m = part[0];
  for (int64_t l = 1; l < kLanes; ++l) m = part[l] > m ? part[l] : m;
  return m;
}

template <class T> TESSEL_VECTOR_CLONES void scale_row(T* x, int64_t n, T f) {
  for (int64_t c = 0; c < n; ++c) x[c] *= f;
}

// ds = p * (ks * dp - delta) * scale, in place over dp (ks: the dropout factors, or null).
template <class T> TESSEL_VECTOR_CLONES void softmax_grad_row(const T* p, const T* ks, T* dp, int64_t n, T delta, T scale) {
  if (ks) {
    for (int64_t c = 0; c < n; ++c) dp[c] = p[c] * (ks[c] * dp[c] - delta) * scale;
  } else {
    for (int64_t c = 0; c < n; ++c) dp[c] = p[c] * (dp[c] - delta) * scale;
  }
}

// The scaled scores of rows [i0, i0 + nq) against keys [j0, j0 + nk) are in
// s (row stride ld); apply the causal triangle and the mask.
template <class T>
void mask_tile(const ir::AttentionGeometry& g, const ir::AttentionOperands<T>& a, int64_t bh, int64_t i0, int64_t nq,
               int64_t j0, int64_t nk, T* s, int64_t ld) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  for (int64_t r = 0; r < nq; ++r) {
    T* row = s + r * ld;
    const int64_t i = i0 + r;
    switch (g.mask) {
      case ir::AttentionMask::None: break;
      case ir::AttentionMask::Bool: {
        const auto* m = static_cast<const uint8_t*>(a.mask) + a.lm.at(bh, a.inner, i, j0);
        for (int64_t c = 0; c < nk; ++c)
          if (!m[c * a.lm.col]) row[c] = kNegInf;
        break;
      }
      case ir::AttentionMask::Additive: {
        const T* m = static_cast<const T*>(a.mask) + a.lm.at(bh, a.inner, i, j0);
        for (int64_t c = 0; c < nk; ++c) row[c] += m[c * a.lm.col];
        break;
      }
    }
    if (g.causal)
      for (int64_t c = std::max<int64_t>(0, i + 1 - j0); c < nk; ++c) row[c] = kNegInf;
  }
}

// Philox4x32-10 blocks first .. first + n - 1 under `seed`, words in order
// (runtime/philox.h's block(), written so the loop over blocks vectorizes:
// each lane runs one block's ten rounds).
TESSEL_VECTOR_CLONES void philox_blocks(uint64_t seed, uint64_t first, int64_t n, uint32_t* __restrict out) {
  const uint32_t s0 = static_cast<uint32_t>(seed), s1 = static_cast<uint32_t>(seed >> 32);
  for (int64_t b = 0; b < n; ++b) {
    const uint64_t counter = first + static_cast<uint64_t>(b);
    uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32), c2 = 0, c3 = 0;
    uint32_t k0 = s0, k1 = s1;
    for (int r = 0; r < 10; ++r) {
      const uint64_t p0 = uint64_t{Philox4x32::kMul0} * c0, p1 = uint64_t{Philox4x32::kMul1} * c2;
      const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
      const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
      c1 = static_cast<uint32_t>(p1);
      c3 = static_cast<uint32_t>(p0);
      c0 = n0;
      c2 = n2;
      k0 += Philox4x32::kKey0;
      k1 += Philox4x32::kKey1;
    }
    out[4 * b] = c0;
    out[4 * b + 1] = c1;
    out[4 * b + 2] = c2;
    out[4 * b + 3] = c3;
  }
}

// Dropout's factors for row i, keys [j0, j0 + nk): dropout_scale or 0, from
// the Philox words of elements (bh * tq + i) * tk + j (ir::attention_keep).
// `words` is scratch of at least nk + 8 entries.
template <class T>
void keep_factors(const ir::AttentionGeometry& g, int64_t bh, int64_t i, int64_t j0, int64_t nk, T* f,
                  uint32_t* words) {
  const T kept = static_cast<T>(ir::dropout_scale(g.dropout_p));
  const float p = static_cast<float>(g.dropout_p);
  const uint64_t e0 = (static_cast<uint64_t>(bh) * static_cast<uint64_t>(g.tq) + static_cast<uint64_t>(i)) *
                          static_cast<uint64_t>(g.tk) + static_cast<uint64_t>(j0);
  const uint64_t b0 = e0 / 4, b1 = (e0 + static_cast<uint64_t>(nk) + 3) / 4;
  philox_blocks(g.seed, b0, static_cast<int64_t>(b1 - b0), words);
  const uint32_t* w = words + (e0 - 4 * b0);
  for (int64_t c = 0; c < nk; ++c) f[c] = Philox4x32::uniform(w[c]) >= p ? kept : T(0);
}

// Rows of an operand: base pointer of row `r` of batch index bh, and a leading
// dimension BLAS accepts (layouts guarantee row >= cols, or a single row).
template <class T> const T* row_ptr(const T* base, const ir::OperandLayout& l, int64_t inner, int64_t bh, int64_t r) {
  return base + l.at(bh, inner, r, 0);
}
int64_t ld_of(const ir::OperandLayout& l, int64_t cols) { return std::max(l.row, cols); }

}  // namespace

int64_t key_tile(int64_t d, int64_t dv) {
  const int64_t widest = std::max<int64_t>({d, dv, 1});
  return std::clamp<int64_t>(kOpenBlasSingleThread / (kBQ * widest) / 16 * 16, 16, 128);
}

template <class T> void forward(const ir::AttentionGeometry& g, const ir::AttentionOperands<T>& a, T* out) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  const int64_t BK = key_tile(g.d, g.dv), nqb = (g.tq + kBQ - 1) / kBQ, ldo = g.dv + 1;
  const bool dropout = g.dropout_p > 0;
  parallel_for(g.batch * nqb, 1, [&](int64_t begin, int64_t end) {
    std::vector<T> S(static_cast<size_t>(kBQ * BK)), m(kBQ), l(kBQ), keep(dropout ? static_cast<size_t>(BK) : 0);
    std::vector<uint32_t> words(dropout ? static_cast<size_t>(BK + 8) : 0);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t bh = task / nqb, i0 = task % nqb * kBQ, nq = std::min(kBQ, g.tq - i0);
      T* O = out + (bh * g.tq + i0) * ldo;
      for (int64_t r = 0; r < nq; ++r) std::fill(O + r * ldo, O + r * ldo + g.dv, T(0));
      std::fill(m.begin(), m.end(), kNegInf);
      std::fill(l.begin(), l.end(), T(0));
      const int64_t kend = g.causal ? std::min(g.tk, i0 + nq) : g.tk;
      const T* Q = row_ptr(a.q, a.lq, a.inner, bh, i0);
      for (int64_t j0 = 0; j0 < kend; j0 += BK) {
        const int64_t nk = std::min(BK, kend - j0);
        if (g.d > 0)
          gemm(false, true, nq, nk, g.d, static_cast<T>(g.scale), Q, ld_of(a.lq, g.d), row_ptr(a.k, a.lk, a.inner, bh, j0),
               ld_of(a.lk, g.d), T(0), S.data(), BK);
        else
          std::fill(S.begin(), S.end(), T(0));
        mask_tile(g, a, bh, i0, nq, j0, nk, S.data(), BK);
        for (int64_t r = 0; r < nq; ++r) {
          T* s = S.data() + r * BK;
          const T mnew = std::max(m[static_cast<size_t>(r)], row_max(s, nk));
          if (mnew == kNegInf) {  // nothing unmasked yet in this row
            std::fill(s, s + nk, T(0));
            continue;
          }
          const T alpha = m[static_cast<size_t>(r)] == kNegInf ? T(0) : static_cast<T>(std::exp(m[static_cast<size_t>(r)] - mnew));
          const T sum = exp_shifted(s, nk, mnew);
          l[static_cast<size_t>(r)] = l[static_cast<size_t>(r)] * alpha + sum;
          if (alpha != T(1)) scale_row(O + r * ldo, g.dv, alpha);
          m[static_cast<size_t>(r)] = mnew;
          if (dropout) {
            keep_factors(g, bh, i0 + r, j0, nk, keep.data(), words.data());
            for (int64_t c = 0; c < nk; ++c) s[c] *= keep[static_cast<size_t>(c)];
          }
        }
        gemm(false, false, nq, g.dv, nk, T(1), S.data(), BK, row_ptr(a.v, a.lv, a.inner, bh, j0), ld_of(a.lv, g.dv), T(1),
             O, ldo);
      }
      for (int64_t r = 0; r < nq; ++r) {
        T* o = O + r * ldo;
        const T lr = l[static_cast<size_t>(r)];
        if (lr == T(0)) {  // every key masked out: zeros, and lse -inf
          std::fill(o, o + g.dv, T(0));
          o[g.dv] = kNegInf;
        } else {
          scale_row(o, g.dv, T(1) / lr);
          o[g.dv] = m[static_cast<size_t>(r)] + static_cast<T>(std::log(lr));
        }
      }
    }
  });
}

template <class T>
void backward(const ir::AttentionGeometry& g, const ir::AttentionOperands<T>& a, const T* fwd, const T* go,
              const ir::OperandLayout& lg, T* grads) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  const int64_t BK = key_tile(g.d, g.dv), ldf = g.dv + 1, per = g.tq * g.d + g.tk * g.d + g.tk * g.dv;
  const bool dropout = g.dropout_p > 0;
  parallel_for(g.batch, 1, [&](int64_t begin, int64_t end) {
    std::vector<T> P(static_cast<size_t>(kBQ * BK)), dP(static_cast<size_t>(kBQ * BK)), delta(kBQ), lse(kBQ);
    std::vector<T> K(dropout ? static_cast<size_t>(kBQ * BK) : 0), Pd(dropout ? static_cast<size_t>(kBQ * BK) : 0);
    std::vector<uint32_t> words(dropout ? static_cast<size_t>(BK + 8) : 0);
    for (int64_t bh = begin; bh < end; ++bh) {
      T* dq = grads + bh * per;
      T* dk = dq + g.tq * g.d;
      T* dv = dk + g.tk * g.d;
      std::fill(dq, dq + per, T(0));
      for (int64_t i0 = 0; i0 < g.tq; i0 += kBQ) {
        const int64_t nq = std::min(kBQ, g.tq - i0);
        const T* Q = row_ptr(a.q, a.lq, a.inner, bh, i0);
        const T* G = row_ptr(go, lg, a.inner, bh, i0);
        for (int64_t r = 0; r < nq; ++r) {
          const T* o = fwd + (bh * g.tq + i0 + r) * ldf;
          const T* gr = G + r * lg.row;
          T acc = 0;
          for (int64_t c = 0; c < g.dv; ++c) acc += gr[c] * o[c];
          delta[static_cast<size_t>(r)] = acc;
          lse[static_cast<size_t>(r)] = o[g.dv];
        }
        const int64_t kend = g.causal ? std::min(g.tk, i0 + nq) : g.tk;
        for (int64_t j0 = 0; j0 < kend; j0 += BK) {
          const int64_t nk = std::min(BK, kend - j0);
          const T* Kt = row_ptr(a.k, a.lk, a.inner, bh, j0);
          const T* Vt = row_ptr(a.v, a.lv, a.inner, bh, j0);
          if (g.d > 0)
            gemm(false, true, nq, nk, g.d, static_cast<T>(g.scale), Q, ld_of(a.lq, g.d), Kt, ld_of(a.lk, g.d), T(0),
                 P.data(), BK);
          else
            std::fill(P.begin(), P.end(), T(0));
          mask_tile(g, a, bh, i0, nq, j0, nk, P.data(), BK);
          for (int64_t r = 0; r < nq; ++r) {
            T* p = P.data() + r * BK;
            const T lr = lse[static_cast<size_t>(r)];
            if (lr == kNegInf) std::fill(p, p + nk, T(0));
            else (void)exp_shifted(p, nk, lr);
            if (dropout) {
              T* kr = K.data() + r * BK;
              keep_factors(g, bh, i0 + r, j0, nk, kr, words.data());
              T* pd = Pd.data() + r * BK;
              for (int64_t c = 0; c < nk; ++c) pd[c] = p[c] * kr[c];
            }
          }
          const T* PdUse = dropout ? Pd.data() : P.data();
          // dv += Pd^T g
          gemm(true, false, nk, g.dv, nq, T(1), PdUse, BK, G, ld_of(lg, g.dv), T(1), dv + j0 * g.dv, g.dv);
          // dP = g v^T
          if (g.dv > 0)
            gemm(false, true, nq, nk, g.dv, T(1), G, ld_of(lg, g.dv), Vt, ld_of(a.lv, g.dv), T(0), dP.data(), BK);
          else
            std::fill(dP.begin(), dP.end(), T(0));
          for (int64_t r = 0; r < nq; ++r)
            softmax_grad_row(P.data() + r * BK, dropout ? K.data() + r * BK : nullptr, dP.data() + r * BK, nk,
                             delta[static_cast<size_t>(r)], static_cast<T>(g.scale));
          // dq += dS k; dk += dS^T q
          gemm(false, false, nq, g.d, nk, T(1), dP.data(), BK, Kt, ld_of(a.lk, g.d), T(1), dq + i0 * g.d, g.d);
          gemm(true, false, nk, g.d, nq, T(1), dP.data(), BK, Q, ld_of(a.lq, g.d), T(1), dk + j0 * g.d, g.d);
        }
      }
    }
  });
}

template void forward<float>(const ir::AttentionGeometry&, const ir::AttentionOperands<float>&, float*);
template void forward<double>(const ir::AttentionGeometry&, const ir::AttentionOperands<double>&, double*);
template void backward<float>(const ir::AttentionGeometry&, const ir::AttentionOperands<float>&, const float*,
                              const float*, const ir::OperandLayout&, float*);
template void backward<double>(const ir::AttentionGeometry&, const ir::AttentionOperands<double>&, const double*,
                               const double*, const ir::OperandLayout&, double*);

}  // namespace tessel::cpu_attention
