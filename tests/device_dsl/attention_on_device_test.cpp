// Attention and AttentionGrad nodes on gpu(0) -- the generated flash-attention
// kernels (codegen/cuda/attention_kernels.h) -- against the ref loops
// (codegen/ref/attention_loops.h, the oracle) over the same values: the
// forward's output and row log-sum-exps, and dq, dk, dv. Sequence lengths that
// are no multiple of a tile, Tq != Tk, causal, bool and additive masks (full
// and broadcast), fully masked rows (zero output, -inf lse, zero gradients),
// dropout (the keep pattern bit for bit), a non-contiguous q (a transposed
// [B, T, H, D] view read in place), f32 and f64. Every node must run on the
// attention kernels (CudaStats::attention_launches), none on the host. The same
// program runs on a real GPU (label gpu) and on the emulated device (label
// emulated-gpu). Without a GPU the program exits 77 (Skipped).
#include <catch2/catch.hpp>

#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "codegen/attention_geometry.h"
#include "codegen/builders.h"
#include "codegen/cuda/cuda_backend.h"
#include "codegen/ref/attention_loops.h"
#include "dsl/attention.h"
#include "dsl/tessel.h"

using namespace tessel;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<double> host(const Tensor& t) { return t.cpu().to(DType::f64).to_vector<double>(); }

// |got - want| <= tol * max(1, |want|) elementwise; infinities must match exactly.
void check_close(const std::vector<double>& got, const std::vector<double>& want, double tol, const char* what) {
  INFO(what);
  REQUIRE(got.size() == want.size());
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool ok = std::isinf(want[i]) ? got[i] == want[i]
                                        : std::fabs(got[i] - want[i]) <= tol * std::max(1.0, std::fabs(want[i]));
    if (!ok && bad++ < 5) {
      INFO("element " << i << ": got " << got[i] << ", want " << want[i]);
      CHECK(ok);
    }
  }
  CHECK(bad == 0);
}

// One problem: q [B, H, Tq, D], k [B, H, Tk, D], v [B, H, Tk, Dv] and a mask
// broadcastable to [B, H, Tq, Tk], all made on the host, then moved to gpu(0).
struct Problem {
  DType dtype = DType::f32;
  int64_t B = 2, H = 3, tq = 37, tk = 45, d = 16, dv = 16;
  ir::AttentionAttrs attrs;
  Tensor q, k, v, mask;  // host values as the node reads them (q may be a transposed view)
  bool q_transposed = false;
  bool k_transposed = false;  // k is a [B, H, D, Tk] transposed: its last dim is strided (copied dense)
};

Tensor random(DType t, const Shape& s) { return randn(s, t); }

// The q of a problem: dense [B, H, Tq, D], or the transposed view of a dense [B, Tq, H, D].
Tensor make_q(const Problem& p) {
  if (!p.q_transposed) return random(p.dtype, {p.B, p.H, p.tq, p.d});
  return random(p.dtype, {p.B, p.tq, p.H, p.d}).transpose(1, 2);
}

// A tensor's values as a dense host vector of T (after broadcasting to `full`).
template <class T> std::vector<T> dense_values(const Tensor& t, const std::vector<int64_t>& full) {
  Tensor x = t.cpu();
  if (!(x.shape() == Shape(full))) x = x.expand(full);
  return x.contiguous().to_vector<T>();
}

struct Expected {
  std::vector<double> fwd, grads;
};

