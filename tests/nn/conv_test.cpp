// conv1d, conv2d and conv_transpose2d, and nn::Conv2d, nn::LazyConv2d,
// nn::Conv1d and nn::ConvTranspose2d: values and gradients as PyTorch gives
// them (torch.nn.functional on the same f64 inputs, the numbers written out
// here), reprs, state-dict keys and the default initialization's bounds.
#include "tests/nn/pattern_values.h"

#include <algorithm>
#include <cmath>

#include "dsl/convolution.h"
#include "dsl/nn/conv.h"

using namespace tessel;
using namespace tessel::testing;

TEST_CASE("conv2d with stride 2 and padding 1, with and without a bias, and its gradients", "[nn][conv]") {
  Tensor x = leaf(pat({1, 2, 5, 5}, 0)), w = leaf(pat({3, 2, 3, 3}, 7)), b = leaf(pat({3}, 3));
  Tensor y = conv2d(x, w, b, {.stride = 2, .padding = 1});
  check_values(y, {1, 3, 3, 3}, {
      3.8425, 0.845, -2.1825, -0.7675, 6.505, -13.0475, 5.3725, -12.98, -2.535, 0.875, -11.3125, 8.365, -14.8,
      8.005, -4.7875, -0.215, 2.7475, -5.97, 4.22, -2.26, -4.3175, 3.235, 2.94, 7.26, 6.3175, -1.725, -4.6075});
  check_values(conv2d(x, w, {}, {.stride = 2, .padding = 1}), {1, 3, 3, 3}, {
      6.1925, 3.195, 0.1675, 1.5825, 8.855, -10.6975, 7.7225, -10.63, -0.185, 1.375, -10.8125, 8.865, -14.3, 8.505,
      -4.2875, 0.285, 3.2475, -5.47, 2.87, -3.61, -5.6675, 1.885, 1.59, 5.91, 4.9675, -3.075, -5.9575});
  Tensor(y * pat({1, 3, 3, 3}, 11)).sum().backward();
  check_values(x.grad(), {1, 2, 5, 5}, {
      1.65, -2.59, -5.0825, -0.905, 3.335, 2.3, 10.495, -11.165, -11.6375, 5.67, 1.4, -3.09, -5.3325, -1.405,
      3.085, 1.8, 9.495, -11.665, -1.78, 6.685, 1.15, -3.59, -5.5825, 6.4275, 1.825, -5.6775, -3.1125, 4.5, 6.89,
      4.325, -4.8025, 0.82, -0.6075, 4.665, 8.385, -6.2025, -4.1625, 3.975, 5.84, 3.8, -3.3275, 1.245, 0.8675,
      8.3725, 3.8, -6.7275, -5.2125, 3.45, 5.5475, -5.31});
  check_values(w.grad(), {3, 2, 3, 3}, {
      4.865, -11.195, 1.7475, 0.3675, -5.725, 4.15, 5.865, -0.3525, 0.2225, -10.0425, -0.5, 3.645, 2.6875, -6.885,
      1.63, -1.5525, -10.995, 5.57, -1.67, -3.07, 6.3225, -0.85, -2.375, -0.35, -3.195, -4.095, 4.7975, -5.465,
      3.21, -2.13, 0.59, -0.815, 4.33, -3.54, 2.31, -0.205, 1.1375, 5.055, -2.7375, 4.75, -1.55, 0.2, -0.3875,
      4.03, -4.2625, 4.415, 2.88, -4.1175, 1.27, -1.31, -0.04, 6.34, 1.98, -2.1925});
  check_values(b.grad(), {3}, {-1.45, 1.95, 0.3});
}

TEST_CASE("conv2d with dilation 2", "[nn][conv]") {
  Tensor y = conv2d(pat({1, 1, 6, 6}, 1), pat({2, 1, 3, 3}, 5), {}, {.dilation = 2});
  check_values(y, {1, 2, 2, 2}, {4.545, 4.695, 1.91, -4.7575, -0.3125, -0.4375, 5.755, -1.1875});
}

