// The autograd API's rules: leaves and grad_fn, accumulation, tying, no_grad,
// detach, data(), retain_grad, explicit gradients, grad_fn names.
#include "tests/support/tensor_testing.h"

using namespace tessel;
using namespace tessel::testing;

namespace {
Tensor leaf(std::vector<double> v, Shape s) { return from_vector<double>(v, s).requires_grad_(); }
}  // namespace

TEST_CASE("autograd: grad() is undefined before any backward", "[autograd]") {
  Tensor x = leaf({1, 2}, {2});
  CHECK(!x.grad().defined());
  Tensor y = (x * 2).sum();
  CHECK(!x.grad().defined());  // building the graph computes nothing
}

TEST_CASE("autograd: d sum(x*x) = 2x", "[autograd]") {
  Tensor x = leaf({1, -2, 3}, {3});
  (x * x).sum().backward();
  CHECK(vals(x.grad()) == std::vector<double>{2, -4, 6});
  CHECK(x.grad().dtype() == DType::f64);
  CHECK(!x.grad().requires_grad());
}

TEST_CASE("autograd: gradients accumulate across backward calls", "[autograd]") {
  Tensor x = leaf({1, 2}, {2});
  (x * 3).sum().backward();
  CHECK(vals(x.grad()) == std::vector<double>{3, 3});
  (x * x).sum().backward();
  CHECK(vals(x.grad()) == std::vector<double>{5, 7});
}

TEST_CASE("autograd: backward realizes the output and a second backward needs retain_graph", "[autograd]") {
  Tensor x = leaf({1, -2, 3}, {3});
  Tensor h = (x * x).relu();  // intermediates backward reads
  Tensor y = (h * x).sum();
  CHECK_FALSE(y.is_realized());
  y.backward({}, /*retain_graph=*/true);
  CHECK(y.is_realized());
  CHECK(y.item<double>() == 1 - 8 + 27);
  CHECK(vals(x.grad()) == std::vector<double>{3, 12, 27});  // d(x^3)/dx = 3x^2
  y.backward();  // retained: the graph's values are computed again
  CHECK(vals(x.grad()) == std::vector<double>{6, 24, 54});
  // Spent now, as in PyTorch: a third backward would add the gradient again.
  CHECK_THROWS_AS(y.backward(), ValueError);
  CHECK(vals(x.grad()) == std::vector<double>{6, 24, 54});
  // A graph built again from the same leaves is a new graph.
  Tensor y2 = (Tensor((x * x).relu()) * x).sum();
  y2.backward();
  CHECK(vals(x.grad()) == std::vector<double>{9, 36, 81});
}

TEST_CASE("autograd: zeroing grad between steps", "[autograd]") {
  Tensor x = leaf({1, 2}, {2});
  (x * 3).sum().backward();
  x.grad().zero_();
  (x * 5).sum().backward();
  CHECK(vals(x.grad()) == std::vector<double>{5, 5});
  x.set_grad(Tensor());
  CHECK(!x.grad().defined());
  (x * 7).sum().backward();
  CHECK(vals(x.grad()) == std::vector<double>{7, 7});
}

TEST_CASE("autograd: a tied leaf used twice gets the summed gradient", "[autograd]") {
  Tensor x = leaf({1, 2}, {2});
  (x + x).sum().backward();
  CHECK(vals(x.grad()) == std::vector<double>{2, 2});
  Tensor w = leaf({0.5, -1}, {2});
  (w * w + w).sum().backward();  // 2w + 1
  CHECK(vals(w.grad()) == std::vector<double>{2, -1});
}

TEST_CASE("autograd: tying through a matmul and a copied handle", "[autograd]") {
  Tensor a = leaf({1, 2, 3, 4}, {2, 2});
  Tensor b = a;  // the same tensor under another name
  a.matmul(b).sum().backward();
  // d sum(A A) / dA = 1 A^T + A^T 1 : rows of ones times A^T plus A^T times ones
  // sum_ij (AA)_ij; dA_kl = sum_j A_lj + sum_i A_ik
  CHECK(vals(a.grad()) == std::vector<double>{(1 + 2) + (1 + 3), (3 + 4) + (1 + 3), (1 + 2) + (2 + 4), (3 + 4) + (2 + 4)});
  CHECK(b.grad().is_same(a.grad()));
}