// The ref loops over dense host copies: the forward value and the packed
// gradients from output gradient `go` (dense [B, H, Tq, Dv]).
template <class T> Expected oracle(const Problem& p, const Tensor& go) {
  ir::AttentionGeometry g;
  g.batch = p.B * p.H;
  g.tq = p.tq;
  g.tk = p.tk;
  g.d = p.d;
  g.dv = p.dv;
  g.scale = p.attrs.scale;
  g.causal = p.attrs.causal;
  g.mask = p.attrs.mask;
  g.dropout_p = p.attrs.dropout_p;
  g.seed = p.attrs.seed;
  const std::vector<T> q = dense_values<T>(p.q, {p.B, p.H, p.tq, p.d});
  const std::vector<T> k = dense_values<T>(p.k, {p.B, p.H, p.tk, p.d});
  const std::vector<T> v = dense_values<T>(p.v, {p.B, p.H, p.tk, p.dv});
  const std::vector<T> gv = dense_values<T>(go, {p.B, p.H, p.tq, p.dv});
  std::vector<uint8_t> mb;
  std::vector<T> ma;
  auto dense = [](int64_t rows, int64_t cols) {
    ir::OperandLayout l;
    l.outer = 0;  // one batch group of g.batch
    l.inner = rows * cols;
    l.row = cols;
    l.col = 1;
    return l;
  };
  ir::AttentionOperands<T> a;
  a.q = q.data();
  a.k = k.data();
  a.v = v.data();
  a.lq = dense(p.tq, p.d);
  a.lk = dense(p.tk, p.d);
  a.lv = dense(p.tk, p.dv);
  a.inner = g.batch;
  if (p.attrs.mask == ir::AttentionMask::Bool) {
    mb = dense_values<uint8_t>(p.mask, {p.B, p.H, p.tq, p.tk});
    a.mask = mb.data();
  } else if (p.attrs.mask == ir::AttentionMask::Additive) {
    ma = dense_values<T>(p.mask, {p.B, p.H, p.tq, p.tk});
    a.mask = ma.data();
  }
  a.lm = dense(p.tq, p.tk);
  std::vector<T> fwd(static_cast<size_t>(g.batch * p.tq * (p.dv + 1)));
  std::vector<T> grads(static_cast<size_t>(g.batch * (p.tq * p.d + p.tk * p.d + p.tk * p.dv)));
  ref::attention_forward(g, a, fwd.data());
  ref::attention_backward(g, a, fwd.data(), gv.data(), dense(p.tq, p.dv), grads.data());
  return {std::vector<double>(fwd.begin(), fwd.end()), std::vector<double>(grads.begin(), grads.end())};
}

struct Got {
  std::vector<double> fwd, grads;
};

// The two nodes over the problem's tensors moved to gpu(0), realized there.
Got on_gpu(const Problem& p, const Tensor& go) {
  auto dev = [](const Tensor& t) { return t.to(gpu(0)); };
  // q moves as its dense base, then is viewed as the problem's view on the device.
  Tensor qg = p.q_transposed ? dev(p.q.transpose(1, 2).contiguous()).transpose(1, 2) : dev(p.q);
  Tensor kg = p.k_transposed ? dev(p.k.transpose(2, 3).contiguous()).transpose(2, 3) : dev(p.k);
  ir::NodePtr mask = p.mask.defined() ? dev(p.mask).node() : nullptr;
  ir::NodePtr fwd = ir::attention(qg.node(), kg.node(), dev(p.v).node(), mask, p.attrs);
  Tensor f = Tensor::from_node(fwd, gpu(0));
  Tensor gr = Tensor::from_node(ir::attention_grad(fwd, dev(go).node()), gpu(0));
  CHECK(f.device() == gpu(0));
  return {host(f), host(gr)};
}

void check_problem(Problem p) {
  const double tol = p.dtype == DType::f32 ? 1e-5 : 1e-10;
  if (p.attrs.scale == 1.0) p.attrs.scale = 1.0 / std::sqrt(static_cast<double>(p.d));
  const Tensor go = random(p.dtype, {p.B, p.H, p.tq, p.dv});
  const Expected want = p.dtype == DType::f32 ? oracle<float>(p, go) : oracle<double>(p, go);
  const CudaStats before = cuda_stats();
  const Got got = on_gpu(p, go);
  check_close(got.fwd, want.fwd, tol, "forward: output and lse");
  check_close(got.grads, want.grads, tol, "gradients: dq, dk, dv");
  CHECK(cuda_stats().attention_launches == before.attention_launches + 2);
  CHECK(cuda_stats().host_evals == before.host_evals);
  // Operands are read in place (transposed q, broadcast masks); only a strided last dim is copied, by a kernel.
  CHECK((cuda_stats().kernels_launched > before.kernels_launched) == p.k_transposed);
}

// A bool mask [B, H, Tq, Tk] from the host, true with probability `keep`,
// with query row `dead_row` of (batch 0, head 1) entirely false.
Tensor bool_mask(const Problem& p, double keep, int64_t dead_row, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<double> m(static_cast<size_t>(p.B * p.H * p.tq * p.tk));
  for (double& x : m) x = u(rng) < keep ? 1.0 : 0.0;
  for (int64_t j = 0; j < p.tk; ++j) m[static_cast<size_t>(((0 * p.H + 1) * p.tq + dead_row) * p.tk + j)] = 0.0;
  return from_vector<double>(m, {p.B, p.H, p.tq, p.tk}).to(DType::b8);
}

}  // namespace