TEST_CASE("conv2d with groups 2 and a batch of 2, and its gradients", "[nn][conv]") {
  Tensor x = leaf(pat({2, 4, 4, 4}, 2)), w = leaf(pat({6, 2, 3, 3}, 9)), b = leaf(pat({6}, 4));
  Tensor y = conv2d(x, w, b, {.groups = 2});
  check_values(y, {2, 6, 2, 2}, {
      -4.9975, -8.4125, 5.0775, -21.315, 2.685, 1.705, -13.355, 13.6925, 2.54, 10.8125, 13.1575, -1.5475, 0.625,
      0.475, 15.68, -12.4975, -7.7025, 9.7325, -18.7625, -3.8525, 10.23, 10.405, 12.1925, 9.8425, 0.6625, -9.57,
      -21.835, -10.8575, -2.97, 14.735, 14.5725, 2.4825, 13.85, -10.1975, -3.3075, -6.145, 12.4875, -12.4075,
      -6.2925, -9.9775, -7.155, -4.1125, -11.3975, 12.855, 13.6025, 9.7375, 12.03, 3.8725});
  Tensor(y * pat({2, 6, 2, 2}, 13)).sum().backward();
  check_values(x.grad(), {2, 4, 4, 4}, {
      6.6875, 0.2125, -3.4125, -0.0825, -1.3375, 7.6925, -7.725, 2.455, -1.8625, 7.1425, 1.0675, 2.43, -3.75,
      8.705, -12.43, 6.305, 1.3625, -2.1125, 3.605, 2.9175, -5.4375, 5.285, -7.6075, 9.1975, -1.67, -7.89, 0.4275,
      9.1725, 4.2925, -3.245, -3.17, 3.23, 0.35, 4.4, -8.335, 4.625, 2.5325, 12.04, -14.78, 9.9825, 2.2, -9.335,
      -9.895, 10.9075, 5.4175, -6.85, -1.4925, 2.7825, 3.2675, -10.225, 4.31, 0.7175, 9.11, -15.725, 11.2375,
      -7.19, 9.535, -14.375, 18.6475, -9.5475, 3.0175, -10.9, 8.345, -3.665, -6.91, 7.085, -4.4075, 1.1775, -9.15,
      15.005, 0.0125, -8.9725, -7.775, 15.73, -10.12, -4.32, -4.59, 5.995, -1.545, 2.395, -1.81, 10.46, -11.89,
      4.755, -2.2475, 1.525, -5.64, 6.5, 8.7225, 0.23, -16.53, 5.85, 4.03, 2.775, -14.36, 2.17, 0.8225, 4.82,
      -8.965, 4.0475, -9.2075, 7.205, -3.03, -0.3225, -4.8625, -4.815, 5.9075, -0.0225, 1.9825, 5.45, -2.3625,
      -3.47, 4.3175, -8.65, 4.835, 0.7175, 6.1, -3.1, -5.255, -3.4625, 5.9, -3., 6.2075, -1.1425, 2.4325, 7.1,
      -1.7225, 3.5375});
  check_values(w.grad(), {6, 2, 3, 3}, {
      3.97, 8.6275, -2.875, 7.7025, -3.8, 10.2, -4.725, 9.275, -14.3475, -4.0775, 9.9225, -13.7, 8.9975, -14.625,
      3.415, -3.43, 5.2675, -2.195, -2.4875, -1.1775, -2.3925, -0.2775, -1.4925, -2.7075, -0.5925, -1.8075, -3.275,
      -1.2225, -2.4375, 7.9625, -1.5375, -3.005, -1.9475, -1.8525, 3.4975, 4.555, -1.6225, 12.5, -13.2725, 12.7,
      -13.0725, 12.16, -12.8725, 12.36, -1.7975, -13.0125, 12.22, -3.705, 12.42, -1.7375, -1.5025, -13.1525, 5.01,
      5.245, -0.8725, 7.8825, -2.0475, -0.6975, 8.0575, -1.8725, -2.5425, -3.13, -1.6975, 7.9075, -2.0225, -1.3475,
      -3.28, -1.8475, -1.1725, 3.7125, -1.6725, -0.9975, -5.37, -13.5975, 10.495, 6.9175, -1.31, -2.72, 3.55,
      -14.02, 9.5675, -0.9125, -2.3225, 8.64, -13.6225, 9.965, -4.575, 5.4825, -3.25, 7.7125, 4.7775, -4.2725,
      -6.505, -8.1925, 8.26, 6.0275, 0.5525, 7.6625, -6.9425, 8.4475, 6.215, -7.38, 7.85, -6.755, 5.1525, 1.6975,
      5.7775, -7.8175});
  check_values(b.grad(), {6}, {-1.85, 1.8, 0.4, -1., 2.65, 1.25});
}

TEST_CASE("depthwise conv2d: groups = channels, padding 1", "[nn][conv]") {
  Tensor y = conv2d(pat({1, 3, 4, 4}, 3), pat({3, 1, 3, 3}, 8), {}, {.padding = 1, .groups = 3});
  check_values(y, {1, 3, 4, 4}, {
      -6.17, 11.165, -7.02, -0.7625, 7.5175, -0.825, 2.58, -2.8375, -2.175, 1.18, -9.05, 2.5425, 1.115, -5.7575,
      -4.495, 1.2075, 2.5725, 1.0125, -6.33, 3.04, 7.1325, -2.025, -8.7425, 7.5475, -1.105, 6.2025, -9.8575, 2.515,
      2.0875, 1.4725, -6.37, 1.785, -0.3675, 3.2575, -5.11, 2.23, -2.065, 7.4175, -8.9175, -1.99, 3.525, -0.3525,
      -9.87, 6.3, 1.9825, 3.6775, -5.19, 1.285});
}

