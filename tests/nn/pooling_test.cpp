// max_pool2d (and its indices), avg_pool2d and adaptive_avg_pool2d, and the
// nn::MaxPool2d, nn::AvgPool2d and nn::AdaptiveAvgPool2d layers: values,
// indices and gradients as PyTorch gives them (torch.nn.functional on the
// same f64 inputs, the numbers written out here), and the layers' reprs.
#include "tests/nn/pattern_values.h"

#include <cmath>

#include "codegen/backend.h"
#include "codegen/cpu/jit_stats.h"
#include "dsl/nn/pooling.h"
#include "dsl/pooling.h"

using namespace tessel;
using namespace tessel::testing;

namespace {

void check_indices(const Tensor& t, const std::vector<int64_t>& shape, const std::vector<int64_t>& want) {
  REQUIRE(dims(t) == shape);
  CHECK(t.dtype() == DType::i64);
  CHECK(ivals(t) == want);
}

}  // namespace

TEST_CASE("max_pool2d with kernel 2: stride defaults to the kernel", "[nn][pool]") {
  check_values(max_pool2d(pat({1, 1, 4, 4}, 0), 2), {1, 1, 2, 2}, {1.7, 1.2, 2.2, 0.85});
}

TEST_CASE("max_pool2d with padding: values, indices and the gradient", "[nn][pool]") {
  Tensor x = leaf(pat({1, 2, 5, 5}, 0));
  auto [y, idx] = max_pool2d_with_indices(x, 3, {.stride = 2, .padding = 1});
  check_values(y, {1, 2, 3, 3}, {
      1.7, 2.2, 2.2, 1.85, 2.2, 2.35, 1.85, 1.85, 2.35, 2.5, 2., 0.65, 2.5, 2.15, 2.15, 1.8, 1.8, 2.3});
  // Positions in each channel's flattened 5x5 plane.
  check_indices(idx, {1, 2, 3, 3}, {5, 8, 8, 16, 8, 19, 16, 16, 19, 5, 2, 4, 5, 13, 13, 21, 21, 24});
  check_values(max_pool2d(x, 3, {.stride = 2, .padding = 1}), {1, 2, 3, 3}, {
      1.7, 2.2, 2.2, 1.85, 2.2, 2.35, 1.85, 1.85, 2.35, 2.5, 2., 0.65, 2.5, 2.15, 2.15, 1.8, 1.8, 2.3});
  Tensor(y * pat({1, 2, 3, 3}, 23)).sum().backward();
  check_values(x.grad(), {1, 2, 5, 5}, {
      0., 0., 0., 0., 0., -1.35, 0., 0., 3.85, 0., 0., 0., 0., 0., 0., 0., 0.3, 0., 0., -3.9, 0., 0., 0., 0., 0.,
      0., 0., 2., 0., -1.2, 0.8, 0., 0., 0., 0., 0., 0., 0., 1.8, 0., 0., 0., 0., 0., 0., 0., -0.9, 0., 0., -0.2});
}

TEST_CASE("max_pool2d pads with -inf: an all-negative input keeps its values", "[nn][pool]") {
  Tensor x = tensor({{{{-1., -2., -3.}, {-4., -5., -6.}, {-7., -8., -9.}}}}, DType::f64);
  check_values(max_pool2d(x, 3, {.stride = 1, .padding = 1}), {1, 1, 3, 3}, {
      -1., -1., -2., -1., -1., -2., -4., -4., -5.});
}

TEST_CASE("max_pool2d with ceil_mode keeps the partial windows at the end", "[nn][pool]") {
  Tensor x = pat({1, 1, 5, 5}, 1);
  auto [y, idx] = max_pool2d_with_indices(x, 2, {.stride = 2, .ceil_mode = true});
  check_values(y, {1, 1, 3, 3}, {1.75, 2.25, -0.1, 1.9, 1.4, 2.4, 1.05, -0.3, 1.55});
  check_indices(idx, {1, 1, 3, 3}, {5, 8, 4, 16, 13, 19, 21, 23, 24});
  check_values(max_pool2d(x, 2, {.stride = 2}), {1, 1, 2, 2}, {1.75, 2.25, 1.9, 1.4});
}

TEST_CASE("max_pool2d with dilation 2", "[nn][pool]") {
  auto [y, idx] = max_pool2d_with_indices(pat({1, 1, 5, 5}, 2), 2, {.stride = 1, .dilation = 2});
  check_values(y, {1, 1, 3, 3}, {1.3, 1.45, 1.3, 1.8, 2.3, 2.45, 0.95, 1.45, 1.6});
  check_indices(idx, {1, 1, 3, 3}, {2, 13, 2, 5, 8, 19, 10, 13, 24});
}