TEST_CASE("autograd: leaves, non-leaves and requires_grad propagation", "[autograd]") {
  Tensor x = leaf({1, 2}, {2});
  Tensor c = tensor({1., 1.}, DType::f64);
  CHECK(x.is_leaf());
  CHECK(x.requires_grad());
  CHECK(c.is_leaf());
  CHECK(!c.requires_grad());
  Tensor y = x + c;
  CHECK(y.requires_grad());
  CHECK(!y.is_leaf());
  CHECK(y.grad_fn_name() == "AddBackward0");
  Tensor z = c * 2;
  CHECK(!z.requires_grad());
  CHECK(z.is_leaf());
  CHECK(z.grad_fn_name().empty());
}

TEST_CASE("autograd: constants get no gradient", "[autograd]") {
  Tensor x = leaf({1, 2}, {2});
  Tensor c = tensor({3., 4.}, DType::f64);
  (x * c + 1).sum().backward();
  CHECK(vals(x.grad()) == std::vector<double>{3, 4});
  CHECK(!c.grad().defined());
  CHECK(!c.requires_grad());
}

TEST_CASE("autograd: comparisons and argmax carry no gradient", "[autograd]") {
  Tensor x = leaf({1, -2}, {2});
  Tensor y = where(x > 0, x * 2, x * 3);
  y.sum().backward();
  CHECK(vals(x.grad()) == std::vector<double>{2, 3});
  CHECK(!x.argmax().requires_grad());
}

TEST_CASE("autograd: comparison results do not require grad", "[autograd]") {
  Tensor x = leaf({1, -2}, {2});
  Tensor b = x > 0;
  CHECK(b.dtype() == DType::b8);
  CHECK(!b.requires_grad());
  CHECK(b.grad_fn_name().empty());
  CHECK(b.str() == "tensor([ True, False])");
  CHECK(!Tensor(!(x > 0)).requires_grad());
}

TEST_CASE("autograd: NoGradGuard records nothing and restores the mode", "[autograd]") {
  Tensor x = leaf({1, 2}, {2});
  CHECK(grad_enabled());
  {
    NoGradGuard g;
    CHECK(!grad_enabled());
    Tensor y = x * 2;
    CHECK(!y.requires_grad());
    CHECK(y.is_leaf());
    CHECK(y.grad_fn_name().empty());
    {
      NoGradGuard inner;
      CHECK(!grad_enabled());
    }
    CHECK(!grad_enabled());
  }
  CHECK(grad_enabled());
  CHECK(Tensor(x * 2).requires_grad());
}

TEST_CASE("autograd: parameter updates inside NoGradGuard keep the leaf", "[autograd]") {
  Tensor w = leaf({1, 2}, {2});
  (w * w).sum().backward();
  {
    NoGradGuard g;
    w -= 0.25 * w.grad();
  }
  CHECK(vals(w) == std::vector<double>{0.5, 1});
  CHECK(w.is_leaf());
  CHECK(w.requires_grad());
  w.grad().zero_();
  (w * w).sum().backward();
  CHECK(vals(w.grad()) == std::vector<double>{1, 2});
}

TEST_CASE("autograd: data() writes go through without history", "[autograd]") {
  Tensor w = leaf({1, 2}, {2});
  w.data() += 1;
  CHECK(vals(w) == std::vector<double>{2, 3});
  CHECK(w.requires_grad());
  CHECK(!w.data().requires_grad());
  (w * 2).sum().backward();
  CHECK(vals(w.grad()) == std::vector<double>{2, 2});
}

TEST_CASE("autograd: detach cuts the graph", "[autograd]") {
  Tensor x = leaf({1, 2}, {2});
  Tensor d = Tensor(x * 3).detach();
  CHECK(!d.requires_grad());
  CHECK(d.is_leaf());
  (d * x).sum().backward();  // only the direct path to x counts
  CHECK(vals(x.grad()) == std::vector<double>{3, 6});
}

