// Every differentiable op against central finite differences in f64, on
// random shapes that broadcast. Each TEST_CASE checks several random shapes.
#include "gradcheck.h"

#include <cmath>

#include "codegen/autodiff.h"
#include "codegen/builders.h"
#include "dsl/attention.h"
#include "dsl/convolution.h"
#include "dsl/normalization.h"
#include "dsl/pooling.h"
#include "dsl/reductions.h"

using namespace tessel;
using namespace gradcheck;

namespace {

constexpr int kShapes = 8;  // random shape draws per op

// One-input op over random shapes (rank 0..3).
void unary(const char* name, uint64_t salt, Domain dom, const Fn& f) {
  auto rng = rng_for(name, salt);
  Shapes sh{rng};
  for (int k = 0; k < kShapes; ++k) {
    Dims s = sh.target();
    check(std::string(name) + " on " + str(s), f, {random_input(rng, s, dom)}, rng);
  }
}

// Two-input op over random shapes that broadcast against each other.
void binary(const char* name, uint64_t salt, Domain da, Domain db, const Fn& f) {
  auto rng = rng_for(name, salt);
  Shapes sh{rng};
  for (int k = 0; k < kShapes; ++k) {
    Dims t = sh.target();
    Dims a = sh.broadcastable_to(t), b = sh.broadcastable_to(t);
    check(std::string(name) + " on " + str(a) + " and " + str(b), f,
          {random_input(rng, a, da), random_input(rng, b, db)}, rng);
  }
}

}  // namespace

