// Fused attention on the CPU: one IR node per direction, run by the flash
// kernel (codegen/cpu/flash_attention.h). Checked against the unfused
// composite (scaled_dot_product_attention_math) and the ref loops, with
// tiles that do not divide the sequence, masks, a fully masked row, dropout
// and strided (head-transposed) views; kernel and node counts.
#include "tests/support/tensor_testing.h"

#include <cmath>

#include "codegen/autodiff.h"
#include "codegen/backend.h"
#include "codegen/builders.h"
#include "codegen/cpu/cpu_backend.h"
#include "codegen/cpu/flash_attention.h"
#include "dsl/attention.h"
#include "dsl/indexing.h"

using namespace tessel;
using namespace tessel::testing;

// The exception's type, and a substring of its message.
#define CHECK_ERROR(expr, Type, text)       \
  do {                                      \
    CHECK_THROWS_AS(expr, Type);            \
    CHECK_THROWS_WITH(expr, Catch::Matchers::Contains(text)); \
  } while (0)

namespace {

Tensor pattern(const Shape& s, double scale, double shift, DType dt = DType::f32) {
  std::vector<double> v(static_cast<size_t>(s.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(scale * static_cast<double>(i) + shift);
  return from_vector<double>(v, s).to(dt);
}

std::vector<double> f64(const Tensor& t) { return t.to(DType::f64).to_vector<double>(); }

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) return INFINITY;
    m = std::max(m, std::abs(a[i] - b[i]));
  }
  return m;
}

struct Case {
  const char* what;
  Shape q, k, v;
  AttentionOptions opt;
};

}  // namespace

TEST_CASE("attention forward and backward: fused equals the composite to 1e-5 (f32)", "[jit][attention]") {
  // 150 keys cross the 128-wide key tile (online rescaling); 70 queries cross the 64-row block.
  Tensor bool_mask = pattern({70, 150}, 0.91, 0.2) > 0.3;
  Tensor add_mask = pattern({1, 70, 150}, 0.53, 0.7) * 2.0;
  const std::vector<Case> cases{
      {"plain", {2, 3, 70, 16}, {2, 3, 150, 16}, {2, 3, 150, 8}, {}},
      {"causal", {2, 2, 150, 32}, {2, 2, 150, 32}, {2, 2, 150, 32}, {.causal = true}},
      {"causal, Tq < Tk", {1, 2, 70, 16}, {1, 2, 150, 16}, {1, 2, 150, 16}, {.causal = true}},
      {"bool mask broadcast over batch", {2, 70, 16}, {2, 150, 16}, {2, 150, 16}, {.mask = bool_mask}},
      {"additive mask, scale 0.3", {2, 70, 16}, {2, 150, 16}, {2, 150, 16}, {.mask = add_mask, .scale = 0.3}},
      {"k and v broadcast over heads", {2, 4, 70, 16}, {2, 1, 150, 16}, {2, 1, 150, 16}, {}},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    Tensor q = pattern(c.q, 0.37, 0.1), k = pattern(c.k, 0.71, 0.4), v = pattern(c.v, 1.3, 0.2);
    for (Tensor* t : {&q, &k, &v}) t->requires_grad_();
    Tensor y = scaled_dot_product_attention(q, k, v, c.opt);
    std::vector<int64_t> want(c.q.dims);
    want.back() = c.v.dims.back();
    if (c.k.rank() == 4) want[1] = std::max(c.q[1], c.k[1]);
    CHECK(y.shape() == Shape(want));
    Tensor w = pattern(y.shape(), 0.17, 0.3);
    (y * w).sum().backward();
    std::vector<std::vector<double>> fused{f64(y), f64(q.grad()), f64(k.grad()), f64(v.grad())};
    for (Tensor* t : {&q, &k, &v}) t->set_grad(Tensor());
    Tensor r = scaled_dot_product_attention_math(q, k, v, c.opt);
    (r * w).sum().backward();
    std::vector<std::vector<double>> comp{f64(r), f64(q.grad()), f64(k.grad()), f64(v.grad())};
    for (size_t i = 0; i < fused.size(); ++i) {
      INFO("output 0, dq 1, dk 2, dv 3: " << i);
      CHECK(max_abs_diff(fused[i], comp[i]) < 1e-5);
    }
  }
}

