#include "codegen/cuda/attention_kernels.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <string_view>

#include "codegen/cuda/device_kernels.h"
#include "runtime/cuda/device_allocator.h"
#include "runtime/cuda/driver.h"
#include "runtime/cuda/prelude.h"
#include "runtime/errors.h"

namespace tessel::cudagen {

using ir::AttentionMask;
using ir::BufferView;
using ir::Node;
using ir::Op;

namespace {

// The kernels, templated on every compile-time constant; each source
// instantiates them once. Valid CUDA C++ (NVRTC, no header) and valid host
// C++ after tests/cuda_emu/cuda_emulation.h. Include-guarded like the prelude.
constexpr std::string_view kDeviceCode = R"tessel_attn(
#ifndef TESSEL_CUDA_ATTENTION
#define TESSEL_CUDA_ATTENTION
namespace ts_attn {

// The kernels' only parameter (the host's cudagen::AttentionArgs): every field 8 bytes.
struct Args {
  const void* q;
  const void* k;
  const void* v;
  const void* mask;
  const void* g;
  const void* fwd;
  void* out;
  void* delta;
  int64_t batch, inner, tq, tk;
  int64_t q_outer, q_inner, q_row;
  int64_t k_outer, k_inner, k_row;
  int64_t v_outer, v_inner, v_row;
  int64_t g_outer, g_inner, g_row;
  int64_t m_outer, m_inner, m_row, m_col;
  double scale, keep_scale, p_drop;
  uint64_t seed;
};

// Element offset of batch index bh in an operand split into outer/inner groups.
TS_FN int64_t batch_base(int64_t bh, int64_t inner, int64_t outer_stride, int64_t inner_stride) {
  return (bh / inner) * outer_stride + (bh % inner) * inner_stride;
}

// Loops over a row's D or Dv elements unroll fully while the rows fit the
// registers (head dims up to 64); beyond, the rows live in local memory
// anyway, and a full unroll would only cost compile time.
constexpr int unroll_of(int d, int dv) { return d > 64 || dv > 64 ? 4 : (d > dv ? (d > 0 ? d : 1) : (dv > 0 ? dv : 1)); }

template <class T> TS_FN T ninf();
template <> TS_FN float ninf<float>() { return -ts::inf_f32(); }
template <> TS_FN double ninf<double>() { return -ts::inf_f64(); }

// Philox4x32-10, word i of the stream of `seed`: runtime/philox.h bit for bit.
TS_FN uint32_t philox_word(uint64_t seed, uint64_t i) {
  const uint64_t counter = i >> 2;
  uint32_t c0 = (uint32_t)counter, c1 = (uint32_t)(counter >> 32), c2 = 0u, c3 = 0u;
  uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
  for (int r = 0; r < 10; ++r) {
    const uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
    const uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
    const uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
    c1 = (uint32_t)p1;
    c3 = (uint32_t)p0;
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  const uint32_t w = (uint32_t)(i & 3u);
  return w == 0u ? c0 : w == 1u ? c1 : w == 2u ? c2 : c3;
}

// Whether dropout keeps probability (bh, i, j) (ir::attention_keep).
TS_FN bool keep(const Args& a, int64_t bh, int64_t i, int64_t j) {
  const uint64_t e = ((uint64_t)bh * (uint64_t)a.tq + (uint64_t)i) * (uint64_t)a.tk + (uint64_t)j;
  return (float)(philox_word(a.seed, e) >> 8) * (1.0f / 16777216.0f) >= (float)a.p_drop;
}

// The scaled score x of (i, j) after the causal triangle and the mask
// (MASK 0: none, 1: bool bytes, 2: additive T); -inf where masked out.
template <class T, int MASK, bool CAUSAL>
TS_FN T masked(const Args& a, T x, int64_t mb, int64_t i, int64_t j) {
  if constexpr (CAUSAL) {
    if (j > i) return ninf<T>();
  }
  if constexpr (MASK == 1) {
    if (!static_cast<const uint8_t*>(a.mask)[mb + i * a.m_row + j * a.m_col]) return ninf<T>();
  } else if constexpr (MASK == 2) {
    x += static_cast<const T*>(a.mask)[mb + i * a.m_row + j * a.m_col];
  }
  return x;
}

// Rows [r0, r0 + n) of an operand (COLS contiguous values each, rows `row`
// apart from `base`) copied dense into shared memory by the block's THREADS
// threads; the caller synchronizes around it.
template <class T, int COLS, int THREADS>
TS_FN void stage_rows(T* dst, const T* src, int64_t base, int64_t row, int64_t r0, int n) {
#pragma unroll 1
  for (int e = threadIdx.x; e < n * COLS; e += THREADS) dst[e] = src[base + (r0 + e / COLS) * row + e % COLS];
}

// Forward: one thread per query row, BQ rows per block, tiles of BK keys.
template <class T, int D, int DV, int MASK, bool CAUSAL, bool DROP, int BQ, int BK>
TS_FN void forward(const Args& a) {
  constexpr int DA = D > 0 ? D : 1, DVA = DV > 0 ? DV : 1, UNROLL = unroll_of(D, DV);
  __shared__ T ks[BK * DA];
  __shared__ T vs[BK * DVA];
  const T* Q = static_cast<const T*>(a.q);
  const T* K = static_cast<const T*>(a.k);
  const T* V = static_cast<const T*>(a.v);
  T* O = static_cast<T*>(a.out);
  const int64_t q0 = (int64_t)blockIdx.x * BQ, i = q0 + threadIdx.x;
  const bool active = i < a.tq;
  const T scale = (T)a.scale, r = (T)a.keep_scale;
  int64_t kend = a.tk;
  if constexpr (CAUSAL) kend = ts::min(kend, q0 + BQ);  // later keys are masked for every row here
  for (int64_t bh = blockIdx.y; bh < a.batch; bh += gridDim.y) {
    const int64_t qb = batch_base(bh, a.inner, a.q_outer, a.q_inner) + i * a.q_row;
    const int64_t kb = batch_base(bh, a.inner, a.k_outer, a.k_inner);
    const int64_t vb = batch_base(bh, a.inner, a.v_outer, a.v_inner);
    int64_t mb = 0;
    if constexpr (MASK != 0) mb = batch_base(bh, a.inner, a.m_outer, a.m_inner);
    T qr[DA], acc[DVA];
#pragma unroll (UNROLL)
    for (int c = 0; c < D; ++c) qr[c] = active ? Q[qb + c] : T(0);
#pragma unroll (UNROLL)
    for (int c = 0; c < DV; ++c) acc[c] = T(0);
    T m = ninf<T>(), l = T(0);
    for (int64_t k0 = 0; k0 < kend; k0 += BK) {
      const int nk = (int)ts::min((int64_t)BK, a.tk - k0);
      __syncthreads();  // every thread is done with the previous tile
      stage_rows<T, D, BQ>(ks, K, kb, a.k_row, k0, nk);
      stage_rows<T, DV, BQ>(vs, V, vb, a.v_row, k0, nk);
      __syncthreads();
      if (!active) continue;
#pragma unroll 1
      for (int jj = 0; jj < nk; ++jj) {
        const int64_t j = k0 + jj;
        T dot = T(0);
#pragma unroll (UNROLL)
        for (int c = 0; c < D; ++c) dot += qr[c] * ks[jj * DA + c];
        const T x = masked<T, MASK, CAUSAL>(a, scale * dot, mb, i, j);
        if (x == ninf<T>()) continue;
        if (x > m) {  // a new running max: rescale what was summed so far
          const T corr = ts::exp(m - x);
          l *= corr;
#pragma unroll (UNROLL)
          for (int c = 0; c < DV; ++c) acc[c] *= corr;
          m = x;
        }
        T w = ts::exp(x - m);
        l += w;
        if constexpr (DROP) {
          if (!keep(a, bh, i, j)) continue;
          w *= r;
        }
#pragma unroll (UNROLL)
        for (int c = 0; c < DV; ++c) acc[c] += w * vs[jj * DVA + c];
      }
    }
    if (active) {
      T* row = O + (bh * a.tq + i) * (DV + 1);
      if (m == ninf<T>()) {  // every key masked out
#pragma unroll (UNROLL)
        for (int c = 0; c < DV; ++c) row[c] = T(0);
        row[DV] = ninf<T>();
      } else {
        const T inv = T(1) / l;
#pragma unroll (UNROLL)
        for (int c = 0; c < DV; ++c) row[c] = acc[c] * inv;
        row[DV] = m + ts::log(l);
      }
    }
  }
}

// Backward, dq: one thread per query row (as the forward); writes delta_i.
template <class T, int D, int DV, int MASK, bool CAUSAL, bool DROP, int BQ, int BK>
TS_FN void grad_q(const Args& a) {
  constexpr int DA = D > 0 ? D : 1, DVA = DV > 0 ? DV : 1, UNROLL = unroll_of(D, DV);
  __shared__ T ks[BK * DA];
  __shared__ T vs[BK * DVA];
  const T* Q = static_cast<const T*>(a.q);
  const T* K = static_cast<const T*>(a.k);
  const T* V = static_cast<const T*>(a.v);
  const T* G = static_cast<const T*>(a.g);
  const T* F = static_cast<const T*>(a.fwd);
  T* out = static_cast<T*>(a.out);
  T* Delta = static_cast<T*>(a.delta);
  const int64_t per = a.tq * D + a.tk * D + a.tk * DV;
  const int64_t q0 = (int64_t)blockIdx.x * BQ, i = q0 + threadIdx.x;
  const bool active = i < a.tq;
  const T scale = (T)a.scale, r = (T)a.keep_scale;
  int64_t kend = a.tk;
  if constexpr (CAUSAL) kend = ts::min(kend, q0 + BQ);
  for (int64_t bh = blockIdx.y; bh < a.batch; bh += gridDim.y) {
    const int64_t qb = batch_base(bh, a.inner, a.q_outer, a.q_inner) + i * a.q_row;
    const int64_t gb = batch_base(bh, a.inner, a.g_outer, a.g_inner) + i * a.g_row;
    const int64_t kb = batch_base(bh, a.inner, a.k_outer, a.k_inner);
    const int64_t vb = batch_base(bh, a.inner, a.v_outer, a.v_inner);
    int64_t mb = 0;
    if constexpr (MASK != 0) mb = batch_base(bh, a.inner, a.m_outer, a.m_inner);
    T qr[DA], gr[DVA], dq[DA];
    T lse = ninf<T>(), delta = T(0);
    if (active) {
      const T* f = F + (bh * a.tq + i) * (DV + 1);
      lse = f[DV];
#pragma unroll (UNROLL)
      for (int c = 0; c < DV; ++c) {
        gr[c] = G[gb + c];
        delta += gr[c] * f[c];
      }
#pragma unroll (UNROLL)
      for (int c = 0; c < D; ++c) qr[c] = Q[qb + c];
    }
    const bool live = active && lse != ninf<T>();
    if (!live) delta = T(0);
    if (active) Delta[bh * a.tq + i] = delta;
#pragma unroll (UNROLL)
    for (int c = 0; c < D; ++c) dq[c] = T(0);
    for (int64_t k0 = 0; k0 < kend; k0 += BK) {
      const int nk = (int)ts::min((int64_t)BK, a.tk - k0);
      __syncthreads();
      stage_rows<T, D, BQ>(ks, K, kb, a.k_row, k0, nk);
      stage_rows<T, DV, BQ>(vs, V, vb, a.v_row, k0, nk);
      __syncthreads();
      if (!live) continue;
#pragma unroll 1
      for (int jj = 0; jj < nk; ++jj) {
        const int64_t j = k0 + jj;
        T dot = T(0);
#pragma unroll (UNROLL)
        for (int c = 0; c < D; ++c) dot += qr[c] * ks[jj * DA + c];
        const T x = masked<T, MASK, CAUSAL>(a, scale * dot, mb, i, j);
        if (x == ninf<T>()) continue;
        const T p = ts::exp(x - lse);
        T gv = T(0);
#pragma unroll (UNROLL)
        for (int c = 0; c < DV; ++c) gv += gr[c] * vs[jj * DVA + c];
        if constexpr (DROP) gv = keep(a, bh, i, j) ? gv * r : T(0);
        const T ds = p * (gv - delta);
#pragma unroll (UNROLL)
        for (int c = 0; c < D; ++c) dq[c] += ds * ks[jj * DA + c];
      }
    }
    if (active) {
      T* dst = out + bh * per + i * D;
#pragma unroll (UNROLL)
      for (int c = 0; c < D; ++c) dst[c] = dq[c] * scale;
    }
  }
}

// Backward, dk and dv: one thread per key row, BK rows per block, tiles of BQ queries.
template <class T, int D, int DV, int MASK, bool CAUSAL, bool DROP, int BK, int BQ>
TS_FN void grad_kv(const Args& a) {
  constexpr int DA = D > 0 ? D : 1, DVA = DV > 0 ? DV : 1, UNROLL = unroll_of(D, DV);
  __shared__ T qs[BQ * DA];
  __shared__ T gs[BQ * DVA];
  __shared__ T ls[BQ];
  __shared__ T dls[BQ];
  const T* Q = static_cast<const T*>(a.q);
  const T* K = static_cast<const T*>(a.k);
  const T* V = static_cast<const T*>(a.v);
  const T* G = static_cast<const T*>(a.g);
  const T* F = static_cast<const T*>(a.fwd);
  T* out = static_cast<T*>(a.out);
  const T* Delta = static_cast<const T*>(a.delta);
  const int64_t per = a.tq * D + a.tk * D + a.tk * DV;
  const int64_t j0 = (int64_t)blockIdx.x * BK, j = j0 + threadIdx.x;
  const bool active = j < a.tk;
  const T scale = (T)a.scale, r = (T)a.keep_scale;
  int64_t qstart = 0;
  if constexpr (CAUSAL) qstart = j0;  // earlier queries see none of this block's keys
  for (int64_t bh = blockIdx.y; bh < a.batch; bh += gridDim.y) {
    const int64_t qb = batch_base(bh, a.inner, a.q_outer, a.q_inner);
    const int64_t gb = batch_base(bh, a.inner, a.g_outer, a.g_inner);
    const int64_t kb = batch_base(bh, a.inner, a.k_outer, a.k_inner) + j * a.k_row;
    const int64_t vb = batch_base(bh, a.inner, a.v_outer, a.v_inner) + j * a.v_row;
    int64_t mb = 0;
    if constexpr (MASK != 0) mb = batch_base(bh, a.inner, a.m_outer, a.m_inner);
    T kr[DA], vr[DVA], dk[DA], dv[DVA];
#pragma unroll (UNROLL)
    for (int c = 0; c < D; ++c) {
      kr[c] = active ? K[kb + c] : T(0);
      dk[c] = T(0);
    }
#pragma unroll (UNROLL)
    for (int c = 0; c < DV; ++c) {
      vr[c] = active ? V[vb + c] : T(0);
      dv[c] = T(0);
    }
    for (int64_t i0 = qstart; i0 < a.tq; i0 += BQ) {
      const int nq = (int)ts::min((int64_t)BQ, a.tq - i0);
      __syncthreads();
      stage_rows<T, D, BK>(qs, Q, qb, a.q_row, i0, nq);
      stage_rows<T, DV, BK>(gs, G, gb, a.g_row, i0, nq);
#pragma unroll 1
      for (int e = threadIdx.x; e < nq; e += BK) {
        ls[e] = F[(bh * a.tq + i0 + e) * (DV + 1) + DV];
        dls[e] = Delta[bh * a.tq + i0 + e];
      }
      __syncthreads();
      if (!active) continue;
#pragma unroll 1
      for (int ii = 0; ii < nq; ++ii) {
        const T lse = ls[ii];
        if (lse == ninf<T>()) continue;  // a fully masked row: no gradient
        const int64_t i = i0 + ii;
        T dot = T(0);
#pragma unroll (UNROLL)
        for (int c = 0; c < D; ++c) dot += qs[ii * DA + c] * kr[c];
        const T x = masked<T, MASK, CAUSAL>(a, scale * dot, mb, i, j);
        if (x == ninf<T>()) continue;
        const T p = ts::exp(x - lse);
        T gv = T(0);
#pragma unroll (UNROLL)
        for (int c = 0; c < DV; ++c) gv += gs[ii * DVA + c] * vr[c];
        T pk = p;
        if constexpr (DROP) {
          if (keep(a, bh, i, j)) {
            gv *= r;
            pk *= r;
          } else {
            gv = T(0);
            pk = T(0);
          }
        }
#pragma unroll (UNROLL)
        for (int c = 0; c < DV; ++c) dv[c] += pk * gs[ii * DVA + c];
        const T ds = p * (gv - dls[ii]);
#pragma unroll (UNROLL)
        for (int c = 0; c < D; ++c) dk[c] += ds * qs[ii * DA + c];
      }
    }
    if (active) {
      T* gk = out + bh * per + a.tq * D + j * D;
      T* gvv = out + bh * per + a.tq * D + a.tk * D + j * DV;
#pragma unroll (UNROLL)
      for (int c = 0; c < D; ++c) gk[c] = dk[c] * scale;
#pragma unroll (UNROLL)
      for (int c = 0; c < DV; ++c) gvv[c] = dv[c];
    }
  }
}

}  // namespace ts_attn
#endif  // TESSEL_CUDA_ATTENTION
)tessel_attn";

// Static shared memory per block the tiles may take (the limit is 48 KiB).
constexpr int64_t kSharedBudget = 32 * 1024;

int mask_code(AttentionMask m) {
  switch (m) {
    case AttentionMask::None: return 0;
    case AttentionMask::Bool: return 1;
    case AttentionMask::Additive: return 2;
  }
  return 0;
}

std::string_view mask_name(AttentionMask m) {
  switch (m) {
    case AttentionMask::None: return "none";
    case AttentionMask::Bool: return "bool";
    case AttentionMask::Additive: return "additive";
  }
  return "?";
}

std::string_view ctype(DType t) { return t == DType::f64 ? "double" : "float"; }

}  // namespace

AttentionSpec attention_spec(DType t, const ir::AttentionGeometry& g) {
  if (t != DType::f32 && t != DType::f64)
    throw CompileError(fmt::format("cuda attention: {} attention has no kernel (f32 and f64 do; builders compute "
                                   "halves in f32)",
                                   dtype_name(t)));
  if (g.d > kAttentionMaxHeadDim || g.dv > kAttentionMaxHeadDim)
    throw CompileError(fmt::format("cuda attention: head dims up to {} are supported, got D = {} and Dv = {} (each "
                                   "thread keeps a row of D and Dv elements in registers)",
                                   kAttentionMaxHeadDim, g.d, g.dv));
  AttentionSpec s;
  s.dtype = t;
  s.d = g.d;
  s.dv = g.dv;
  s.mask = g.mask;
  s.causal = g.causal;
  s.dropout = g.dropout_p > 0;
  return s;
}

AttentionTiles attention_tiles(const AttentionSpec& s) {
  const int64_t es = static_cast<int64_t>(dtype_size(s.dtype));
  const int64_t d = std::max<int64_t>(s.d, 1), dv = std::max<int64_t>(s.dv, 1);
  AttentionTiles t;
  t.fwd_keys = static_cast<int>(std::clamp<int64_t>(kSharedBudget / ((d + dv) * es), 1, 32));
  t.kv_queries = static_cast<int>(std::clamp<int64_t>(kSharedBudget / ((d + dv + 2) * es), 1, 32));
  return t;
}

AttentionSource emit_attention(const AttentionSpec& s) {
  if (s.d > kAttentionMaxHeadDim || s.dv > kAttentionMaxHeadDim || s.d < 0 || s.dv < 0)
    throw CompileError(fmt::format("cuda attention: head dims up to {} are supported, got D = {} and Dv = {}",
                                   kAttentionMaxHeadDim, s.d, s.dv));
  if (s.dtype != DType::f32 && s.dtype != DType::f64)
    throw CompileError(fmt::format("cuda attention: no kernel for {}", dtype_name(s.dtype)));
  const AttentionTiles t = attention_tiles(s);
  AttentionSource out;
  out.text = fmt::format("cuda attention v1 {} d={} dv={} mask={} causal={} dropout={} tiles={}x{},{}x{}",
                         dtype_name(s.dtype), s.d, s.dv, mask_name(s.mask), s.causal ? 1 : 0, s.dropout ? 1 : 0,
                         t.fwd_rows, t.fwd_keys, t.kv_rows, t.kv_queries);
  out.name = fmt::format("tessel_attn_{}_d{}_v{}_{}{}{}", dtype_name(s.dtype), s.d, s.dv, "nba"[mask_code(s.mask)],
                         s.causal ? "c" : "", s.dropout ? "p" : "");
  out.forward = out.name + "_fwd";
  out.grad_q = out.name + "_dq";
  out.grad_kv = out.name + "_dkv";
  const std::string targs = fmt::format("{}, {}, {}, {}, {}, {}", ctype(s.dtype), s.d, s.dv, mask_code(s.mask),
                                        s.causal ? "true" : "false", s.dropout ? "true" : "false");
  std::string src(cuda::prelude);
  src += kDeviceCode;
  src += fmt::format("// {}\n", out.text);
  src += fmt::format(
      "extern \"C\" __global__ void __launch_bounds__({0}) {1}(const ts_attn::Args a) {{\n"
      "  ts_attn::forward<{2}, {0}, {3}>(a);\n}}\n",
      t.fwd_rows, out.forward, targs, t.fwd_keys);
  src += fmt::format(
      "extern \"C\" __global__ void __launch_bounds__({0}) {1}(const ts_attn::Args a) {{\n"
      "  ts_attn::grad_q<{2}, {0}, {3}>(a);\n}}\n",
      t.fwd_rows, out.grad_q, targs, t.fwd_keys);
  src += fmt::format(
      "extern \"C\" __global__ void __launch_bounds__({0}) {1}(const ts_attn::Args a) {{\n"
      "  ts_attn::grad_kv<{2}, {0}, {3}>(a);\n}}\n",
      t.kv_rows, out.grad_kv, targs, t.kv_queries);
  out.source = std::move(src);
  return out;
}

static_assert(sizeof(AttentionArgs) == 8 * 8 + 4 * 8 + 4 * 3 * 8 + 4 * 8 + 3 * 8 + 8,
              "AttentionArgs mirrors ts_attn::Args: every field 8 bytes, no padding");

BufferView attention_on_device(exec::StepExecutor& ex, int ordinal, const Node& n, const std::vector<BufferView>& args) {
  if (n.op != Op::Attention && n.op != Op::AttentionGrad)
    throw InternalError(fmt::format("cuda attention: a {} node is no attention", ir::op_name(n.op)));
  const DType t = n.dtype;
  const ir::PreparedAttention p = ir::prepare_attention(
      n, args, [&](size_t i) { return exec::dense_copy(ex, n.args[i]->dtype, n.args[i]->shape, args[i]); });
  const ir::AttentionGeometry& g = p.geometry;
  const AttentionSpec spec = attention_spec(t, g);
  BufferView out = ex.alloc(t, n.shape);
  const bool forward = n.op == Op::Attention;
  if (g.batch == 0 || (forward ? g.tq == 0 : g.tq + g.tk == 0)) return out;

  AttentionArgs a;
  auto set = [&](size_t i, const void** ptr, int64_t* outer, int64_t* inner, int64_t* row) {
    *ptr = p.views[i].bytes(n.args[i]->dtype);
    const ir::OperandLayout& l = p.layouts.operands[i];
    *outer = l.outer;
    *inner = l.inner;
    *row = l.row;
  };
  set(0, &a.q, &a.q_outer, &a.q_inner, &a.q_row);
  set(1, &a.k, &a.k_outer, &a.k_inner, &a.k_row);
  set(2, &a.v, &a.v_outer, &a.v_inner, &a.v_row);
  if (g.mask != AttentionMask::None) {
    const size_t mi = p.views.size() - 1;
    set(mi, &a.mask, &a.m_outer, &a.m_inner, &a.m_row);
    a.m_col = p.layouts.operands[mi].col;
  }
  if (!forward) {
    a.fwd = p.views[3].bytes(t);
    set(4, &a.g, &a.g_outer, &a.g_inner, &a.g_row);
  }
  a.out = out.bytes(t);
  a.batch = g.batch;
  a.inner = p.layouts.inner;
  a.tq = g.tq;
  a.tk = g.tk;
  a.scale = g.scale;
  a.keep_scale = ir::dropout_scale(g.dropout_p);
  a.p_drop = g.dropout_p;
  a.seed = g.seed;

  const AttentionSource src = emit_attention(spec);
  const cuda::Module& m = detail::load_source(ordinal, src.text, src.source, src.name);
  const AttentionTiles tiles = attention_tiles(spec);
  const unsigned grid_y = static_cast<unsigned>(std::min<int64_t>(g.batch, 65535));  // blocks stride the rest
  auto blocks = [](int64_t n, int per) { return static_cast<unsigned>((n + per - 1) / per); };
  void* params[] = {&a};
  if (forward) {
    cuda::launch_kernel(m.function(src.forward.c_str()), {blocks(g.tq, tiles.fwd_rows), grid_y},
                        {static_cast<unsigned>(tiles.fwd_rows)}, 0, nullptr, params);
    detail::bump_stat(&CudaStats::attention_launches);
    return out;
  }
  // delta_i = g_i . o_i, written by the dq kernel, read by the dk/dv kernel
  // (stream-ordered: the allocator hands the block out again only to later work).
  cuda::CachingDeviceAllocator& alloc = cuda::device_allocator(ordinal);
  const size_t delta_bytes = static_cast<size_t>(std::max<int64_t>(g.batch * g.tq, 1)) * dtype_size(t);
  const cuda::CUdeviceptr delta = alloc.allocate(delta_bytes, nullptr);
  a.delta = reinterpret_cast<void*>(delta);
  try {
    if (g.tq > 0)
      cuda::launch_kernel(m.function(src.grad_q.c_str()), {blocks(g.tq, tiles.fwd_rows), grid_y},
                          {static_cast<unsigned>(tiles.fwd_rows)}, 0, nullptr, params);
    if (g.tk > 0)
      cuda::launch_kernel(m.function(src.grad_kv.c_str()), {blocks(g.tk, tiles.kv_rows), grid_y},
                          {static_cast<unsigned>(tiles.kv_rows)}, 0, nullptr, params);
  } catch (...) {
    alloc.deallocate(delta);
    throw;
  }
  alloc.deallocate(delta);
  detail::bump_stat(&CudaStats::attention_launches);
  return out;
}

}  // namespace tessel::cudagen