TEST_CASE("conv2d padding \"same\": odd, even (asymmetric padding) and dilated kernels", "[nn][conv]") {
  check_values(conv2d(pat({1, 2, 4, 5}, 4), pat({2, 2, 3, 3}, 6), pat({2}, 1), {.padding = "same"}), {1, 2, 4, 5},
               {
                   -12.235, 5.645, 5.42, -10.965, 1.58, -20.08, -0.66, 15.675, -18.995, -2.5325, -4.1025, -18.2175,
                   16.8025, -14.3325, -11.8725, 1.555, -11.86, 5.6, -5.725, -7.425, 3.08, 7.715, -10.245, 6.64,
                   3.8975, 0.8075, 16.1925, -10.235, -11.16, 10.8525, -6.24, 9.5475, 1.805, -10.735, 10.05,
                   -3.4775, -4.5825, 4.485, -4.88, 1.0575});
  // A 2x4 kernel pads 0 above, 1 below, 1 left and 2 right, as torch does.
  check_values(conv2d(pat({1, 1, 4, 5}, 5), pat({2, 1, 2, 4}, 10), {}, {.padding = "same"}), {1, 2, 4, 5},
               {
                   3.5325, 9.065, -4.7475, 3.8825, 2.6925, 0.99, -8.9925, 3.455, 2.19, -7.7475, -5.845, 1.735,
                   4.84, 1.255, -8.0875, 5.1825, -3.81, 0.915, -2.0775, -1.1325, 3.4975, 8.785, -4.905, 3.1475,
                   2.675, 0.9725, -10.4275, 3.91, 1.4725, -8.3425, -5.845, 0.9125, 5.9075, 2.3225, -7.4925, 4.745,
                   -4.51, 1.16, -1.0975, -0.5375});
  check_values(conv2d(pat({1, 1, 5, 5}, 6), pat({1, 1, 3, 2}, 2), {}, {.padding = std::string("same"), .dilation = 2}),
               {1, 1, 5, 5}, {
                   -3.025, -6.1275, 5.8475, -1.115, -2.2925, 6.15, -0.54, -4.9775, -2.0925, 3.21, 6.4275, 2.9375,
                   -4.18, 2.3375, 6.2275, -3.425, -2.7725, 2.78, 2.02, -4.96, -1.3425, 0.245, 5.7975, -4.5575,
                   -4.025});
}

TEST_CASE("conv2d padding \"valid\" is no padding", "[nn][conv]") {
  Tensor x = pat({1, 2, 4, 4}, 6), w = pat({1, 2, 3, 3}, 2);
  check_values(conv2d(x, w, {}, {.padding = "valid"}), {1, 1, 2, 2}, {1.2925, -6.2025, -1.165, -17.4975});
  check_values(conv2d(x, w), {1, 1, 2, 2}, {1.2925, -6.2025, -1.165, -17.4975});
}

TEST_CASE("conv2d with a rectangular kernel, stride and padding", "[nn][conv]") {
  Tensor y = conv2d(pat({1, 1, 5, 5}, 7), pat({2, 1, 2, 3}, 1), pat({2}, 6), {.stride = {2, 1}, .padding = {1, 0}});
  check_values(y, {1, 2, 3, 3}, {
      4.735, -4.6575, -4.7075, -8.06, 3.9625, -5.73, -8.025, -8.375, 3.6475, -2.1425, 5.125, -3.7675, -4.8025,
      -6.1725, 1.295, 3.7175, -4.975, -6.345});
}

TEST_CASE("conv2d of an unbatched [C, H, W] input gives [O, OH, OW]", "[nn][conv]") {
  Tensor x = pat({3, 3, 3}, 8), w = pat({2, 3, 2, 2}, 4), b = pat({2}, 9);
  check_values(conv2d(x, w, b), {2, 2, 2}, {12.98, -19.4975, 12.255, -11.1325, -10.255, 16.565, -11.605, 14.205});
  check_values(conv2d(x.unsqueeze(0), w, b), {1, 2, 2, 2}, {
      12.98, -19.4975, 12.255, -11.1325, -10.255, 16.565, -11.605, 14.205});
}