TEST_CASE("max_pool2d with a rectangular kernel, stride and padding", "[nn][pool]") {
  auto [y, idx] = max_pool2d_with_indices(pat({2, 1, 4, 5}, 3), {2, 3}, {.stride = Size2{1, 2}, .padding = {1, 1}});
  check_values(y, {2, 1, 5, 3}, {
      -0.5, 1.35, 0., 1.85, 2.35, 2.35, 1.85, 2.35, 2.35, 2., 2., 2.5, 2., 2., 2.5, 1.15, 1.15, 1.65, 1.15, 2.15,
      1.65, 0.3, 2.15, 0.8, 1.8, 2.3, 2.3, 1.8, 2.3, 2.3});
  check_indices(idx, {2, 1, 5, 3}, {
      1, 2, 4, 5, 8, 8, 5, 8, 8, 16, 16, 19, 16, 16, 19, 1, 1, 4, 1, 7, 4, 6, 7, 9, 15, 18, 18, 15, 18, 18});
}

TEST_CASE("max_pool2d of an unbatched [C, H, W] input", "[nn][pool]") {
  auto [y, idx] = max_pool2d_with_indices(pat({2, 3, 3}, 4), 2, {.stride = 1});
  check_values(y, {2, 2, 2}, {0.05, 1.9, 0.55, 2.4, 1.55, 1.55, 2.05, 2.05});
  check_indices(idx, {2, 2, 2}, {4, 5, 7, 8, 4, 4, 7, 7});
}

TEST_CASE("max_pool2d with ties: the index and the gradient go to the first maximum of each window", "[nn][pool]") {
  Tensor x = leaf(tensor({{{{1., 1., 2., 2.}, {1., 1., 2., 2.}, {0., 3., 3., 0.}}}}, DType::f64));
  auto [y, idx] = max_pool2d_with_indices(x, 2, {.stride = 1});
  check_values(y, {1, 1, 2, 3}, {1., 2., 2., 3., 3., 3.});
  check_indices(idx, {1, 1, 2, 3}, {0, 2, 2, 9, 9, 10});
  y.sum().backward();
  check_values(x.grad(), {1, 1, 3, 4}, {1., 0., 2., 0., 0., 0., 0., 0., 0., 2., 1., 0.});
  // The same through max_pool2d (no indices asked for).
  Tensor x2 = leaf(tensor({{{{1., 1., 2., 2.}, {1., 1., 2., 2.}, {0., 3., 3., 0.}}}}, DType::f64));
  max_pool2d(x2, 2, {.stride = 1}).sum().backward();
  check_values(x2.grad(), {1, 1, 3, 4}, {1., 0., 2., 0., 0., 0., 0., 0., 0., 2., 1., 0.});
}

TEST_CASE("max_pool2d over windows that tile the input: ties, a NaN, and the gradient in one backward kernel",
          "[nn][pool]") {
  // stride == kernel: the value is a running choice computed without
  // gradients and the gradient a scatter to each window's first maximum.
  const double nan = std::nan("");
  Tensor x = leaf(tensor({{{{1., 1., 2., 5.}, {1., 0., 5., 5.}, {nan, 3., 7., 7.}, {3., 3., 7., 6.}}}}, DType::f64));
  auto [y, idx] = max_pool2d_with_indices(x, 2);
  REQUIRE(dims(y) == std::vector<int64_t>{1, 1, 2, 2});
  std::vector<double> got = vals(y);
  CHECK(got[0] == 1.);
  CHECK(got[1] == 5.);
  CHECK(std::isnan(got[2]));
  CHECK(got[3] == 7.);
  check_indices(idx, {1, 1, 2, 2}, {0, 3, 8, 10});
  y.eval();
  reset_cpu_jit_stats();
  y.backward(tensor({{{{1., 2.}, {3., 4.}}}}, DType::f64));
  Tensor g = x.grad();
  g.eval();
  // The first maximum of each window per row-major order within the window
  // (5 at column 3 before the 5s below it; the NaN before every number).
  check_values(g, {1, 1, 4, 4}, {1., 0., 0., 2., 0., 0., 0., 0., 3., 0., 4., 0., 0., 0., 0., 0.});
  // Each window's first maximum, and the scatter: two kernels, not one per window element.
  if (cpu_backend().name() == "cpu") CHECK(cpu_jit_stats().kernels_launched == 2);
}