TEST_CASE("attention on gpu(0) matches the ref loops: T no multiple of a tile and a transposed q", "[gpu][attention]") {
  manual_seed(101);
  Problem p;
  p.q_transposed = true;  // x.view(B, T, H, D).transpose(1, 2), read in place
  p.q = make_q(p);
  p.k = random(p.dtype, {p.B, p.H, p.tk, p.d});
  p.v = random(p.dtype, {p.B, p.H, p.tk, p.dv});
  REQUIRE_FALSE(p.q.is_contiguous());
  check_problem(p);
  // A k whose rows are strided columns: the engine reads a dense copy of it.
  p.k_transposed = true;
  p.k = random(p.dtype, {p.B, p.H, p.d, p.tk}).transpose(2, 3);
  check_problem(p);
}

TEST_CASE("attention on gpu(0) matches the ref loops: causal over more than one block of rows", "[gpu][attention]") {
  manual_seed(102);
  Problem p;
  p.B = 1;
  p.H = 2;
  p.tq = p.tk = 70;  // two blocks of 64 rows: the second one's key loop reaches past the first's
  p.attrs.causal = true;
  p.q = make_q(p);
  p.k = random(p.dtype, {p.B, p.H, p.tk, p.d});
  p.v = random(p.dtype, {p.B, p.H, p.tk, p.dv});
  check_problem(p);
  // Tq < Tk: the triangle is top-left aligned (query i sees keys 0 .. i).
  p.tq = 21;
  p.q = make_q(p);
  check_problem(p);
}

TEST_CASE("attention on gpu(0) matches the ref loops: bool masks, full and broadcast, and a fully masked row",
          "[gpu][attention]") {
  manual_seed(103);
  Problem p;
  p.attrs.mask = ir::AttentionMask::Bool;
  p.q = make_q(p);
  p.k = random(p.dtype, {p.B, p.H, p.tk, p.d});
  p.v = random(p.dtype, {p.B, p.H, p.tk, p.dv});
  p.mask = bool_mask(p, 0.6, 5, 7);
  {
    INFO("a full [B, H, Tq, Tk] mask with a fully masked row");
    check_problem(p);
  }
  {
    INFO("a [Tq, Tk] mask broadcast over batch and heads");
    p.mask = bool_mask(p, 0.7, 0, 8).slice(0, 0, 1).slice(1, 0, 1).reshape({p.tq, p.tk});
    check_problem(p);
  }
  {
    INFO("a key padding mask [B, 1, 1, Tk]: batch 1 attends to no key at all");
    std::vector<double> m(static_cast<size_t>(p.B * p.tk), 1.0);
    for (int64_t j = 30; j < p.tk; ++j) m[static_cast<size_t>(j)] = 0.0;
    for (int64_t j = 0; j < p.tk; ++j) m[static_cast<size_t>(p.tk + j)] = 0.0;
    p.mask = from_vector<double>(m, {p.B, 1, 1, p.tk}).to(DType::b8);
    check_problem(p);
  }
}

TEST_CASE("attention on gpu(0) matches the ref loops: an additive mask with -inf entries and a fully masked row",
          "[gpu][attention]") {
  manual_seed(104);
  Problem p;
  p.attrs.mask = ir::AttentionMask::Additive;
  p.q = make_q(p);
  p.k = random(p.dtype, {p.B, p.H, p.tk, p.d});
  p.v = random(p.dtype, {p.B, p.H, p.tk, p.dv});
  std::vector<double> m = random(DType::f64, {p.B, p.H, p.tq, p.tk}).to_vector<double>();
  for (size_t e = 0; e < m.size(); e += 7) m[e] = -kInf;
  for (int64_t j = 0; j < p.tk; ++j) m[static_cast<size_t>((1 * p.H * p.tq + 2) * p.tk + j)] = -kInf;  // (1, 0, 2)
  p.mask = from_vector<double>(m, {p.B, p.H, p.tq, p.tk}).to(p.dtype);
  check_problem(p);
}