TEST_CASE("conv2d keeps the input's dtype: f32 in, f32 out", "[nn][conv]") {
  Tensor y = conv2d(pat({1, 2, 5, 5}, 0, DType::f32), pat({3, 2, 3, 3}, 7, DType::f32), pat({3}, 3, DType::f32),
                    {.stride = 2, .padding = 1});
  CHECK(y.dtype() == DType::f32);
  check_values(y, {1, 3, 3, 3}, {
      3.8425, 0.845, -2.1825, -0.7675, 6.505, -13.0475, 5.3725, -12.98, -2.535, 0.875, -11.3125, 8.365, -14.8,
      8.005, -4.7875, -0.215, 2.7475, -5.97, 4.22, -2.26, -4.3175, 3.235, 2.94, 7.26, 6.3175, -1.725, -4.6075}, 1e-5);
}

TEST_CASE("conv1d with stride 2, padding 1 and a bias, and its gradients", "[nn][conv]") {
  Tensor x = leaf(pat({2, 2, 7}, 0)), w = leaf(pat({3, 2, 3}, 3)), b = leaf(pat({3}, 5));
  Tensor y = conv1d(x, w, b, {.stride = 2, .padding = 1});
  check_values(y, {2, 3, 4}, {
      2.1925, -6.52, 2.3225, -4.57, -7.6675, -8.3625, 4.2475, -1.67, -3.135, 4.1875, -4.9375, 1.23, -5.395, 1.8475,
      1.3475, -7.625, 4.515, -4.4275, 3.89, -2.125, 3.315, 3.69, -4.6775, 3.375});
  Tensor(y * pat({2, 3, 4}, 17)).sum().backward();
  check_values(x.grad(), {2, 2, 7}, {
      -1.825, 5.775, -1.575, -9.885, 1.2, -0.0425, -1.075, -3.3, -0.46, -2.8, 3.065, 2.75, 4.065, -1.8, -1.35,
      -10.1925, 1.425, -0.35, -0.85, 4.4425, -0.6, -2.35, 2.45, 3.2, 3.45, -1.35, -3.125, -0.85});
  check_values(w.grad(), {3, 2, 3}, {
      -2.8375, 7.9825, -1.1625, -3.455, -4.1675, -2.105, -1.205, -0.7825, 7.2875, -3.805, -2.2775, 4.3625, -2.855,
      9.1375, -1.18, -4.155, -3.9225, -2.805});
  check_values(b.grad(), {3}, {1.85, -4.6, -0.95});
}

TEST_CASE("conv1d with dilation, groups and padding \"same\", and an unbatched [C, L] input", "[nn][conv]") {
  check_values(conv1d(pat({1, 4, 6}, 2), pat({2, 2, 3}, 6), {}, {.padding = "same", .dilation = 2, .groups = 2}),
               {1, 2, 6}, {7.18, -4.39, 9.375, -0.825, -6.61, 4.7425, -2.4075, 1.755, 7.24, -4.7375, 1.4775, -1.99});
  check_values(conv1d(pat({2, 5}, 1), pat({1, 2, 2}, 4)), {1, 4}, {10.965, -1.9325, -5.4875, 9.39});
}