TEST_CASE("gradcheck: neg", "[gradcheck]") {
  unary("neg", 1, Domain::any, [](const auto& x) { return Tensor(-x[0]); });
}
TEST_CASE("gradcheck: abs", "[gradcheck]") {
  unary("abs", 2, Domain::away_from_zero, [](const auto& x) { return x[0].abs(); });
}
TEST_CASE("gradcheck: exp", "[gradcheck]") {
  unary("exp", 3, Domain::any, [](const auto& x) { return x[0].exp(); });
}
TEST_CASE("gradcheck: log", "[gradcheck]") {
  unary("log", 4, Domain::positive, [](const auto& x) { return x[0].log(); });
}
TEST_CASE("gradcheck: sqrt", "[gradcheck]") {
  unary("sqrt", 5, Domain::positive, [](const auto& x) { return x[0].sqrt(); });
}
TEST_CASE("gradcheck: tanh", "[gradcheck]") {
  unary("tanh", 6, Domain::any, [](const auto& x) { return Tensor(tanh(x[0])); });
}
TEST_CASE("gradcheck: sigmoid", "[gradcheck]") {
  unary("sigmoid", 7, Domain::any, [](const auto& x) { return x[0].sigmoid(); });
}
TEST_CASE("gradcheck: relu", "[gradcheck]") {
  unary("relu", 8, Domain::away_from_zero, [](const auto& x) { return Tensor(relu(x[0])); });
}
TEST_CASE("gradcheck: sin", "[gradcheck]") {
  unary("sin", 101, Domain::any, [](const auto& x) { return x[0].sin(); });
}
TEST_CASE("gradcheck: cos", "[gradcheck]") {
  unary("cos", 102, Domain::any, [](const auto& x) { return Tensor(cos(x[0])); });
}
TEST_CASE("gradcheck: erf", "[gradcheck]") {
  unary("erf", 103, Domain::any, [](const auto& x) { return x[0].erf(); });
}
TEST_CASE("gradcheck: log1p", "[gradcheck]") {
  unary("log1p", 104, Domain::positive, [](const auto& x) { return x[0].log1p(); });
}
TEST_CASE("gradcheck: expm1", "[gradcheck]") {
  unary("expm1", 105, Domain::any, [](const auto& x) { return x[0].expm1(); });
}
TEST_CASE("gradcheck: rsqrt", "[gradcheck]") {
  unary("rsqrt", 106, Domain::positive, [](const auto& x) { return x[0].rsqrt(); });
}
TEST_CASE("gradcheck: reciprocal", "[gradcheck]") {
  unary("reciprocal", 107, Domain::away_from_zero, [](const auto& x) { return x[0].reciprocal(); });
}
TEST_CASE("gradcheck: gelu, exact and tanh", "[gradcheck]") {
  unary("gelu", 108, Domain::any, [](const auto& x) { return gelu(x[0]); });
  unary("gelu tanh", 109, Domain::any, [](const auto& x) { return gelu(x[0], "tanh"); });
}
TEST_CASE("gradcheck: silu", "[gradcheck]") {
  unary("silu", 110, Domain::any, [](const auto& x) { return silu(x[0]); });
}
TEST_CASE("gradcheck: softplus with beta and threshold", "[gradcheck]") {
  unary("softplus", 111, Domain::any, [](const auto& x) { return softplus(x[0]); });
  // Threshold 0.5 at beta 2: both branches of the select are taken.
  unary("softplus 2 0.5", 112, Domain::any, [](const auto& x) { return softplus(x[0], 2.0, 0.5); });
}
TEST_CASE("gradcheck: clamp", "[gradcheck]") {
  unary("clamp", 113, Domain::any, [](const auto& x) { return x[0].clamp(-0.5, 0.5); });
  unary("clamp min", 114, Domain::any, [](const auto& x) { return x[0].clamp(0.25); });
}
// Piecewise constant: a zero gradient away from the jumps (random inputs miss them).
TEST_CASE("gradcheck: sign floor ceil round", "[gradcheck]") {
  unary("sign times x", 115, Domain::away_from_zero, [](const auto& x) { return Tensor(x[0].sign() * x[0]); });
  unary("floor plus x", 116, Domain::any, [](const auto& x) { return Tensor(x[0].floor() + x[0]); });
  unary("ceil plus x", 117, Domain::any, [](const auto& x) { return Tensor(x[0].ceil() + x[0]); });
  unary("round plus x", 118, Domain::any, [](const auto& x) { return Tensor(x[0].round() + x[0]); });
}
TEST_CASE("gradcheck: pow with scalar exponents", "[gradcheck]") {
  unary("pow 2", 9, Domain::any, [](const auto& x) { return x[0].pow(2); });
  unary("pow 3", 10, Domain::any, [](const auto& x) { return Tensor(pow(x[0], 3)); });
  unary("pow 0.5", 11, Domain::positive, [](const auto& x) { return x[0].pow(0.5); });
  unary("pow -1.5", 12, Domain::positive, [](const auto& x) { return x[0].pow(-1.5); });
}
TEST_CASE("gradcheck: pow with a tensor exponent", "[gradcheck]") {
  binary("pow(a, b)", 13, Domain::positive, Domain::any, [](const auto& x) { return pow(x[0], x[1]); });
}
TEST_CASE("gradcheck: scalar base to a tensor power", "[gradcheck]") {
  unary("2^x", 14, Domain::any, [](const auto& x) { return pow(full({}, 2.0, DType::f64), x[0]); });
}
TEST_CASE("gradcheck: add", "[gradcheck]") {
  binary("add", 15, Domain::any, Domain::any, [](const auto& x) { return Tensor(x[0] + x[1]); });
}
TEST_CASE("gradcheck: sub", "[gradcheck]") {
  binary("sub", 16, Domain::any, Domain::any, [](const auto& x) { return Tensor(x[0] - x[1]); });
}
TEST_CASE("gradcheck: mul", "[gradcheck]") {
  binary("mul", 17, Domain::any, Domain::any, [](const auto& x) { return Tensor(x[0] * x[1]); });
}
TEST_CASE("gradcheck: div", "[gradcheck]") {
  binary("div", 18, Domain::any, Domain::away_from_zero, [](const auto& x) { return Tensor(x[0] / x[1]); });
}
TEST_CASE("gradcheck: ops with python scalars", "[gradcheck]") {
  unary("x * 2.5 - 1", 19, Domain::any, [](const auto& x) { return Tensor(x[0] * 2.5 - 1); });
  unary("3 / x", 20, Domain::away_from_zero, [](const auto& x) { return Tensor(3 / x[0]); });
  unary("1 - x", 21, Domain::any, [](const auto& x) { return Tensor(1 - x[0]); });
}
TEST_CASE("gradcheck: maximum", "[gradcheck]") {
  binary("maximum", 22, Domain::any, Domain::any, [](const auto& x) { return maximum(x[0], x[1]); });
}
TEST_CASE("gradcheck: minimum", "[gradcheck]") {
  binary("minimum", 23, Domain::any, Domain::any, [](const auto& x) { return minimum(x[0], x[1]); });
}
TEST_CASE("gradcheck: maximum with a scalar", "[gradcheck]") {
  unary("maximum(x, 0.25)", 24, Domain::away_from_zero, [](const auto& x) { return Tensor(maximum(x[0], 0.1)); });
}
TEST_CASE("gradcheck: where", "[gradcheck]") {
  auto rng = rng_for("where", 25);
  Shapes sh{rng};
  for (int k = 0; k < kShapes; ++k) {
    Dims t = sh.target();
    Dims c = sh.broadcastable_to(t), a = sh.broadcastable_to(t), b = sh.broadcastable_to(t);
    // The condition is an input too: its gradient must be zero.
    check("where on " + str(c) + ", " + str(a) + ", " + str(b),
          [](const auto& x) { return where(x[0] > 0, x[1], x[2]); },
          {random_input(rng, c, Domain::away_from_zero), random_input(rng, a, Domain::any),
           random_input(rng, b, Domain::any)},
          rng);
  }
}
TEST_CASE("gradcheck: sum over everything, dims, keepdim and negative dims", "[gradcheck]") {
  unary("sum()", 26, Domain::any, [](const auto& x) { return x[0].sum(); });
  auto rng = rng_for("sum dims", 27);
  for (int k = 0; k < kShapes; ++k) {
    Dims s = {std::uniform_int_distribution<int64_t>(1, 3)(rng), std::uniform_int_distribution<int64_t>(1, 3)(rng),
              std::uniform_int_distribution<int64_t>(1, 3)(rng)};
    bool keep = k % 2;
    std::vector<int64_t> dims = k % 3 == 0 ? std::vector<int64_t>{0} : k % 3 == 1 ? std::vector<int64_t>{-1, 0}
                                                                                  : std::vector<int64_t>{1};
    check("sum dims on " + str(s), [=](const auto& x) { return x[0].sum(dims, keep); },
          {random_input(rng, s, Domain::any)}, rng);
  }
}
TEST_CASE("gradcheck: mean over everything and dims", "[gradcheck]") {
  unary("mean()", 28, Domain::any, [](const auto& x) { return x[0].mean(); });
  auto rng = rng_for("mean dims", 29);
  for (int k = 0; k < kShapes; ++k) {
    Dims s = {std::uniform_int_distribution<int64_t>(1, 3)(rng), std::uniform_int_distribution<int64_t>(2, 4)(rng)};
    bool keep = k % 2;
    check("mean dims on " + str(s), [=](const auto& x) { return x[0].mean({-1}, keep); },
          {random_input(rng, s, Domain::any)}, rng);
  }
}
TEST_CASE("gradcheck: max and min over everything and over a dim", "[gradcheck]") {
  unary("max()", 30, Domain::any, [](const auto& x) { return x[0].max(); });
  unary("min()", 31, Domain::any, [](const auto& x) { return x[0].min(); });
  auto rng = rng_for("max dim", 32);
  for (int k = 0; k < kShapes; ++k) {
    Dims s = {std::uniform_int_distribution<int64_t>(1, 3)(rng), std::uniform_int_distribution<int64_t>(2, 4)(rng)};
    int64_t d = k % 2 ? -1 : 0;
    bool keep = (k / 2) % 2;
    check("max dim on " + str(s), [=](const auto& x) { return x[0].max(d, keep); }, {random_input(rng, s, Domain::any)},
          rng);
    check("min dim on " + str(s), [=](const auto& x) { return x[0].min(d, keep); }, {random_input(rng, s, Domain::any)},
          rng);
  }
}
namespace {
// [4, 4] away from zero, then zeros: row 0 has one (col 3), row 1 one (col 2),
// row 2 two (cols 0 and 3), row 3 none; col 0 has one, col 1 none, col 2 one,
// col 3 two.
Input with_zeros(std::mt19937_64& rng) {
  Input z = random_input(rng, {4, 4}, Domain::away_from_zero);
  for (int at : {3, 6, 8, 11}) z.v[static_cast<size_t>(at)] = 0;
  return z;
}
}  // namespace
TEST_CASE("gradcheck: prod over everything and along a dim, rows with one and with two zeros", "[gradcheck]") {
  unary("prod()", 140, Domain::any, [](const auto& x) { return x[0].prod(); });
  auto rng = rng_for("prod dim", 141);
  for (int k = 0; k < kShapes; ++k) {
    Dims s = {std::uniform_int_distribution<int64_t>(1, 3)(rng), std::uniform_int_distribution<int64_t>(2, 4)(rng)};
    int64_t d = k % 2 ? -1 : 0;
    bool keep = (k / 2) % 2;
    check("prod dim on " + str(s), [=](const auto& x) { return prod(x[0], d, keep); },
          {random_input(rng, s, Domain::any)}, rng);
  }
  // The product is linear in each element, so central differences are exact at zeros too.
  check("prod(1) with zeros", [](const auto& x) { return x[0].prod(1); }, {with_zeros(rng)}, rng);
  check("prod(0, keepdim) with zeros", [](const auto& x) { return x[0].prod(0, true); }, {with_zeros(rng)}, rng);
  Input one = random_input(rng, {5}, Domain::away_from_zero), two = one;
  one.v[2] = 0;
  two.v[1] = two.v[4] = 0;
  check("prod() with one zero", [](const auto& x) { return x[0].prod(); }, {one}, rng);
  check("prod() with two zeros", [](const auto& x) { return x[0].prod(); }, {two}, rng);
  check("prod() of a 3-d tensor with one zero", [](const auto& x) { return Tensor(x[0] * 2.0).prod(); },
        {[&] {
          Input z = random_input(rng, {2, 2, 3}, Domain::away_from_zero);
          z.v[7] = 0;
          return z;
        }()},
        rng);
}
TEST_CASE("gradcheck: prod's gradient has a gradient, rows with zeros included", "[gradcheck]") {
  // G(x) = d sum(prod(x, 1) * W) / dx as a graph that requires grad; then
  // d sum(G * V) / dx against central differences of G (each G_i is linear
  // in every other element, so they are exact).
  auto rng = rng_for("prod double backward", 142);
  const Input z = with_zeros(rng);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> w(4), v(16);
  for (auto& e : w) e = u(rng);
  for (auto& e : v) e = u(rng);
  const Tensor W = from_vector<double>(w, {4}), V = from_vector<double>(v, {4, 4});
  auto first = [&](const std::vector<double>& at) {
    Tensor x = from_vector<double>(at, {4, 4});
    x.requires_grad_();
    Tensor(x.prod(1) * W).sum().backward();
    return x.grad().to_vector<double>();
  };
  Tensor x = from_vector<double>(z.v, {4, 4});
  x.requires_grad_();
  Tensor loss = Tensor(x.prod(1) * W).sum();
  ir::NodePtr G;
  for (auto& lg : autodiff::gradients(loss.node(), ir::constant(ir::ScalarValue::of(1.0), DType::f64), true))
    if (lg.leaf == x.node().get()) G = lg.grad;
  REQUIRE(G);
  Tensor g = Tensor::from_node(G, cpu());
  REQUIRE(g.requires_grad());
  tessel::testing::require_close(g.to_vector<double>(), first(z.v), 1e-12, 1e-12);  // as a plain backward's
  Tensor(g * V).sum().backward();
  const std::vector<double> analytic = x.grad().to_vector<double>();
  const double h = 1e-6;
  for (size_t j = 0; j < z.v.size(); ++j) {
    std::vector<double> plus = z.v, minus = z.v;
    plus[j] += h;
    minus[j] -= h;
    const std::vector<double> gp = first(plus), gm = first(minus);
    double numeric = 0;
    for (size_t i = 0; i < v.size(); ++i) numeric += v[i] * (gp[i] - gm[i]) / (2 * h);
    INFO("element " << j << " (" << z.v[j] << "): analytic " << analytic[j] << ", numeric " << numeric);
    CHECK(std::fabs(analytic[j] - numeric) <= 1e-7 + 1e-5 * std::fabs(numeric));
  }
}
TEST_CASE("gradcheck: reshape, view, flatten, unsqueeze, squeeze", "[gradcheck]") {
  auto rng = rng_for("reshape", 33);
  for (int k = 0; k < kShapes; ++k) {
    Dims s = {2, std::uniform_int_distribution<int64_t>(1, 3)(rng), 3};
    check("reshape on " + str(s), [](const auto& x) { return Tensor(Tensor(x[0] * 1).reshape({-1, 2}) * x[0].reshape({-1, 2})); },
          {random_input(rng, s, Domain::any)}, rng);
    check("flatten/unsqueeze/squeeze on " + str(s),
          [](const auto& x) { return x[0].flatten(1).unsqueeze(0).squeeze(0).exp(); },
          {random_input(rng, s, Domain::any)}, rng);
  }
}
TEST_CASE("gradcheck: permute and transpose", "[gradcheck]") {
  auto rng = rng_for("permute", 34);
  for (int k = 0; k < kShapes; ++k) {
    Dims s = {2, std::uniform_int_distribution<int64_t>(1, 3)(rng), std::uniform_int_distribution<int64_t>(1, 4)(rng)};
    check("permute on " + str(s), [](const auto& x) { return x[0].permute({2, 0, 1}).sigmoid(); },
          {random_input(rng, s, Domain::any)}, rng);
    check("transpose on " + str(s),
          [](const auto& x) { return Tensor(x[0].transpose(0, -1) * x[0].transpose(-1, 0)); },
          {random_input(rng, s, Domain::any)}, rng);
  }
  Dims m = {3, 4};
  check("t() of a matrix", [](const auto& x) { return x[0].t().tanh(); }, {random_input(rng, m, Domain::any)}, rng);
}
TEST_CASE("gradcheck: expand", "[gradcheck]") {
  auto rng = rng_for("expand", 35);
  Shapes sh{rng};
  for (int k = 0; k < kShapes; ++k) {
    Dims t = sh.target();
    Dims s = sh.broadcastable_to(t);
    std::vector<int64_t> tt(t.begin(), t.end());
    check("expand " + str(s) + " to " + str(t), [=](const auto& x) { return x[0].expand(tt).pow(2); },
          {random_input(rng, s, Domain::any)}, rng);
  }
}
TEST_CASE("gradcheck: matmul 2-d", "[gradcheck]") {
  auto rng = rng_for("matmul 2d", 36);
  for (int k = 0; k < kShapes; ++k) {
    int64_t n = std::uniform_int_distribution<int64_t>(1, 4)(rng), c = std::uniform_int_distribution<int64_t>(1, 4)(rng),
            m = std::uniform_int_distribution<int64_t>(1, 4)(rng);
    check("matmul [" + std::to_string(n) + "," + std::to_string(c) + "] @ [" + std::to_string(c) + "," +
              std::to_string(m) + "]",
          [](const auto& x) { return x[0].matmul(x[1]); },
          {random_input(rng, {n, c}, Domain::any), random_input(rng, {c, m}, Domain::any)}, rng);
  }
}
TEST_CASE("gradcheck: matmul with 1-d operands", "[gradcheck]") {
  auto rng = rng_for("matmul 1d", 37);
  check("vector . vector", [](const auto& x) { return x[0].matmul(x[1]); },
        {random_input(rng, {4}, Domain::any), random_input(rng, {4}, Domain::any)}, rng);
  check("matrix @ vector", [](const auto& x) { return x[0].matmul(x[1]); },
        {random_input(rng, {3, 4}, Domain::any), random_input(rng, {4}, Domain::any)}, rng);
  check("vector @ matrix", [](const auto& x) { return x[0].matmul(x[1]); },
        {random_input(rng, {3}, Domain::any), random_input(rng, {3, 2}, Domain::any)}, rng);
  check("vector @ batch", [](const auto& x) { return x[0].matmul(x[1]); },
        {random_input(rng, {3}, Domain::any), random_input(rng, {2, 3, 2}, Domain::any)}, rng);
}
TEST_CASE("gradcheck: batched matmul", "[gradcheck]") {
  auto rng = rng_for("matmul batched", 38);
  for (int k = 0; k < kShapes; ++k) {
    int64_t b = std::uniform_int_distribution<int64_t>(1, 3)(rng);
    check("batched [" + std::to_string(b) + ",2,3] @ [" + std::to_string(b) + ",3,2]",
          [](const auto& x) { return x[0].matmul(x[1]); },
          {random_input(rng, {b, 2, 3}, Domain::any), random_input(rng, {b, 3, 2}, Domain::any)}, rng);
  }
}
TEST_CASE("gradcheck: matmul with broadcast batch dims", "[gradcheck]") {
  auto rng = rng_for("matmul broadcast", 39);
  check("[2,1,2,3] @ [3,3,2]", [](const auto& x) { return x[0].matmul(x[1]); },
        {random_input(rng, {2, 1, 2, 3}, Domain::any), random_input(rng, {3, 3, 2}, Domain::any)}, rng);
  check("[3,2,3] @ [3,4]", [](const auto& x) { return x[0].matmul(x[1]); },
        {random_input(rng, {3, 2, 3}, Domain::any), random_input(rng, {3, 4}, Domain::any)}, rng);
  check("[2,3] @ [4,3,1]", [](const auto& x) { return x[0].matmul(x[1]); },
        {random_input(rng, {2, 3}, Domain::any), random_input(rng, {4, 3, 1}, Domain::any)}, rng);
  check("[1,2,3] @ [2,3,2]", [](const auto& x) { return Tensor(x[0] % x[1]); },
        {random_input(rng, {1, 2, 3}, Domain::any), random_input(rng, {2, 3, 2}, Domain::any)}, rng);
}
TEST_CASE("gradcheck: matmul with transposed operands", "[gradcheck]") {
  auto rng = rng_for("matmul transposed", 40);
  check("a^T @ b", [](const auto& x) { return x[0].t().matmul(x[1]); },
        {random_input(rng, {4, 3}, Domain::any), random_input(rng, {4, 2}, Domain::any)}, rng);
  check("a @ b^T + bias", [](const auto& x) { return Tensor(x[0].matmul(x[1].t()) + x[2]); },
        {random_input(rng, {5, 3}, Domain::any), random_input(rng, {2, 3}, Domain::any),
         random_input(rng, {2}, Domain::any)},
        rng);
  check("batched transposes", [](const auto& x) { return x[0].transpose(1, 2).matmul(x[1].transpose(-1, -2)); },
        {random_input(rng, {2, 3, 2}, Domain::any), random_input(rng, {2, 4, 3}, Domain::any)}, rng);
}
TEST_CASE("gradcheck: a linear layer with relu, as a model uses it", "[gradcheck]") {
  auto rng = rng_for("linear", 41);
  check("relu(x @ W^T + b) @ V^T", [](const auto& x) {
          return Tensor(relu(x[0].matmul(x[1].t()) + x[2])).matmul(x[3].t());
        },
        {random_input(rng, {4, 5}, Domain::any), random_input(rng, {3, 5}, Domain::any),
         random_input(rng, {3}, Domain::any), random_input(rng, {2, 3}, Domain::any)},
        rng);
}
TEST_CASE("gradcheck: cast to f32 and back", "[gradcheck]") {
  auto rng = rng_for("cast", 42);
  // f32 rounding needs a larger step; the function is linear, so h is free.
  for (int k = 0; k < 4; ++k) {
    Dims s = {3, 2};
    check("(x.to(f32) * 2).to(f64)", [](const auto& x) { return Tensor(x[0].to(DType::f32) * 2).to(DType::f64); },
          {random_input(rng, s, Domain::any)}, rng, 1e-2, 1e-4, 1e-4);
  }
}
TEST_CASE("gradcheck: slice and select", "[gradcheck]") {
  auto rng = rng_for("slice", 43);
  Dims s = {4, 5};
  check("x.slice(1, 1, 5, 2)", [](const auto& x) { return x[0].slice(1, 1, 5, 2).exp(); },
        {random_input(rng, s, Domain::any)}, rng);
  check("x[2]", [](const auto& x) { return x[0][2] * 3; }, {random_input(rng, s, Domain::any)}, rng);
  check("x.select(1, -1)", [](const auto& x) { return x[0].select(1, -1).sigmoid(); },
        {random_input(rng, s, Domain::any)}, rng);
  check("x.narrow(0, 1, 2).slice(1, 0, 5, 3)", [](const auto& x) { return x[0].narrow(0, 1, 2).slice(1, 0, 5, 3); },
        {random_input(rng, s, Domain::any)}, rng);
  check("x[1][3]", [](const auto& x) { return x[0][1][3].pow(2); }, {random_input(rng, s, Domain::any)}, rng);
}
TEST_CASE("gradcheck: pad, cat, gather and embedding", "[gradcheck]") {
  auto rng = rng_for("indexed", 47);
  Dims s = {3, 4};
  check("pad(x, {1, 2, -1, 1}, 0.5)", [](const auto& x) { return pad(x[0], {1, 2, -1, 1}, 0.5).exp(); },
        {random_input(rng, s, Domain::any)}, rng);
  check("cat({x, y}, 1)", [](const auto& x) { return Tensor(cat({x[0], x[1]}, 1) * 2.0).tanh(); },
        {random_input(rng, s, Domain::any), random_input(rng, {3, 2}, Domain::any)}, rng);
  check("gather(x, 1, idx)", [](const auto& x) { return gather(x[0], 1, tensor({{3, 0}, {1, 1}, {2, 3}})).sigmoid(); },
        {random_input(rng, s, Domain::any)}, rng);
  check("embedding(ids, w)", [](const auto& x) { return embedding(tensor({{2, 0, 2}}), x[0]).pow(2); },
        {random_input(rng, s, Domain::any)}, rng);
}