TEST_CASE("max_pool2d over tiling windows of an input they do not cover (5 x 5, kernel 2): the last row and column "
          "get no gradient",
          "[nn][pool]") {
  Tensor x = leaf(pat({2, 1, 5, 5}));
  Tensor y = max_pool2d(x, 2);
  REQUIRE(dims(y) == std::vector<int64_t>{2, 1, 2, 2});
  (y * y).sum().backward();
  // Expected: every window's maximum (values distinct) gets 2 * max.
  std::vector<double> xv = vals(x), want(xv.size(), 0.0), ys;
  for (int n = 0; n < 2; ++n)
    for (int oh = 0; oh < 2; ++oh)
      for (int ow = 0; ow < 2; ++ow) {
        size_t best = 0;
        for (int i = 0; i < 2; ++i)
          for (int j = 0; j < 2; ++j) {
            size_t at = static_cast<size_t>(n * 25 + (2 * oh + i) * 5 + 2 * ow + j);
            if ((i == 0 && j == 0) || xv[at] > xv[best]) best = at;
          }
        want[best] = 2 * xv[best];
        ys.push_back(xv[best]);
      }
  check_values(y, {2, 1, 2, 2}, ys);
  check_values(x.grad(), {2, 1, 5, 5}, want);
}

TEST_CASE("max_pool2d of a ReLU pools first: the same values and gradient, the ReLU on the pooled tensor",
          "[nn][pool]") {
  // Windows with a positive maximum, a tie at 0 after the ReLU (all values
  // <= 0, the first of them negative), an exact 0, and a NaN.
  const double nan = std::nan("");
  auto input = [&] {
    return leaf(tensor({{{{-1., -0.5, 2., 5.}, {-3., -2., 5., 1.}, {nan, 3., 0., -1.}, {3., 3., -2., 0.}}}},
                       DType::f64));
  };
  const Tensor grad_out = tensor({{{{1., 2.}, {3., 4.}}}}, DType::f64);
  // The ReLU realized first: pooled as written, max_pool(relu(y)).
  Tensor x0 = input();
  Tensor r = relu(x0);
  r.eval();
  Tensor want = max_pool2d(r, 2);
  want.backward(grad_out);
  // Unrealized: pooled first, relu(max_pool(y)).
  Tensor x1 = input();
  Tensor got = max_pool2d(relu(x1), 2);
  CHECK(got.node()->op == ir::Op::Relu);
  CHECK(got.node()->args[0]->shape == Shape({1, 1, 2, 2}));
  got.backward(grad_out);
  Tensor g = x1.grad();
  g.eval();
  std::vector<double> a = vals(got), b = vals(want);
  REQUIRE(a.size() == 4);
  CHECK(a[0] == 0.);
  CHECK(a[1] == 5.);
  CHECK(std::isnan(a[2]));
  CHECK(a[3] == 0.);
  CHECK(b[0] == 0.);
  CHECK(b[1] == 5.);
  CHECK(std::isnan(b[2]));
  CHECK(b[3] == 0.);
  // Window 1's first 5 gets 2; every other window's gradient is 0 (ReLU's
  // mask at 0, at NaN and at the ties it made).
  std::vector<double> zero(16, 0.0);
  zero[3] = 2.;
  check_values(g, {1, 1, 4, 4}, zero);
  check_values(x0.grad(), {1, 1, 4, 4}, zero);
  // with_indices keeps the ReLU's ties: the first of the tied zeros.
  Tensor x2 = input();
  check_indices(max_pool2d_with_indices(relu(x2), 2).indices, {1, 1, 2, 2}, {0, 3, 8, 10});
}

TEST_CASE("max_pool2d keeps f32 and reads an elementwise expression", "[nn][pool]") {
  Tensor x = pat({1, 2, 5, 5}, 0, DType::f32);
  Tensor y = max_pool2d(relu(x), 3, {.stride = 2, .padding = 1});
  CHECK(y.dtype() == DType::f32);
  std::vector<double> want = {
      1.7, 2.2, 2.2, 1.85, 2.2, 2.35, 1.85, 1.85, 2.35, 2.5, 2., 0.65, 2.5, 2.15, 2.15, 1.8, 1.8, 2.3};
  for (double& v : want) v = std::max(v, 0.0);
  check_values(y, {1, 2, 3, 3}, want, 1e-6);
}