TEST_CASE("conv_transpose2d with stride 2, padding 1, output_padding 1 and a bias, and its gradients", "[nn][conv]") {
  Tensor x = leaf(pat({1, 2, 3, 3}, 0)), w = leaf(pat({2, 3, 3, 3}, 5)), b = leaf(pat({3}, 2));
  Tensor y = conv_transpose2d(x, w, b, {.stride = 2, .padding = 1, .output_padding = 1});
  check_values(y, {1, 3, 6, 6}, {
      -2.2, -9.4925, -2.8475, 0.8275, -1.2225, -3.35, -2.675, -11.1175, -3.97, -6.6375, -0.72, -3.125, -2.375,
      -9.8425, -3.0225, 0.4775, -1.3975, -1.675, -3.025, -9.2925, -4.32, -4.8125, -1.07, 0.225, -2.55, -10.1925,
      -3.1975, 0.1275, -1.5725, 0., -3.3, -9.8425, -2.0975, 1.6525, -1.1475, 0.425, -5.6, 5.0825, -0.6975, 0.2425,
      -1.0975, 2.5825, -9.825, 4.79, -0.02, 4.4525, -0.82, -6.0025, -4.275, 2.6825, 0.6275, -2.1575, 0.2275,
      0.7075, -7.175, 2.515, 2.63, 2.1775, 1.83, -7.2275, -2.95, 0.2825, 1.9525, -4.5575, 1.5525, -1.1675, -3.7,
      0.6325, 3.0525, -3.0325, 1.9775, -0.7425, 8.675, 1.9825, 0.4425, 0.6675, 4.835, 2.7075, 10.8, 2.265, 3.6775,
      -0.365, -3.6975, 3.24, 6.45, 2.5825, -1.7825, 1.2675, 2.61, 2.3325, 8.875, 3.465, 1.7525, 0.835, -5.6225,
      2.49, 4.225, 3.1825, -4.0075, 1.8675, 0.385, 1.9575, 3.475, 3.5325, -2.9075, 3.3925, 0.81, 2.3825});
  Tensor(y * pat({1, 3, 6, 6}, 19)).sum().backward();
  check_values(x.grad(), {1, 2, 3, 3}, {
      -4.91, -8.8225, 7.075, 5.8025, -8.645, -15.455, -0.2575, 16.9025, 5.5475, -7.5775, -11.1325, 9.7975, 20.4075,
      1.7225, -24.935, -14.0375, 7.4175, 29.9975});
  check_values(w.grad(), {2, 3, 3, 3}, {
      3.3975, -0.445, -0.345, -5.0675, -4.9925, -4.46, 0.34, 4.515, -6.82, -3.8175, -8.46, -1.5425, 0.1075, 4.5825,
      -6.7525, -3.8275, -4.595, -7.345, 0.835, -0.315, 9.1275, -4.06, -4.5275, -7.2775, 3.8725, -6.8875, 3.9975,
      -4.0225, -3.7475, 4.67, 5.5175, 6.5925, -0.725, -2.8, -0.7, 5.6175, 2.795, 5.12, -5.1475, -2.725, -0.55,
      5.7675, 5.1175, -1.025, -4.05, -4.0225, 4.645, -3.0975, 5.1925, -0.875, -3.9, -0.6, 5.4675, -1.85});
  check_values(b.grad(), {3}, {-1.3, -2.45, 1.45});
}

TEST_CASE("conv_transpose2d with groups 2, and with stride 2 and dilation 2", "[nn][conv]") {
  // weight [C_in, C_out / groups, KH, KW]: 4 input channels, 2 output channels.
  check_values(conv_transpose2d(pat({1, 4, 2, 2}, 3), pat({4, 1, 2, 2}, 7), {}, {.groups = 2}), {1, 2, 3, 3},
               {
                   5.0525, 2.15, 3.9425, -6.815, 1.88, 3.7, 3.645, -6.615, 3.4025, -5.8225, -0.2225, 3.1025, 1.1,
                   -6.155, 3.91, 3.75, -5.46, 4.4525});
  check_values(conv_transpose2d(pat({1, 1, 2, 2}, 1), pat({1, 2, 2, 2}, 4), pat({2}, 8), {.stride = 2, .dilation = 2}),
               {1, 2, 5, 5}, {
                   3.535, -2.1, 0.3825, -2.1, -1.83, -2.1, -2.1, -2.1, -2.1, -2.1, -8.405, -2.1, 5.3925, -2.1,
                   -0.1425, -2.1, -2.1, -2.1, -2.1, -2.1, -0.35, -2.1, -7.08, -2.1, 1.41, -0.3725, -0.25, -4.935,
                   -0.25, -1.39, -0.25, -0.25, -0.25, -0.25, -0.25, 2.9975, -0.25, 1.46, -0.25, -4.285, -0.25,
                   -0.25, -0.25, -0.25, -0.25, -1.875, -0.25, 2.9725, -0.25, -1.3225});
}

TEST_CASE("conv_transpose2d is the gradient of conv2d with respect to its input", "[nn][conv]") {
  // For y = conv2d(x, w, stride 2, padding 1), d(sum(y * g))/dx = conv_transpose2d(g, w, same options,
  // output_padding making the shapes agree).
  Tensor x = leaf(pat({1, 2, 6, 6}, 3));
  Tensor w = pat({3, 2, 3, 3}, 12), g = pat({1, 3, 3, 3}, 21);
  Tensor(conv2d(x, w, {}, {.stride = 2, .padding = 1}) * g).sum().backward();
  Tensor t = conv_transpose2d(g, w, {}, {.stride = 2, .padding = 1, .output_padding = 1});
  REQUIRE(dims(t) == std::vector<int64_t>{1, 2, 6, 6});
  require_close(vals(t), vals(x.grad()), 1e-10, 1e-10);
}