TEST_CASE("gradcheck: flip, take_along_dim and layer_norm", "[gradcheck]") {
  auto rng = rng_for("flip_take_ln", 48);
  Dims s = {3, 4};
  check("flip(x, {0, 1})", [](const auto& x) { return flip(x[0], {0, 1}).exp() * x[0]; },
        {random_input(rng, s, Domain::any)}, rng);
  check("take_along_dim(x, idx, 1)",
        [](const auto& x) { return take_along_dim(x[0], tensor({{3, 3}, {0, 1}, {2, 0}}), 1).tanh(); },
        {random_input(rng, s, Domain::any)}, rng);
  check("layer_norm(x, {4}, w, b)", [](const auto& x) { return layer_norm(x[0], {4}, &x[1], &x[2]).pow(2); },
        {random_input(rng, s, Domain::any), random_input(rng, {4}, Domain::any), random_input(rng, {4}, Domain::any)},
        rng);
}

TEST_CASE("gradcheck: clone and contiguous", "[gradcheck]") {
  auto rng = rng_for("clone", 44);
  check("clone", [](const auto& x) { return x[0].clone() * x[0]; }, {random_input(rng, {3, 2}, Domain::any)}, rng);
  check("t().contiguous()", [](const auto& x) { return x[0].t().contiguous().exp(); },
        {random_input(rng, {3, 2}, Domain::any)}, rng);
}
TEST_CASE("gradcheck: an input used by several ops", "[gradcheck]") {
  auto rng = rng_for("tied", 45);
  check("x * exp(x) + x.sum()", [](const auto& x) { return Tensor(x[0] * x[0].exp() + x[0].sum()); },
        {random_input(rng, {2, 3}, Domain::any)}, rng);
  check("x @ x", [](const auto& x) { return x[0].matmul(x[0]); }, {random_input(rng, {3, 3}, Domain::any)}, rng);
}
TEST_CASE("gradcheck: var and std over dims, with and without the correction", "[gradcheck]") {
  auto rng = rng_for("var", 80);
  for (int k = 0; k < kShapes; ++k) {
    Dims s = {std::uniform_int_distribution<int64_t>(1, 3)(rng), std::uniform_int_distribution<int64_t>(2, 4)(rng)};
    bool keep = k % 2;
    double corr = (k / 2) % 2;
    check("var on " + str(s), [=](const auto& x) { return x[0].var({-1}, corr, keep); },
          {random_input(rng, s, Domain::any)}, rng);
    check("var over all of " + str(s), [=](const auto& x) { return x[0].var({}, corr); },
          {random_input(rng, s, Domain::any)}, rng);
    check("std on " + str(s), [=](const auto& x) { return x[0].std({1}, corr, keep); },
          {random_input(rng, s, Domain::any)}, rng);
  }
}
TEST_CASE("gradcheck: logsumexp", "[gradcheck]") {
  auto rng = rng_for("logsumexp", 81);
  for (int k = 0; k < kShapes; ++k) {
    Dims s = {std::uniform_int_distribution<int64_t>(1, 3)(rng), std::uniform_int_distribution<int64_t>(1, 4)(rng)};
    bool keep = k % 2;
    check("logsumexp on " + str(s), [=](const auto& x) { return logsumexp(x[0], {k % 3 == 0 ? 0 : -1}, keep); },
          {random_input(rng, s, Domain::any)}, rng);
  }
  unary("logsumexp over all dims", 82, Domain::any, [](const auto& x) { return logsumexp(x[0], {}); });
}
TEST_CASE("gradcheck: norm for p = 2, 1, inf and 3", "[gradcheck]") {
  unary("norm 2", 83, Domain::away_from_zero, [](const auto& x) { return norm(x[0]); });
  unary("norm 1", 84, Domain::away_from_zero, [](const auto& x) { return norm(x[0], 1.0); });
  unary("norm inf", 85, Domain::away_from_zero, [](const auto& x) { return norm(x[0], INFINITY); });
  unary("norm 3", 86, Domain::away_from_zero, [](const auto& x) { return norm(x[0], 3.0); });
  auto rng = rng_for("norm dims", 87);
  for (int k = 0; k < kShapes; ++k) {
    Dims s = {std::uniform_int_distribution<int64_t>(1, 3)(rng), std::uniform_int_distribution<int64_t>(2, 4)(rng)};
    check("norm 2 over dim 1 of " + str(s), [=](const auto& x) { return x[0].norm(2.0, {1}, k % 2); },
          {random_input(rng, s, Domain::away_from_zero)}, rng);
  }
}
TEST_CASE("gradcheck: max_with_indices and min_with_indices values", "[gradcheck]") {
  auto rng = rng_for("max_with_indices", 88);
  for (int k = 0; k < kShapes; ++k) {
    Dims s = {std::uniform_int_distribution<int64_t>(1, 3)(rng), std::uniform_int_distribution<int64_t>(2, 4)(rng)};
    int64_t d = k % 2 ? -1 : 0;
    bool keep = (k / 2) % 2;
    check("max_with_indices on " + str(s), [=](const auto& x) { return x[0].max_with_indices(d, keep).values; },
          {random_input(rng, s, Domain::any)}, rng);
    check("min_with_indices on " + str(s), [=](const auto& x) { return x[0].min_with_indices(d, keep).values; },
          {random_input(rng, s, Domain::any)}, rng);
  }
}