TEST_CASE("autograd: retain_grad keeps a non-leaf's gradient", "[autograd]") {
  Tensor x = leaf({1, 2}, {2});
  Tensor h = x * 2;
  h.retain_grad();
  Tensor k = h + 1;
  (h * k).sum().backward();  // d/dh = 2h + 1
  CHECK(vals(h.grad()) == std::vector<double>{5, 9});
  CHECK(!k.grad().defined());
  CHECK(vals(x.grad()) == std::vector<double>{10, 18});
}

TEST_CASE("autograd: backward with an explicit gradient on a non-scalar", "[autograd]") {
  Tensor x = leaf({1, 2, 3}, {3});
  Tensor y = x * x;
  y.backward(tensor({1., 0.5, -1.}, DType::f64));
  CHECK(vals(x.grad()) == std::vector<double>{2, 2, -6});
}

TEST_CASE("autograd: backward through views of a leaf", "[autograd]") {
  Tensor x = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor y = x.t().reshape({6}) * tensor({1., 2., 3., 4., 5., 6.}, DType::f64);
  y.sum().backward();
  // x.t().reshape(6) lists x column by column: x00 x10 x01 x11 x02 x12
  CHECK(vals(x.grad()) == std::vector<double>{1, 3, 5, 2, 4, 6});
}

TEST_CASE("autograd: backward through indexing", "[autograd]") {
  Tensor x = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
  (x[1] * x[0][2]).sum().backward();
  // d/dx[1][j] = x[0][2] = 3; d/dx[0][2] = sum(x[1]) = 15
  CHECK(vals(x.grad()) == std::vector<double>{0, 0, 15, 3, 3, 3});
}

TEST_CASE("autograd: gradient dtype follows the leaf through casts", "[autograd]") {
  Tensor x = tensor({1., 2.}).requires_grad_();  // f32
  Tensor y = (x.to(DType::f64) * tensor({0.5, 0.25}, DType::f64)).sum();
  CHECK(y.dtype() == DType::f64);
  y.backward();
  CHECK(x.grad().dtype() == DType::f32);
  CHECK(vals(x.grad()) == std::vector<double>{0.5, 0.25});
}

TEST_CASE("autograd: f32 graphs compute f32 gradients", "[autograd]") {
  Tensor w = tensor({{1., 2.}, {3., 4.}}).requires_grad_();
  Tensor x = tensor({{1., -1.}});
  Tensor loss = relu(x.matmul(w.t())).sum();  // x @ w^T = [-1, -1] -> relu 0
  loss.backward();
  CHECK(vals(w.grad()) == std::vector<double>{0, 0, 0, 0});
  Tensor loss2 = x.matmul(w.t()).pow(2).sum();  // 2 * (x w^T)_i * x_j
  w.grad().zero_();
  loss2.backward();
  CHECK(vals(w.grad()) == std::vector<double>{-2, 2, -2, 2});
}

TEST_CASE("autograd: in-place on a non-leaf extends its graph", "[autograd]") {
  Tensor x = leaf({1, 2}, {2});
  Tensor h = x * 2;
  h += 1;  // h = 2x + 1
  h *= h;  // h = (2x + 1)^2
  h.sum().backward();
  CHECK(vals(x.grad()) == std::vector<double>{2 * 3 * 2, 2 * 5 * 2});
  CHECK(h.grad_fn_name() == "MulBackward0");
}

TEST_CASE("autograd: data-dependent control flow in forward", "[autograd]") {
  Tensor x = leaf({3, 4}, {2});
  Tensor y = x * 1;
  int halvings = 0;
  while (y.abs().sum() > 1) {
    y = y / 2;
    ++halvings;
  }
  y.sum().backward();
  CHECK(halvings == 3);
  CHECK(vals(x.grad()) == std::vector<double>{0.125, 0.125});
}

TEST_CASE("autograd: requires_grad_ on a computed value makes it a leaf", "[autograd]") {
  Tensor v = tensor({1., 2.}, DType::f64) * 3;
  v.requires_grad_();
  CHECK(v.is_leaf());
  CHECK(v.requires_grad());
  (v * v).sum().backward();
  CHECK(vals(v.grad()) == std::vector<double>{6, 12});
}

TEST_CASE("autograd: requires_grad_(false) on a leaf stops tracking", "[autograd]") {
  Tensor x = leaf({1, 2}, {2});
  x.requires_grad_(false);
  CHECK(!x.requires_grad());
  CHECK(!Tensor(x * 2).requires_grad());
}