TEST_CASE("nn::Conv2d: repr, state-dict keys and shapes, forward as conv2d", "[nn][conv]") {
  manual_seed(1);
  nn::Conv2d c1(1, 6, 5, Conv2dOptions{.padding = 2});
  CHECK(c1->repr() == "Conv2d(1, 6, kernel_size=(5, 5), stride=(1, 1), padding=(2, 2))");
  CHECK(c1->state_dict().keys() == std::vector<std::string>{"weight", "bias"});
  CHECK(dims(c1->weight) == std::vector<int64_t>{6, 1, 5, 5});
  CHECK(dims(c1->bias) == std::vector<int64_t>{6});
  CHECK(c1->weight.dtype() == DType::f32);
  CHECK(c1->in_channels == 1);
  CHECK(c1->out_channels == 6);

  nn::Conv2d c2(4, 8, 3, Conv2dOptions{.stride = 2, .padding = 1, .dilation = 2, .groups = 2}, false);
  CHECK(c2->repr() ==
        "Conv2d(4, 8, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), dilation=(2, 2), groups=2, bias=False)");
  CHECK(c2->state_dict().keys() == std::vector<std::string>{"weight"});
  CHECK(dims(c2->weight) == std::vector<int64_t>{8, 2, 3, 3});
  CHECK_FALSE(c2->bias.defined());
  CHECK(c2->parameters().size() == 1);

  CHECK(nn::Conv2d(4, 8, Size2{2, 3}, Conv2dOptions{.stride = {2, 1}, .padding = {1, 0}})->repr() ==
        "Conv2d(4, 8, kernel_size=(2, 3), stride=(2, 1), padding=(1, 0))");
  CHECK(nn::Conv2d(4, 8, 3, Conv2dOptions{.padding = "same"})->repr() ==
        "Conv2d(4, 8, kernel_size=(3, 3), stride=(1, 1), padding=same)");
  CHECK(nn::Conv2d(4, 8, 3, Conv2dOptions{.padding = "valid"})->repr() ==
        "Conv2d(4, 8, kernel_size=(3, 3), stride=(1, 1), padding=valid)");
  CHECK(nn::Conv2d(4, 8, 3)->repr() == "Conv2d(4, 8, kernel_size=(3, 3), stride=(1, 1))");

  // The forward is conv2d with the module's parameters and options.
  c1->weight.data().copy_(pat({6, 1, 5, 5}, 4, DType::f32));
  c1->bias.data().copy_(pat({6}, 9, DType::f32));
  Tensor x = pat({2, 1, 6, 6}, 1, DType::f32);
  Tensor y = c1(x);
  CHECK(dims(y) == std::vector<int64_t>{2, 6, 6, 6});
  Tensor want = conv2d(x.to(DType::f64), pat({6, 1, 5, 5}, 4), pat({6}, 9), {.padding = 2});
  require_close(vals(y), vals(want), 1e-5, 1e-5);
  // And the gradients reach the parameters.
  y.sum().backward();
  REQUIRE(c1->weight.grad().defined());
  CHECK(dims(c1->weight.grad()) == std::vector<int64_t>{6, 1, 5, 5});
  // d sum(y) / d bias_o = N * OH * OW = 72.
  require_close(vals(c1->bias.grad()), std::vector<double>(6, 72.0), 1e-6, 1e-6);
}

TEST_CASE("the layers take braced options and sizes, as the headers' examples write them", "[nn][conv]") {
  nn::Conv2d c1(1, 6, 5, {.padding = 2});
  CHECK(c1->repr() == "Conv2d(1, 6, kernel_size=(5, 5), stride=(1, 1), padding=(2, 2))");
  nn::Conv2d down(64, 128, 3, {.stride = 2, .padding = 1}, false);
  CHECK(down->repr() == "Conv2d(64, 128, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), bias=False)");
  nn::Conv2d rect(4, 8, {2, 3});
  CHECK(rect->repr() == "Conv2d(4, 8, kernel_size=(2, 3), stride=(1, 1))");
  nn::LazyConv2d lazy(32, 3, {.padding = "same"});
  CHECK(lazy->repr() == "LazyConv2d(0, 32, kernel_size=(3, 3), stride=(1, 1), padding=same)");
  nn::Conv1d c(16, 32, 3, {.padding = 1});
  CHECK(dims(c->weight) == std::vector<int64_t>{32, 16, 3});
  nn::ConvTranspose2d up(64, 32, 2, {.stride = 2});
  CHECK(up->repr() == "ConvTranspose2d(64, 32, kernel_size=(2, 2), stride=(2, 2))");
}