TEST_CASE("attention on gpu(0) with dropout keeps exactly the ref's probabilities", "[gpu][attention]") {
  manual_seed(105);
  Problem p;
  p.B = 1;
  p.tq = 33;
  p.tk = p.dv = 40;
  p.attrs.dropout_p = 0.3;
  p.attrs.seed = 0x1234567890abcdefull;
  p.q = make_q(p);
  p.k = random(p.dtype, {p.B, p.H, p.tk, p.d});
  {
    // v = I: out[i][j] = p_ij * keep_ij / (1 - p), zero exactly where dropped.
    std::vector<double> eye(static_cast<size_t>(p.B * p.H * p.tk * p.tk), 0.0);
    for (int64_t h = 0; h < p.H; ++h)
      for (int64_t j = 0; j < p.tk; ++j) eye[static_cast<size_t>((h * p.tk + j) * p.tk + j)] = 1.0;
    p.v = from_vector<double>(eye, {p.B, p.H, p.tk, p.dv}).to(p.dtype);
    const Got got = on_gpu(p, random(p.dtype, {p.B, p.H, p.tq, p.dv}));
    ir::AttentionGeometry g;
    g.batch = p.B * p.H;
    g.tq = p.tq;
    g.tk = p.tk;
    g.dropout_p = p.attrs.dropout_p;
    g.seed = p.attrs.seed;
    int64_t dropped = 0, mismatches = 0;
    for (int64_t bh = 0; bh < g.batch; ++bh)
      for (int64_t i = 0; i < p.tq; ++i)
        for (int64_t j = 0; j < p.tk; ++j) {
          const bool kept = got.fwd[static_cast<size_t>((bh * p.tq + i) * (p.dv + 1) + j)] != 0.0;
          dropped += !kept;
          mismatches += kept != ir::attention_keep(g, bh, i, j);
        }
    CHECK(mismatches == 0);
    CHECK(dropped > g.batch * p.tq * p.tk / 5);  // about 30% dropped
    CHECK(dropped < g.batch * p.tq * p.tk * 2 / 5);
  }
  p.v = random(p.dtype, {p.B, p.H, p.tk, p.dv});
  check_problem(p);
}

TEST_CASE("attention on gpu(0) in f64 matches the ref loops: D != Dv, causal with an additive mask, dropout",
          "[gpu][attention]") {
  manual_seed(106);
  Problem p;
  p.dtype = DType::f64;
  p.B = 1;
  p.tq = 50;
  p.tk = 67;
  p.d = 32;
  p.dv = 24;
  p.attrs.causal = true;
  p.attrs.mask = ir::AttentionMask::Additive;
  p.attrs.dropout_p = 0.2;
  p.attrs.seed = 99;
  p.q_transposed = true;
  p.q = make_q(p);
  p.k = random(p.dtype, {p.B, p.H, p.tk, p.d});
  p.v = random(p.dtype, {p.B, p.H, p.tk, p.dv});
  p.mask = random(p.dtype, {p.tq, p.tk});  // broadcast over batch and heads
  check_problem(p);
}

TEST_CASE("scaled_dot_product_attention on gpu(0): forward and gradients match the unfused math on the CPU",
          "[gpu][attention]") {
  manual_seed(107);
  const int64_t B = 2, T = 19, H = 2, D = 16;
  Tensor x = randn({B, T, H, D}), k = randn({B, H, T, D}), v = randn({B, H, T, D});
  Tensor q = x.transpose(1, 2);
  Tensor xg = x.to(gpu(0)), kg = k.to(gpu(0)), vg = v.to(gpu(0));
  for (Tensor* t : {&x, &k, &v, &xg, &kg, &vg}) t->requires_grad_(true);
  const AttentionOptions o{.causal = true};
  Tensor y = scaled_dot_product_attention_math(x.transpose(1, 2), k, v, o);
  Tensor r = randn_like(y);
  (y * r).sum().backward();
  const CudaStats before = cuda_stats();
  Tensor yg = scaled_dot_product_attention(xg.transpose(1, 2), kg, vg, o);
  CHECK(yg.device() == gpu(0));
  (yg * r.to(gpu(0))).sum().backward();
  check_close(host(yg), host(y), 1e-5, "output");
  check_close(host(xg.grad()), host(x.grad()), 1e-5, "q gradient");
  check_close(host(kg.grad()), host(k.grad()), 1e-5, "k gradient");
  check_close(host(vg.grad()), host(v.grad()), 1e-5, "v gradient");
  CHECK(cuda_stats().attention_launches >= before.attention_launches + 2);
  CHECK(cuda_stats().host_evals == before.host_evals);
}

TEST_CASE("attention on gpu(0) with TESSEL_JIT=off refuses to compile its kernels", "[gpu][attention]") {
  manual_seed(108);
  // A head dim no other test uses: its kernels are not loaded in this process yet.
  Tensor q = randn({1, 5, 8}).to(gpu(0)), k = randn({1, 6, 8}).to(gpu(0)), v = randn({1, 6, 8}).to(gpu(0));
  ir::AttentionAttrs a;
  a.scale = 0.5;
  Tensor y = Tensor::from_node(ir::attention(q.node(), k.node(), v.node(), nullptr, a), gpu(0));
  setenv("TESSEL_JIT", "off", 1);
  CHECK_THROWS_WITH(y.cpu(), Catch::Contains("TESSEL_JIT=off") && Catch::Contains("cuda attention v1 f32 d=8"));
  unsetenv("TESSEL_JIT");
}