TEST_CASE("autograd: two losses sharing a subgraph", "[autograd]") {
  Tensor x = leaf({1, 2}, {2});
  Tensor h = x.exp();
  (h * 2).sum().backward({}, /*retain_graph=*/true);  // h's part of the graph is walked again below
  (h * 3).sum().backward();
  std::vector<double> e{std::exp(1.0), std::exp(2.0)};
  require_close(vals(x.grad()), {5 * e[0], 5 * e[1]}, 1e-12, 1e-12);
}

TEST_CASE("autograd: matmul and broadcasting gradients sum over broadcast dims", "[autograd]") {
  Tensor b = leaf({1, 2}, {2});
  Tensor m = tensor({{1., 1.}, {2., 2.}, {3., 3.}}, DType::f64);
  (m + b).sum().backward();  // b broadcast over 3 rows
  CHECK(vals(b.grad()) == std::vector<double>{3, 3});
  Tensor s = leaf({2}, {});
  (m * s).sum().backward();  // a 0-d leaf broadcast everywhere
  CHECK(s.grad().item<double>() == 12);
  CHECK(s.grad().dim() == 0);
}

TEST_CASE("autograd: max and min gradients go to the extreme elements", "[autograd]") {
  Tensor x = leaf({1, 5, 3, 5}, {4});
  x.max().backward();  // tie: split evenly
  CHECK(vals(x.grad()) == std::vector<double>{0, 0.5, 0, 0.5});
  Tensor y = leaf({4, 1, 2, 3}, {2, 2});
  y.min(1).sum().backward();
  CHECK(vals(y.grad()) == std::vector<double>{0, 1, 1, 0});
}

TEST_CASE("autograd: grad_fn names follow PyTorch", "[autograd]") {
  Tensor x = leaf({1, 2, 3, 4}, {2, 2}), y = leaf({1, 1, 1, 1}, {2, 2});
  CHECK(Tensor(x + y).grad_fn_name() == "AddBackward0");
  CHECK(Tensor(x - y).grad_fn_name() == "SubBackward0");
  CHECK(Tensor(x * 2).grad_fn_name() == "MulBackward0");
  CHECK(Tensor(x / y).grad_fn_name() == "DivBackward0");
  CHECK(Tensor(-x).grad_fn_name() == "NegBackward0");
  CHECK(x.exp().grad_fn_name() == "ExpBackward0");
  CHECK(x.log().grad_fn_name() == "LogBackward0");
  CHECK(x.sqrt().grad_fn_name() == "SqrtBackward0");
  CHECK(x.tanh().grad_fn_name() == "TanhBackward0");
  CHECK(x.sigmoid().grad_fn_name() == "SigmoidBackward0");
  CHECK(x.relu().grad_fn_name() == "ReluBackward0");
  CHECK(x.abs().grad_fn_name() == "AbsBackward0");
  CHECK(x.pow(2).grad_fn_name() == "PowBackward0");
  CHECK(x.pow(y).grad_fn_name() == "PowBackward1");
  CHECK(maximum(x, y).grad_fn_name() == "MaximumBackward0");
  CHECK(minimum(x, y).grad_fn_name() == "MinimumBackward0");
  CHECK(Tensor(where(x > 2, x, y)).grad_fn_name() == "WhereBackward0");
  CHECK(x.sum().grad_fn_name() == "SumBackward0");
  CHECK(x.sum({0}).grad_fn_name() == "SumBackward1");
  CHECK(x.mean().grad_fn_name() == "MeanBackward0");
  CHECK(x.mean({1}, true).grad_fn_name() == "MeanBackward1");
  CHECK(x.max().grad_fn_name() == "MaxBackward1");
  CHECK(x.max(0).grad_fn_name() == "MaxBackward0");
  CHECK(x.min().grad_fn_name() == "MinBackward1");
  CHECK(x.reshape({4}).grad_fn_name() == "ViewBackward0");
  CHECK(x.t().grad_fn_name() == "TBackward0");
  CHECK(x.unsqueeze(0).permute({2, 0, 1}).grad_fn_name() == "PermuteBackward0");
  CHECK(x.expand({3, 2, 2}).grad_fn_name() == "ExpandBackward0");
  CHECK(x.matmul(y).grad_fn_name() == "MmBackward0");
  CHECK(x.to(DType::f32).grad_fn_name() == "ToCopyBackward0");
  CHECK(x.slice(1, 0, 1).grad_fn_name() == "SliceBackward0");
}