TEST_CASE("nn::Conv2d, Conv1d and ConvTranspose2d draw weight and bias in +-1/sqrt(fan_in)", "[nn][conv][init]") {
  manual_seed(2);
  auto check_bound = [](const Tensor& t, double bound) {
    std::vector<double> v = vals(t);
    double mx = 0;
    for (double e : v) mx = std::max(mx, std::fabs(e));
    INFO("max |value| " << mx << " bound " << bound << " over " << v.size() << " values");
    CHECK(mx <= bound);
    // Uniform over the whole range, not a narrower one (checked where there are enough draws).
    if (v.size() >= 40) CHECK(mx > 0.8 * bound);
  };
  // fan_in = in_channels / groups * KH * KW; kaiming_uniform(a = sqrt(5)) gives bound 1/sqrt(fan_in).
  nn::Conv2d c(8, 16, 3, Conv2dOptions{.groups = 2});
  check_bound(c->weight, 1.0 / std::sqrt(4.0 * 9));
  check_bound(c->bias, 1.0 / std::sqrt(4.0 * 9));
  nn::Conv2d big(64, 32, 3);
  check_bound(big->weight, 1.0 / std::sqrt(64.0 * 9));
  nn::Conv1d c1(6, 40, 5);
  check_bound(c1->weight, 1.0 / std::sqrt(6.0 * 5));
  check_bound(c1->bias, 1.0 / std::sqrt(6.0 * 5));
  // ConvTranspose2d's weight is [in, out / groups, KH, KW]: torch's fan_in is its dim 1 times the kernel.
  nn::ConvTranspose2d t(40, 6, 3);
  CHECK(dims(t->weight) == std::vector<int64_t>{40, 6, 3, 3});
  check_bound(t->weight, 1.0 / std::sqrt(6.0 * 9));
  // Two draws differ, and reset_parameters redraws.
  std::vector<double> before = vals(c->weight);
  c->reset_parameters();
  CHECK(vals(c->weight) != before);
  check_bound(c->weight, 1.0 / std::sqrt(4.0 * 9));
}

TEST_CASE("nn::LazyConv2d takes in_channels from its first input, then prints as Conv2d", "[nn][conv][lazy]") {
  manual_seed(3);
  nn::LazyConv2d lazy(8, 3, Conv2dOptions{.padding = 1});
  CHECK(lazy->in_channels == 0);
  CHECK(lazy->repr() == "LazyConv2d(0, 8, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))");
  Tensor y = lazy(pat({2, 3, 5, 5}, 0, DType::f32));
  CHECK(dims(y) == std::vector<int64_t>{2, 8, 5, 5});
  CHECK(lazy->in_channels == 3);
  CHECK(dims(lazy->weight) == std::vector<int64_t>{8, 3, 3, 3});
  CHECK(dims(lazy->bias) == std::vector<int64_t>{8});
  CHECK(lazy->repr() == "Conv2d(3, 8, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))");
  CHECK(lazy->state_dict().keys() == std::vector<std::string>{"weight", "bias"});
  // Materialized with the default init: fan_in = 3 * 9.
  for (double v : vals(lazy->weight)) CHECK(std::fabs(v) <= 1.0 / std::sqrt(27.0));
  // The output is conv2d with the materialized parameters.
  Tensor want = conv2d(pat({2, 3, 5, 5}, 0, DType::f32), lazy->weight.data(), lazy->bias.data(), {.padding = 1});
  require_close(vals(y), vals(want), 1e-6, 1e-6);
  // An unbatched input materializes from dim -3 too.
  nn::LazyConv2d lazy3(2, 2, Conv2dOptions{}, false);
  CHECK(dims(lazy3(pat({5, 4, 4}, 1, DType::f32))) == std::vector<int64_t>{2, 3, 3});
  CHECK(dims(lazy3->weight) == std::vector<int64_t>{2, 5, 2, 2});
  CHECK(lazy3->state_dict().keys() == std::vector<std::string>{"weight"});
}

TEST_CASE("nn::LazyConv2d in a Sequential loads a state dict before its first forward", "[nn][conv][lazy]") {
  manual_seed(4);
  nn::Sequential src(nn::Conv2d(3, 4, 3), nn::ReLU());
  nn::Sequential dst(nn::LazyConv2d(4, 3), nn::ReLU());
  dst->load_state_dict(src->state_dict());
  Tensor x = pat({1, 3, 4, 4}, 2, DType::f32);
  require_close(vals(dst(x)), vals(src(x)), 1e-6, 1e-6);
}