TEST_CASE("avg_pool2d with padding, counting the padding and not: values and gradients", "[nn][pool]") {
  Tensor x = leaf(pat({1, 2, 5, 5}, 4));
  Tensor y = avg_pool2d(x, 3, {.stride = 2, .padding = 1});
  check_values(y, {1, 2, 3, 3}, {
      -0.238888888889, 0.0888888888889, -0.0166666666667, 0.194444444444, 0.261111111111, -0.0333333333333,
      0.311111111111, 0.0722222222222, -0.0277777777778, -0.444444444444, 0.0611111111111, -0.222222222222,
      -0.394444444444, -0.0611111111111, -0.0611111111111, 0.105555555556, 0.0444444444444, 0.327777777778});
  Tensor(y * pat({1, 2, 3, 3}, 29)).sum().backward();
  check_values(x.grad(), {1, 2, 5, 5}, {
      -0.116666666667, -0.0277777777778, 0.0888888888889, -0.177777777778, -0.266666666667, -0.177777777778,
      0.0555555555556, 0.233333333333, -0.244444444444, -0.477777777778, -0.0611111111111, 0.0833333333333,
      0.144444444444, -0.0666666666667, -0.211111111111, -0.0666666666667, 0.277777777778, 0.344444444444,
      -0.0222222222222, -0.366666666667, -0.00555555555556, 0.194444444444, 0.2, 0.0444444444444, -0.155555555556,
      0.05, 0.305555555556, 0.255555555556, 0.155555555556, -0.1, 0.155555555556, 0.161111111111, 0.00555555555556,
      -0.138888888889, -0.144444444444, 0.105555555556, -0.144444444444, -0.25, -0.294444444444, -0.0444444444444,
      0.266666666667, -0.177777777778, -0.444444444444, -0.477777777778, -0.0333333333333, 0.161111111111,
      -0.0333333333333, -0.194444444444, -0.183333333333, 0.0111111111111});

  Tensor x2 = leaf(pat({1, 2, 5, 5}, 4));
  Tensor y2 = avg_pool2d(x2, 3, {.stride = 2, .padding = 1, .count_include_pad = false});
  check_values(y2, {1, 2, 3, 3}, {
      -0.5375, 0.133333333333, -0.0375, 0.291666666667, 0.261111111111, -0.05, 0.7, 0.108333333333, -0.0625, -1.,
      0.0916666666667, -0.5, -0.591666666667, -0.0611111111111, -0.0916666666667, 0.2375, 0.0666666666667, 0.7375});
  Tensor(y2 * pat({1, 2, 3, 3}, 29)).sum().backward();
  check_values(x2.grad(), {1, 2, 5, 5}, {
      -0.2625, -0.129166666667, 0.133333333333, -0.466666666667, -0.6, -0.354166666667, -0.0763888888889,
      0.277777777778, -0.638888888889, -0.916666666667, -0.0916666666667, 0.0527777777778, 0.144444444444,
      -0.172222222222, -0.316666666667, -0.104166666667, 0.340277777778, 0.444444444444, -0.222222222222,
      -0.666666666667, -0.0125, 0.2875, 0.3, -0.05, -0.35, 0.1125, 0.495833333333, 0.383333333333, 0.158333333333,
      -0.225, 0.270833333333, 0.404166666667, 0.133333333333, -0.158333333333, -0.291666666667, 0.158333333333,
      -0.0916666666667, -0.25, -0.316666666667, -0.0666666666667, 0.520833333333, -0.0208333333333,
      -0.541666666667, -0.583333333333, -0.0416666666667, 0.3625, 0.0708333333333, -0.291666666667,
      -0.266666666667, 0.025});
}

TEST_CASE("avg_pool2d with ceil_mode divides the partial windows by what they cover", "[nn][pool]") {
  check_values(avg_pool2d(pat({1, 1, 5, 5}, 5), 2, {.stride = 2, .ceil_mode = true}), {1, 1, 3, 3}, {
      -0.4875, 0.6875, -0.325, 0.3375, 0.25, -2.025, 0.325, -1.025, 1.75});
  // With padding 1 the last window runs past the padding too: torch counts the padding it covers
  // (count_include_pad) but not the part past it.
  check_values(avg_pool2d(pat({1, 1, 6, 6}, 6), 3, {.stride = 2, .padding = 1, .ceil_mode = true}), {1, 1, 4, 4},
               {
                   -0.344444444444, 0.211111111111, -0.127777777778, -0.00833333333333, -0.0777777777778,
                   0.133333333333, -0.0944444444444, -0.525, -0.427777777778, -0.111111111111, 0.222222222222,
                   0.475, -0.441666666667, -0.116666666667, 0.05, 0.4875});
  check_values(avg_pool2d(pat({1, 1, 6, 6}, 6), 3,
                          {.stride = 2, .padding = 1, .ceil_mode = true, .count_include_pad = false}),
               {1, 1, 4, 4}, {
                   -0.775, 0.316666666667, -0.191666666667, -0.025, -0.116666666667, 0.133333333333,
                   -0.0944444444444, -1.05, -0.641666666667, -0.111111111111, 0.222222222222, 0.95, -1.325,
                   -0.233333333333, 0.1, 1.95});
}