// Convolutions, pools and normalizations: each check covers every input
// (input, weight, bias) of one op with the given options.
TEST_CASE("gradcheck: conv2d with stride, padding, dilation and groups", "[gradcheck][conv]") {
  auto rng = rng_for("conv2d", 120);
  const auto A = Domain::any;
  check(
      "conv2d stride 2 padding 1 with bias",
      [](const auto& x) { return conv2d(x[0], x[1], x[2], {.stride = 2, .padding = 1}); },
      {random_input(rng, {2, 2, 5, 5}, A), random_input(rng, {3, 2, 3, 3}, A), random_input(rng, {3}, A)}, rng);
  check(
      "conv2d dilation 2 padding (1, 2)",
      [](const auto& x) {
        return conv2d(x[0], x[1], Tensor(), {.padding = {1, 2}, .dilation = 2});
      },
      {random_input(rng, {1, 2, 5, 4}, A), random_input(rng, {2, 2, 3, 2}, A)}, rng);
  check(
      "conv2d groups 2 with bias", [](const auto& x) { return conv2d(x[0], x[1], x[2], {.groups = 2}); },
      {random_input(rng, {1, 4, 4, 4}, A), random_input(rng, {4, 2, 2, 2}, A), random_input(rng, {4}, A)}, rng);
  check(
      "depthwise conv2d, padding same",
      [](const auto& x) { return conv2d(x[0], x[1], Tensor(), {.padding = "same", .groups = 3}); },
      {random_input(rng, {1, 3, 4, 4}, A), random_input(rng, {3, 1, 3, 3}, A)}, rng);
  check(
      "conv2d padding same with an even kernel",
      [](const auto& x) { return conv2d(x[0], x[1], Tensor(), {.padding = "same"}); },
      {random_input(rng, {1, 2, 4, 5}, A), random_input(rng, {2, 2, 2, 4}, A)}, rng);
  check(
      "unbatched conv2d, stride (2, 1)",
      [](const auto& x) {
        return conv2d(x[0], x[1], x[2], {.stride = {2, 1}});
      },
      {random_input(rng, {2, 5, 4}, A), random_input(rng, {3, 2, 2, 2}, A), random_input(rng, {3}, A)}, rng);
}
TEST_CASE("gradcheck: conv1d", "[gradcheck][conv]") {
  auto rng = rng_for("conv1d", 121);
  const auto A = Domain::any;
  check(
      "conv1d stride 2 padding 1 with bias",
      [](const auto& x) { return conv1d(x[0], x[1], x[2], {.stride = 2, .padding = 1}); },
      {random_input(rng, {2, 2, 6}, A), random_input(rng, {3, 2, 3}, A), random_input(rng, {3}, A)}, rng);
  check(
      "conv1d dilation 2 groups 2 padding same",
      [](const auto& x) { return conv1d(x[0], x[1], Tensor(), {.padding = "same", .dilation = 2, .groups = 2}); },
      {random_input(rng, {1, 4, 5}, A), random_input(rng, {2, 2, 2}, A)}, rng);
}
TEST_CASE("gradcheck: conv_transpose2d", "[gradcheck][conv]") {
  auto rng = rng_for("conv_transpose2d", 122);
  const auto A = Domain::any;
  check(
      "conv_transpose2d stride 2 padding 1 output_padding 1 with bias",
      [](const auto& x) {
        return conv_transpose2d(x[0], x[1], x[2], {.stride = 2, .padding = 1, .output_padding = 1});
      },
      {random_input(rng, {1, 2, 3, 3}, A), random_input(rng, {2, 3, 3, 3}, A), random_input(rng, {3}, A)}, rng);
  check(
      "conv_transpose2d groups 2 dilation 2",
      [](const auto& x) { return conv_transpose2d(x[0], x[1], Tensor(), {.groups = 2, .dilation = 2}); },
      {random_input(rng, {1, 4, 2, 3}, A), random_input(rng, {4, 1, 2, 2}, A)}, rng);
}
// Random inputs have no ties, and their gaps are far wider than the step.
TEST_CASE("gradcheck: max_pool2d", "[gradcheck][pool]") {
  auto rng = rng_for("max_pool2d", 123);
  const auto A = Domain::any;
  check(
      "max_pool2d 3 stride 2 padding 1", [](const auto& x) { return max_pool2d(x[0], 3, {.stride = 2, .padding = 1}); },
      {random_input(rng, {1, 2, 5, 5}, A)}, rng);
  check(
      "max_pool2d 2 ceil_mode", [](const auto& x) { return max_pool2d(x[0], 2, {.ceil_mode = true}); },
      {random_input(rng, {1, 1, 5, 5}, A)}, rng);
  check(
      "max_pool2d 2 stride 1 dilation 2",
      [](const auto& x) { return max_pool2d(x[0], 2, {.stride = 1, .dilation = 2}); },
      {random_input(rng, {2, 1, 4, 4}, A)}, rng);
  check(
      "max_pool2d_with_indices values",
      [](const auto& x) {
        return max_pool2d_with_indices(x[0], {2, 3}).values;
      },
      {random_input(rng, {2, 4, 6}, A)}, rng);
}
TEST_CASE("gradcheck: avg_pool2d", "[gradcheck][pool]") {
  auto rng = rng_for("avg_pool2d", 124);
  const auto A = Domain::any;
  check(
      "avg_pool2d 3 stride 2 padding 1", [](const auto& x) { return avg_pool2d(x[0], 3, {.stride = 2, .padding = 1}); },
      {random_input(rng, {1, 2, 5, 5}, A)}, rng);
  check(
      "avg_pool2d without the padding in the count",
      [](const auto& x) { return avg_pool2d(x[0], 3, {.stride = 2, .padding = 1, .count_include_pad = false}); },
      {random_input(rng, {1, 1, 5, 5}, A)}, rng);
  check(
      "avg_pool2d ceil_mode",
      [](const auto& x) { return avg_pool2d(x[0], 3, {.stride = 2, .padding = 1, .ceil_mode = true}); },
      {random_input(rng, {1, 1, 6, 6}, A)}, rng);
  check(
      "avg_pool2d divisor_override",
      [](const auto& x) { return avg_pool2d(x[0], 2, {.stride = 1, .divisor_override = 3}); },
      {random_input(rng, {1, 1, 3, 4}, A)}, rng);
}
TEST_CASE("gradcheck: adaptive_avg_pool2d", "[gradcheck][pool]") {
  auto rng = rng_for("adaptive_avg_pool2d", 125);
  const auto A = Domain::any;
  check(
      "adaptive_avg_pool2d 5 -> 3", [](const auto& x) { return adaptive_avg_pool2d(x[0], 3); },
      {random_input(rng, {1, 2, 5, 5}, A)}, rng);
  check(
      "adaptive_avg_pool2d (4, 6) -> (2, 3)",
      [](const auto& x) {
        return adaptive_avg_pool2d(x[0], {2, 3});
      },
      {random_input(rng, {1, 1, 4, 6}, A)}, rng);
  check(
      "adaptive_avg_pool2d to 1", [](const auto& x) { return adaptive_avg_pool2d(x[0], 1); },
      {random_input(rng, {2, 2, 3, 3}, A)}, rng);
}
TEST_CASE("gradcheck: batch_norm in training and in eval mode", "[gradcheck][batch_norm]") {
  auto rng = rng_for("batch_norm", 126);
  const auto A = Domain::any;
  check(
      "batch_norm training [3, 2, 2, 2] with running stats and affine",
      [](const auto& x) {
        Tensor rm = zeros({2}, DType::f64), rv = ones({2}, DType::f64);
        return batch_norm(x[0], rm, rv, x[1], x[2], true, 0.1, 1e-5);
      },
      {random_input(rng, {3, 2, 2, 2}, A), random_input(rng, {2}, A), random_input(rng, {2}, A)}, rng);
  check(
      "batch_norm training [4, 3] without running stats",
      [](const auto& x) { return batch_norm(x[0], Tensor(), Tensor(), x[1], Tensor(), true); },
      {random_input(rng, {4, 3}, A), random_input(rng, {3}, A)}, rng);
  check(
      "batch_norm eval [2, 3, 2]",
      [](const auto& x) {
        return batch_norm(x[0], tensor({0.1, -0.2, 0.3}, DType::f64), tensor({0.5, 1.5, 2.0}, DType::f64), x[1], x[2]);
      },
      {random_input(rng, {2, 3, 2}, A), random_input(rng, {3}, A), random_input(rng, {3}, A)}, rng);
}
TEST_CASE("gradcheck: group_norm", "[gradcheck][group_norm]") {
  auto rng = rng_for("group_norm", 127);
  const auto A = Domain::any;
  check(
      "group_norm 3 groups with affine", [](const auto& x) { return group_norm(x[0], 3, x[1], x[2]); },
      {random_input(rng, {2, 6, 2, 2}, A), random_input(rng, {6}, A), random_input(rng, {6}, A)}, rng);
  check(
      "group_norm 2 groups over [2, 4, 3]", [](const auto& x) { return group_norm(x[0], 2); },
      {random_input(rng, {2, 4, 3}, A)}, rng);
}