TEST_CASE("attention: a row whose keys are all masked gives zeros and zero gradients, as PyTorch", "[jit][attention]") {
  Tensor q = pattern({3, 4}, 0.37, 0.1), k = pattern({5, 4}, 0.71, 0.4), v = pattern({5, 2}, 1.3, 0.2);
  q.requires_grad_();
  Tensor m = from_vector<double>({1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1}, Shape({3, 5})).to(DType::b8);
  Tensor y = scaled_dot_product_attention(q, k, v, {.mask = m});
  std::vector<double> out = f64(y);
  CHECK(out[2] == 0.0);
  CHECK(out[3] == 0.0);
  CHECK(std::abs(out[0]) > 1e-3);
  y.sum().backward();
  std::vector<double> gq = f64(q.grad());
  for (int c = 0; c < 4; ++c) CHECK(gq[static_cast<size_t>(4 + c)] == 0.0);
  for (double x : gq) CHECK(std::isfinite(x));
}

TEST_CASE("attention on the CPU: one fused node per direction, q read in place from a head-transposed view",
          "[jit][attention]") {
  const int64_t B = 2, T = 100, H = 4, D = 16;
  Tensor x = pattern({B, T, 3 * H * D}, 0.37, 0.1);
  x.eval();
  std::vector<Tensor> qkv = split(x, H * D, 2);
  auto heads = [&](const Tensor& t) { return t.view({B, T, H, D}).transpose(1, 2); };
  reset_cpu_jit_stats();
  Tensor y = scaled_dot_product_attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]), {.causal = true});
  y.eval();
  CpuJitStats s = cpu_jit_stats();
  CHECK(s.attentions == 1);
  CHECK(s.kernels_launched == 0);  // no copies of q, k, v, no score kernels
  CHECK(s.fallbacks == 0);
  CHECK(y.shape() == Shape({B, H, T, D}));
  Tensor r = scaled_dot_product_attention_math(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]), {.causal = true});
  CHECK(max_abs_diff(f64(y), f64(r)) < 1e-5);
}

TEST_CASE("attention in f64 on the fused kernel equals the ref loops to 1e-12", "[jit][attention]") {
  Tensor q = pattern({2, 2, 77, 8}, 0.37, 0.1, DType::f64), k = pattern({2, 2, 77, 8}, 0.71, 0.4, DType::f64),
         v = pattern({2, 2, 77, 8}, 1.3, 0.2, DType::f64);
  for (Tensor* t : {&q, &k, &v}) t->requires_grad_();
  auto run = [&] {
    for (Tensor* t : {&q, &k, &v}) t->set_grad(Tensor());
    Tensor y = scaled_dot_product_attention(q, k, v, {.causal = true, .dropout_p = 0.25});
    (y * pattern(y.shape(), 0.17, 0.3, DType::f64)).sum().backward();
    return std::vector<std::vector<double>>{f64(y), f64(q.grad()), f64(k.grad()), f64(v.grad())};
  };
  manual_seed(7);
  auto fused = run();
  std::vector<std::vector<double>> ref;
  {
    BackendOverride o(ref_backend());
    manual_seed(7);
    ref = run();
  }
  for (size_t i = 0; i < fused.size(); ++i) CHECK(max_abs_diff(fused[i], ref[i]) < 1e-12);
  // Dropout's pattern replays under manual_seed and changes with the seed.
  manual_seed(7);
  CHECK(f64(scaled_dot_product_attention(q, k, v, {.causal = true, .dropout_p = 0.25})) == fused[0]);
  manual_seed(8);
  CHECK(f64(scaled_dot_product_attention(q, k, v, {.causal = true, .dropout_p = 0.25})) != fused[0]);
}