TEST_CASE("avg_pool2d with divisor_override divides every window by it", "[nn][pool]") {
  check_values(avg_pool2d(pat({1, 1, 3, 3}, 7), 2, {.stride = 1, .divisor_override = 3}), {1, 1, 2, 2}, {
      -1.3, 1.16666666667, -0.633333333333, 0.15});
}

TEST_CASE("avg_pool2d of an unbatched [C, H, W] input", "[nn][pool]") {
  check_values(avg_pool2d(pat({2, 4, 4}, 8), 2), {2, 2, 2}, {
      0., -0.0875, -0.35, -0.4375, 0.5625, -0.7875, 0.2125, 0.125});
}

TEST_CASE("adaptive_avg_pool2d where the size divides and where it does not (5 -> 3): values and gradient",
          "[nn][pool]") {
  Tensor x = leaf(pat({1, 2, 5, 5}, 8));
  Tensor y = adaptive_avg_pool2d(x, 3);
  // Cells [0, 2), [1, 4), [3, 5): they overlap.
  check_values(y, {1, 2, 3, 3}, {
      -0.3375, -0.508333333333, -1.1, 0.491666666667, -0.1, -0.691666666667, 0.9, 0.308333333333, 0.1375, -0.8,
      0.291666666667, -0.3, -0.391666666667, -0.422222222222, -0.733333333333, 0.4375, 0.266666666667, -0.325});
  Tensor(y * pat({1, 2, 3, 3}, 31)).sum().backward();
  check_values(x.grad(), {1, 2, 5, 5}, {
      -0.2375, -0.0875, 0.15, -0.425, -0.575, -0.3125, -0.00694444444444, 0.305555555556, -0.569444444444, -0.875,
      -0.075, 0.0805555555556, 0.155555555556, -0.144444444444, -0.3, -0.0625, 0.409722222222, 0.472222222222,
      -0.152777777778, -0.625, 0.0125, 0.329166666667, 0.316666666667, -0.00833333333333, -0.325, 0.1375, 0.5375,
      0.4, 0.2, -0.2, 0.3125, 0.473611111111, 0.161111111111, -0.0888888888889, -0.25, 0.175, -0.0638888888889,
      -0.238888888889, -0.288888888889, -0.05, 0.5625, 0.0486111111111, -0.513888888889, -0.513888888889,
      6.93889390391e-18, 0.3875, 0.1125, -0.275, -0.225, 0.05});
  check_values(adaptive_avg_pool2d(pat({1, 1, 6, 6}, 9), 3), {1, 1, 3, 3}, {
      -0.625, -0.7125, 0.4625, 0.1125, 0.025, -0.0625, -0.4125, 0.7625, 0.675});
  check_values(adaptive_avg_pool2d(pat({2, 1, 4, 5}, 10), {2, 3}), {2, 1, 2, 3}, {
      -0.2375, -0.408333333333, -1., 0.5875, 0.416666666667, -0.175, 0.15, 0.4, 0.65, -0.2875, -0.458333333333,
      -1.05});
}

TEST_CASE("adaptive_avg_pool2d to 1 is the global mean, unbatched input, output larger than the input",
          "[nn][pool]") {
  Tensor x = pat({2, 3, 4, 5}, 3);
  Tensor g = adaptive_avg_pool2d(x, 1);
  REQUIRE(dims(g) == std::vector<int64_t>{2, 3, 1, 1});
  require_close(vals(g), vals(x.mean({2, 3}, true)), 1e-12, 1e-12);
  check_values(adaptive_avg_pool2d(pat({1, 5, 5}, 11), 2), {1, 2, 2}, {
      0.172222222222, -0.0555555555556, 0.155555555556, -0.0722222222222});
  // 2 x 3 -> 3 x 5: cells repeat input elements, as torch's do.
  check_values(adaptive_avg_pool2d(pat({1, 1, 2, 3}, 12), {3, 5}), {1, 1, 3, 5}, {
      -1.9, -0.975, -0.05, 0.875, 1.8, -1.65, -0.725, 0.2, 1.125, 2.05, -1.4, -0.475, 0.45, 1.375, 2.3});
}