TEST_CASE("autograd: printing shows requires_grad and grad_fn", "[autograd]") {
  Tensor x = leaf({1, 2}, {2});
  CHECK(x.str() == "tensor([1., 2.], dtype=float64, requires_grad=True)");
  CHECK((x * x).sum().str() == "tensor(5., dtype=float64, grad_fn=<SumBackward0>)");
}

TEST_CASE("autograd: backward frees nothing the next forward needs", "[autograd]") {
  Tensor w = leaf({1, 2}, {2});
  for (int step = 0; step < 3; ++step) {
    Tensor loss = (w * w).sum();
    loss.backward();
    NoGradGuard g;
    w -= 0.5 * w.grad();
    w.grad().zero_();
  }
  CHECK(vals(w) == std::vector<double>{0, 0});  // w - 0.5 * 2w = 0 after the first step
}

TEST_CASE("autograd: pow gradients at zero are finite", "[autograd]") {
  // d/dx x^0 = 0 and d/dx x^1 = 1 everywhere, also at x = 0 (PyTorch masks 0 * inf).
  Tensor x = leaf({0, 2}, {2});
  x.pow(0).sum().backward();
  CHECK(vals(x.grad()) == std::vector<double>{0, 0});
  x.grad().zero_();
  x.pow(1).sum().backward();
  CHECK(vals(x.grad()) == std::vector<double>{1, 1});
  x.grad().zero_();
  x.pow(2).sum().backward();
  CHECK(vals(x.grad()) == std::vector<double>{0, 4});
}

TEST_CASE("autograd: in-place changes of values backward does not read are fine", "[autograd]") {
  Tensor w = leaf({1, 2}, {2});
  Tensor x = tensor({5., 6.}, DType::f64);
  Tensor loss = (x + w).sum();  // d/dw does not read x
  x.data() += 1;
  loss.backward();
  CHECK(vals(w.grad()) == std::vector<double>{1, 1});
}

TEST_CASE("autograd: a graph built after an in-place step sees the new values", "[autograd]") {
  Tensor w = leaf({1, 2}, {2});
  for (int i = 0; i < 2; ++i) {
    Tensor loss = (w * w).sum();
    loss.backward();
    NoGradGuard g;
    w.data() += 1;
  }
  // grads: 2 * [1, 2] + 2 * [2, 3]
  CHECK(vals(w.grad()) == std::vector<double>{6, 10});
}

TEST_CASE("autograd: the gradient of a transposed matmul operand is dense in the leaf's layout", "[autograd]") {
  // x @ w^T (a Linear) and w^T @ x: the gradient of w is formed as the product
  // that yields it untransposed, not as a transposed view of another product
  // (an optimizer then reads it in order).
  Tensor x = leaf({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor w = leaf({1, 0, -1, 2, 1, 0, 0, 1, 1, 3, 2, 1}, {4, 3});
  x.matmul(w.t()).sum().backward();
  CHECK(vals(w.grad()) == std::vector<double>{5, 7, 9, 5, 7, 9, 5, 7, 9, 5, 7, 9});
  CHECK(w.grad().node()->buffer->strides == Strides{3, 1});
  CHECK(vals(x.grad()) == std::vector<double>{6, 4, 1, 6, 4, 1});  // column sums of w
  Tensor v = leaf({1, 2, 3, 4, 5, 6, 7, 8}, {4, 2});
  (w.t().matmul(v) * leaf({1, 2, 3, 4, 5, 6}, {3, 2}).detach()).sum().backward();
  // d/dw of sum(G * (w^T v)) = v G^T: rows of v against rows of G.
  CHECK(vals(w.grad()) == std::vector<double>{5 + 5, 7 + 11, 9 + 17, 5 + 11, 7 + 25, 9 + 39,
                                              5 + 17, 7 + 39, 9 + 61, 5 + 23, 7 + 53, 9 + 83});
  CHECK(w.grad().node()->buffer->strides == Strides{3, 1});
}