TEST_CASE("nn::Conv1d: repr, keys, shapes and forward", "[nn][conv]") {
  nn::Conv1d c(16, 32, 3, Conv1dOptions{.padding = 1});
  CHECK(c->repr() == "Conv1d(16, 32, kernel_size=(3,), stride=(1,), padding=(1,))");
  CHECK(c->state_dict().keys() == std::vector<std::string>{"weight", "bias"});
  CHECK(dims(c->weight) == std::vector<int64_t>{32, 16, 3});
  nn::Conv1d d(16, 32, 3, Conv1dOptions{.stride = 2, .dilation = 2, .groups = 4}, false);
  CHECK(d->repr() == "Conv1d(16, 32, kernel_size=(3,), stride=(2,), dilation=(2,), groups=4, bias=False)");
  CHECK(dims(d->weight) == std::vector<int64_t>{32, 4, 3});
  CHECK(d->state_dict().keys() == std::vector<std::string>{"weight"});

  nn::Conv1d e(2, 3, 3, Conv1dOptions{.stride = 2, .padding = 1});
  e->weight.data().copy_(pat({3, 2, 3}, 3, DType::f32));
  e->bias.data().copy_(pat({3}, 5, DType::f32));
  check_values(e(pat({2, 2, 7}, 0, DType::f32)), {2, 3, 4}, {
      2.1925, -6.52, 2.3225, -4.57, -7.6675, -8.3625, 4.2475, -1.67, -3.135, 4.1875, -4.9375, 1.23, -5.395, 1.8475,
      1.3475, -7.625, 4.515, -4.4275, 3.89, -2.125, 3.315, 3.69, -4.6775, 3.375}, 1e-5);
}

TEST_CASE("nn::ConvTranspose2d: repr, keys, shapes and forward", "[nn][conv]") {
  nn::ConvTranspose2d up(64, 32, 2, ConvTranspose2dOptions{.stride = 2});
  CHECK(up->repr() == "ConvTranspose2d(64, 32, kernel_size=(2, 2), stride=(2, 2))");
  CHECK(dims(up->weight) == std::vector<int64_t>{64, 32, 2, 2});
  CHECK(dims(up->bias) == std::vector<int64_t>{32});
  CHECK(up->state_dict().keys() == std::vector<std::string>{"weight", "bias"});
  CHECK(dims(up(pat({1, 64, 3, 3}, 0, DType::f32))) == std::vector<int64_t>{1, 32, 6, 6});
  nn::ConvTranspose2d g(4, 6, 3, ConvTranspose2dOptions{.stride = 2, .padding = 1, .output_padding = 1, .groups = 2});
  CHECK(g->repr() ==
        "ConvTranspose2d(4, 6, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), output_padding=(1, 1), groups=2)");
  CHECK(dims(g->weight) == std::vector<int64_t>{4, 3, 3, 3});
  nn::ConvTranspose2d d(4, 6, 3, ConvTranspose2dOptions{.dilation = 2}, false);
  CHECK(d->repr() == "ConvTranspose2d(4, 6, kernel_size=(3, 3), stride=(1, 1), dilation=(2, 2), bias=False)");
  CHECK(d->state_dict().keys() == std::vector<std::string>{"weight"});

  nn::ConvTranspose2d t(2, 3, 3, ConvTranspose2dOptions{.stride = 2, .padding = 1, .output_padding = 1});
  t->weight.data().copy_(pat({2, 3, 3, 3}, 5, DType::f32));
  t->bias.data().copy_(pat({3}, 2, DType::f32));
  check_values(t(pat({1, 2, 3, 3}, 0, DType::f32)), {1, 3, 6, 6}, {
      -2.2, -9.4925, -2.8475, 0.8275, -1.2225, -3.35, -2.675, -11.1175, -3.97, -6.6375, -0.72, -3.125, -2.375,
      -9.8425, -3.0225, 0.4775, -1.3975, -1.675, -3.025, -9.2925, -4.32, -4.8125, -1.07, 0.225, -2.55, -10.1925,
      -3.1975, 0.1275, -1.5725, 0., -3.3, -9.8425, -2.0975, 1.6525, -1.1475, 0.425, -5.6, 5.0825, -0.6975, 0.2425,
      -1.0975, 2.5825, -9.825, 4.79, -0.02, 4.4525, -0.82, -6.0025, -4.275, 2.6825, 0.6275, -2.1575, 0.2275,
      0.7075, -7.175, 2.515, 2.63, 2.1775, 1.83, -7.2275, -2.95, 0.2825, 1.9525, -4.5575, 1.5525, -1.1675, -3.7,
      0.6325, 3.0525, -3.0325, 1.9775, -0.7425, 8.675, 1.9825, 0.4425, 0.6675, 4.835, 2.7075, 10.8, 2.265, 3.6775,
      -0.365, -3.6975, 3.24, 6.45, 2.5825, -1.7825, 1.2675, 2.61, 2.3325, 8.875, 3.465, 1.7525, 0.835, -5.6225,
      2.49, 4.225, 3.1825, -4.0075, 1.8675, 0.385, 1.9575, 3.475, 3.5325, -2.9075, 3.3925, 0.81, 2.3825}, 1e-5);
}