TEST_CASE("nn::MaxPool2d, AvgPool2d, AdaptiveAvgPool2d: PyTorch's reprs, no state, forward as the functions",
          "[nn][pool]") {
  nn::MaxPool2d mp(2);
  CHECK(mp->repr() == "MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)");
  CHECK(mp->parameters().empty());
  CHECK(mp->state_dict().empty());
  check_values(mp(pat({1, 1, 4, 4}, 0)), {1, 1, 2, 2}, {1.7, 1.2, 2.2, 0.85});
  CHECK(nn::MaxPool2d(3, MaxPool2dOptions{.stride = 1, .padding = 1, .dilation = 2, .ceil_mode = true})->repr() ==
        "MaxPool2d(kernel_size=3, stride=1, padding=1, dilation=2, ceil_mode=True)");
  CHECK(nn::MaxPool2d(Size2{2, 3})->repr() ==
        "MaxPool2d(kernel_size=(2, 3), stride=(2, 3), padding=0, dilation=1, ceil_mode=False)");
  nn::MaxPool2d mp3(3, MaxPool2dOptions{.stride = 2, .padding = 1});
  check_values(mp3(pat({1, 2, 5, 5}, 0)), {1, 2, 3, 3}, {
      1.7, 2.2, 2.2, 1.85, 2.2, 2.35, 1.85, 1.85, 2.35, 2.5, 2., 0.65, 2.5, 2.15, 2.15, 1.8, 1.8, 2.3});

  nn::AvgPool2d ap(2);
  CHECK(ap->repr() == "AvgPool2d(kernel_size=2, stride=2, padding=0)");
  CHECK(ap->state_dict().empty());
  nn::AvgPool2d ap3(3, AvgPool2dOptions{.stride = 2, .padding = 1, .count_include_pad = false});
  CHECK(ap3->repr() == "AvgPool2d(kernel_size=3, stride=2, padding=1)");
  check_values(ap3(pat({1, 2, 5, 5}, 4)), {1, 2, 3, 3}, {
      -0.5375, 0.133333333333, -0.0375, 0.291666666667, 0.261111111111, -0.05, 0.7, 0.108333333333, -0.0625, -1.,
      0.0916666666667, -0.5, -0.591666666667, -0.0611111111111, -0.0916666666667, 0.2375, 0.0666666666667, 0.7375});

  nn::AdaptiveAvgPool2d gap(1);
  CHECK(gap->repr() == "AdaptiveAvgPool2d(output_size=1)");
  CHECK(gap->state_dict().empty());
  CHECK(nn::AdaptiveAvgPool2d(Size2{2, 3})->repr() == "AdaptiveAvgPool2d(output_size=(2, 3))");
  nn::AdaptiveAvgPool2d ad(3);
  check_values(ad(pat({1, 2, 5, 5}, 8)), {1, 2, 3, 3}, {
      -0.3375, -0.508333333333, -1.1, 0.491666666667, -0.1, -0.691666666667, 0.9, 0.308333333333, 0.1375, -0.8,
      0.291666666667, -0.3, -0.391666666667, -0.422222222222, -0.733333333333, 0.4375, 0.266666666667, -0.325});

  // Braced options, as the header's examples write them.
  nn::AvgPool2d avg(3, {.stride = 1, .padding = 1});
  CHECK(avg->repr() == "AvgPool2d(kernel_size=3, stride=1, padding=1)");
  CHECK(dims(avg(pat({1, 1, 4, 4}, 0))) == std::vector<int64_t>{1, 1, 4, 4});
  nn::MaxPool2d mpb(3, {.stride = 1, .padding = 1});
  CHECK(mpb->repr() == "MaxPool2d(kernel_size=3, stride=1, padding=1, dilation=1, ceil_mode=False)");

  nn::Sequential net(nn::MaxPool2d(2), nn::AdaptiveAvgPool2d(1));
  CHECK(net->repr() ==
        "Sequential(\n"
        "  (0): MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)\n"
        "  (1): AdaptiveAvgPool2d(output_size=1)\n"
        ")");
}
