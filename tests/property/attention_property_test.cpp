// Fused attention against the composite on random problems: batch dims with
// broadcasting, lengths on and off the tile sizes, head dims, masks (none,
// bool with fully masked rows, additive with -inf), causal, scale, and
// strided (head-transposed) views. The seed is printed; TESSEL_TEST_SEED=<n>
// replays a run.
#include "tests/support/tensor_testing.h"

#include <cmath>
#include <random>

#include "dsl/attention.h"
#include "dsl/indexing.h"

using namespace tessel;
using namespace tessel::testing;

namespace {

Tensor random_tensor(std::mt19937_64& rng, const Shape& s, DType dt) {
  std::normal_distribution<double> n(0, 1);
  std::vector<double> v(static_cast<size_t>(s.numel()));
  for (auto& x : v) x = n(rng);
  return from_vector<double>(v, s).to(dt);
}

}  // namespace

TEST_CASE("property: fused attention equals the composite on random problems", "[property][attention]") {
  std::mt19937_64 rng(test_seed("attention property"));
  auto pick = [&](std::initializer_list<int64_t> xs) {
    std::vector<int64_t> v(xs);
    return v[std::uniform_int_distribution<size_t>(0, v.size() - 1)(rng)];
  };
  for (int round = 0; round < 24; ++round) {
    const DType dt = round % 3 == 0 ? DType::f64 : DType::f32;
    const int64_t B = pick({1, 2, 3}), H = pick({1, 2, 4}), Tq = pick({1, 5, 64, 65, 130}),
                  Tk = pick({1, 7, 64, 129, 200}), D = pick({1, 8, 16, 33}), Dv = pick({1, 8, 16});
    const int kind = static_cast<int>(rng() % 4);  // 0 none, 1 causal, 2 bool mask, 3 additive mask
    const bool k_shared = rng() % 3 == 0, transposed = rng() % 2 == 0;
    INFO("round " << round << ": B=" << B << " H=" << H << " Tq=" << Tq << " Tk=" << Tk << " D=" << D << " Dv=" << Dv
                  << " kind=" << kind << " k_shared=" << k_shared << " transposed=" << transposed << " "
                  << dtype_name(dt));
    Tensor q = transposed ? random_tensor(rng, {B, Tq, H, D}, dt).transpose(1, 2) : random_tensor(rng, {B, H, Tq, D}, dt);
    Tensor k = random_tensor(rng, {B, k_shared ? 1 : H, Tk, D}, dt);
    Tensor v = random_tensor(rng, {B, k_shared ? 1 : H, Tk, Dv}, dt);
    AttentionOptions opt;
    if (kind == 1) opt.causal = true;
    if (kind == 2) opt.mask = random_tensor(rng, {B, 1, Tq, Tk}, DType::f64) > 0.8;  // many rows fully masked when Tk is small
    if (kind == 3)
      opt.mask = where(random_tensor(rng, {Tq, Tk}, DType::f64) > 1.0, full({}, -INFINITY, DType::f64),
                       random_tensor(rng, {Tq, Tk}, DType::f64));
    if (rng() % 2) opt.scale = 0.1 + static_cast<double>(rng() % 100) / 50.0;
    for (Tensor* t : {&q, &k, &v}) t->requires_grad_();
    Tensor w = random_tensor(rng, {B, H, Tq, Dv}, dt);
    auto run = [&](bool fused) {
      for (Tensor* t : {&q, &k, &v}) t->set_grad(Tensor());
      Tensor y = fused ? scaled_dot_product_attention(q, k, v, opt) : scaled_dot_product_attention_math(q, k, v, opt);
      Tensor(y * w).sum().backward();
      return std::vector<std::vector<double>>{vals(y.to(DType::f64)), vals(q.grad().to(DType::f64)),
                                              vals(k.grad().to(DType::f64)), vals(v.grad().to(DType::f64))};
    };
    const auto fused = run(true), comp = run(false);
    const double tol = dt == DType::f64 ? 1e-10 : 2e-5;
    // The two round differently (the fused backward subtracts rowsum(dO * O),
    // the composite differentiates the softmax), and each gradient element
    // adds that rounding over the terms it sums: Tk keys for the output and
    // dq, every query of the heads sharing a key for dk and dv. Rounding
    // adds like a random walk, so the absolute tolerance grows with the
    // square root of the count (with one key, dk is exactly 0 in the
    // composite and rounding noise over H * Tq terms in the fused one).
    const double keys = static_cast<double>(Tk), queries = static_cast<double>(Tq * (k_shared ? H : 1));
    const double terms[] = {keys, keys, queries, queries};
    for (size_t i = 0; i < fused.size(); ++i) {
      INFO("output 0, dq 1, dk 2, dv 3: " << i);
      require_close(fused[i], comp[i], tol, tol * std::sqrt(terms[i]));
    }
  }
}