TEST_CASE("gradcheck: scaled_dot_product_attention (fused), with masks and causal", "[gradcheck][attention]") {
  auto rng = rng_for("attention", 121);
  const auto A = Domain::any;
  check(
      "attention, no mask, Tq != Tk, Dv != D",
      [](const auto& x) { return scaled_dot_product_attention(x[0], x[1], x[2]); },
      {random_input(rng, {2, 3, 4}, A), random_input(rng, {2, 5, 4}, A), random_input(rng, {2, 5, 3}, A)}, rng);
  check(
      "attention, causal, heads",
      [](const auto& x) { return scaled_dot_product_attention(x[0], x[1], x[2], {.causal = true}); },
      {random_input(rng, {1, 2, 5, 3}, A), random_input(rng, {1, 2, 5, 3}, A), random_input(rng, {1, 2, 5, 3}, A)}, rng);
  check(
      "attention, additive mask broadcast over heads, scale 0.5",
      [](const auto& x) {
        Tensor m = from_vector<double>({0, -1, 0.5, 0, 0, 2, -0.5, 0, 1, 0, 0, -2}, Shape({3, 4}));
        return scaled_dot_product_attention(x[0], x[1], x[2], {.mask = m, .scale = 0.5});
      },
      {random_input(rng, {2, 3, 2}, A), random_input(rng, {2, 4, 2}, A), random_input(rng, {2, 4, 2}, A)}, rng);
  check(
      "attention, bool mask with a fully masked row",
      [](const auto& x) {
        Tensor m = from_vector<double>({1, 0, 1, 0, 0, 0, 0, 1, 1}, Shape({3, 3})).to(DType::b8);
        return scaled_dot_product_attention(x[0], x[1], x[2], {.mask = m});
      },
      {random_input(rng, {3, 2}, A), random_input(rng, {3, 2}, A), random_input(rng, {3, 2}, A)}, rng);
}