TEST_CASE("attention dropout keeps 1 - p of the weights, scaled by 1 / (1 - p)", "[jit][attention]") {
  // v = identity over the keys: each output row is the row's (dropped) weights.
  const int64_t T = 256;
  Tensor q = zeros({1, T, 4}), k = zeros({1, T, 4}), v = eye(T).unsqueeze(0);
  manual_seed(3);
  std::vector<double> w = f64(scaled_dot_product_attention(q, k, v, {.dropout_p = 0.2}));
  int64_t kept = 0;
  for (double x : w) {
    const bool zero = x == 0.0, scaled = std::abs(x - 1.0 / T / 0.8) < 1e-7;
    CHECK((zero || scaled));
    kept += scaled;
  }
  const double frac = static_cast<double>(kept) / static_cast<double>(T * T);
  CHECK(std::abs(frac - 0.8) < 0.01);
}

TEST_CASE("attention: user mistakes are clear errors", "[jit][attention][errors]") {
  Tensor q = zeros({2, 5, 8}), k = zeros({2, 6, 8}), v = zeros({2, 6, 4});
  CHECK_ERROR(scaled_dot_product_attention(q, zeros({2, 6, 7}), v), ShapeError,
                       "query and key must have the same last dim (E)");
  CHECK_ERROR(scaled_dot_product_attention(q, k, zeros({2, 5, 4})), ShapeError,
                       "key and value must have the same number of keys");
  CHECK_ERROR(scaled_dot_product_attention(q, k, v, {.mask = ones({5, 6}, DType::b8), .causal = true}),
                       ValueError, "either a mask or causal = true");
  CHECK_ERROR(scaled_dot_product_attention(q, k, v, {.mask = ones({5, 7}, DType::b8)}), ShapeError,
                       "the mask of shape [5, 7] does not broadcast");
  CHECK_ERROR(scaled_dot_product_attention(q, k, v, {.mask = ones({5, 6}, DType::i64)}), DTypeError,
                       "the mask must be bool");
  CHECK_ERROR(scaled_dot_product_attention(q, k, v, {.dropout_p = 1.5}), ValueError,
                       "dropout_p must be in [0, 1]");
  CHECK_ERROR(scaled_dot_product_attention(zeros({5}), k, v), ShapeError,
                       "query must have at least 2 dims");
  CHECK_ERROR(scaled_dot_product_attention(q.to(DType::i64), k, v), DTypeError,
                       "query must be floating");
  Tensor m = zeros({5, 6});
  m.requires_grad_();
  CHECK_ERROR(scaled_dot_product_attention(q, k, v, {.mask = m}), ValueError,
                       "the mask requires grad");
}

TEST_CASE("attention: double backward through the fused op is refused with a pointer to the composite",
          "[jit][attention][errors]") {
  Tensor q = pattern({3, 4}, 0.37, 0.1, DType::f64);
  q.requires_grad_();
  Tensor loss = scaled_dot_product_attention(q, q, q).sum();
  ir::NodePtr G;
  for (auto& lg : autodiff::gradients(loss.node(), ir::constant(ir::ScalarValue::of(1.0), DType::f64), true))
    if (lg.leaf == q.node().get()) G = lg.grad;
  REQUIRE(G);
  ir::NodePtr second = ir::reduce(ir::Op::Sum, G, {}, false);
  CHECK_ERROR(autodiff::gradients(second, ir::constant(ir::ScalarValue::of(1.0), DType::f64), true),
                       ValueError, "use scaled_dot_product_attention_math");
}

TEST_CASE("attention key tiles keep every GEMM on OpenBLAS's calling thread", "[jit][attention]") {
  CHECK(cpu_attention::key_tile(32, 32) == 128);
  CHECK(cpu_attention::key_tile(64, 64) == 64);
  CHECK(cpu_attention::key_tile(128, 64) == 32);
  CHECK(cpu_attention::key_tile(1024, 16) == 16);
  for (int64_t d : {8, 32, 64, 100, 128})
    CHECK(64 * cpu_attention::key_tile(d, d) * d <= 64 * 64 * 64);
}
