// Convolutions on gpu(0) against the CPU: conv2d forward and both gradients
// (and the bias's) with stride, padding -- numbers, and "same" with an even
// kernel, which pads more after than before --, dilation, groups (depthwise
// too), a strided input, conv1d and conv_transpose2d, in f32 and f64. On a
// GPU they run on cuDNN: every f32 convolution node here must reach it
// (CudaStats::cudnn_convs) and none run on the host. The same program runs on
// a real GPU (label gpu) and on the emulated device with the cuDNN stand-in
// (label emulated-gpu). Without a GPU the program exits 77 (Skipped).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "codegen/cuda/cuda_backend.h"
#include "dsl/tessel.h"

using namespace tessel;

namespace {

std::vector<double> host(const Tensor& t) { return t.cpu().to(DType::f64).to_vector<double>(); }

// |got - want| <= tol * max(1, |want|) elementwise.
void check_close(const Tensor& got, const Tensor& want, double tol) {
  REQUIRE(got.shape() == want.shape());
  const std::vector<double> g = host(got), w = host(want);
  for (size_t i = 0; i < g.size(); ++i) {
    INFO("element " << i << ": got " << g[i] << ", want " << w[i]);
    CHECK(std::fabs(g[i] - w[i]) <= tol * std::max(1.0, std::fabs(w[i])));
  }
}

// The convolution `conv(x, w, b)` and the gradients of sum(conv * r) for a
// random r, on the CPU and on gpu(0) from the same values; in f32 its three
// convolution nodes (forward and gradients) must run on cuDNN and, where
// `host_free`, nothing on the host.
using Conv = std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)>;
void check_on_gpu(DType t, const Shape& xs, const Shape& ws, int64_t out_channels, const Conv& conv,
                  bool host_free = true) {
  const double tol = t == DType::f32 ? 1e-4 : 1e-10;
  manual_seed(17);
  Tensor x = randn(xs, t), w = randn(ws, t), b = randn({out_channels}, t);
  Tensor xg = x.to(gpu(0)), wg = w.to(gpu(0)), bg = b.to(gpu(0));
  for (Tensor* p : {&x, &w, &b, &xg, &wg, &bg}) p->requires_grad_(true);
  Tensor y = conv(x, w, b);
  Tensor r = randn_like(y);
  (y * r).sum().backward();

  const CudaStats before = cuda_stats();
  Tensor yg = conv(xg, wg, bg);
  CHECK(yg.device() == gpu(0));
  (yg * r.to(gpu(0))).sum().backward();
  REQUIRE(xg.grad().defined());
  CHECK(xg.grad().device() == gpu(0));
  {
    INFO("output");
    check_close(yg, y, tol);
  }
  {
    INFO("input gradient");
    check_close(xg.grad(), x.grad(), tol);
  }
  {
    INFO("weight gradient");
    check_close(wg.grad(), w.grad(), tol);
  }
  {
    INFO("bias gradient");
    check_close(bg.grad(), b.grad(), tol);
  }
  if (t == DType::f32) {
    CHECK(cuda_stats().cudnn_convs == before.cudnn_convs + 3);
    if (host_free) CHECK(cuda_stats().host_evals == before.host_evals);
  }
}

void check_conv2d(DType t, const Shape& xs, const Shape& ws, const Conv2dOptions& o) {
  check_on_gpu(t, xs, ws, ws[0], [&](const Tensor& x, const Tensor& w, const Tensor& b) { return conv2d(x, w, b, o); });
}

}  // namespace

TEST_CASE("conv2d on gpu(0): forward and gradients match the CPU (stride, padding, dilation, groups)",
          "[gpu][conv]") {
  for (DType t : {DType::f32, DType::f64}) {
    INFO(dtype_name(t));
    check_conv2d(t, {2, 3, 7, 6}, {4, 3, 3, 3}, {.padding = 1});
    check_conv2d(t, {2, 3, 9, 8}, {5, 3, 3, 2}, {.stride = {2, 3}, .padding = {1, 2}});
    check_conv2d(t, {1, 2, 9, 10}, {3, 2, 3, 3}, {.padding = 2, .dilation = {2, 3}});
    check_conv2d(t, {2, 4, 6, 5}, {6, 2, 2, 3}, {.padding = 1, .groups = 2});
    check_conv2d(t, {2, 3, 7, 7}, {3, 1, 3, 3}, {.stride = 2, .padding = 1, .groups = 3});  // depthwise
  }
}

TEST_CASE("conv2d on gpu(0) with padding \"same\" and even kernels (more padding after than before) matches the CPU",
          "[gpu][conv]") {
  for (DType t : {DType::f32, DType::f64}) {
    INFO(dtype_name(t));
    check_conv2d(t, {2, 3, 6, 7}, {4, 3, 2, 4}, {.padding = "same"});  // (0, 1) rows, (1, 2) columns
    // Dilated: the total padding dilation * (k - 1) = 3 rows is split 1 before, 2 after.
    check_conv2d(t, {1, 2, 8, 6}, {3, 2, 2, 3}, {.padding = "same", .dilation = {3, 1}, .groups = 1});
  }
}

TEST_CASE("conv2d on gpu(0) of a strided view matches the CPU", "[gpu][conv]") {
  check_on_gpu(DType::f32, {2, 3, 6, 5}, {4, 3, 3, 3}, 4, [](const Tensor& x, const Tensor& w, const Tensor& b) {
    return conv2d(x.transpose(2, 3), w, b, {.stride = 2, .padding = 1});  // an input of shape [2, 3, 5, 6]
  });
}

TEST_CASE("conv1d and conv_transpose2d on gpu(0) match the CPU", "[gpu][conv]") {
  for (DType t : {DType::f32, DType::f64}) {
    INFO(dtype_name(t));
    check_on_gpu(t, {2, 4, 11}, {6, 2, 4}, 6, [](const Tensor& x, const Tensor& w, const Tensor& b) {
      return conv1d(x, w, b, {.padding = "same", .groups = 2});
    });
    // A transposed convolution is a convolution of the spread input; the
    // spread's gradient has a scatter-add, which runs on the host.
    check_on_gpu(
        t, {2, 3, 4, 5}, {3, 2, 3, 3}, 2,
        [](const Tensor& x, const Tensor& w, const Tensor& b) {
          return conv_transpose2d(x, w, b, {.stride = 2, .padding = 1, .output_padding = 1});
        },
        /*host_free=*/false);
  }
}

TEST_CASE("a conv2d forward on gpu(0) without gradients is one cuDNN call", "[gpu][conv]") {
  manual_seed(19);
  Tensor x = randn({2, 3, 8, 8}), w = randn({4, 3, 3, 3});
  const Tensor want = conv2d(x, w, {}, {.padding = 1});
  const CudaStats before = cuda_stats();
  Tensor got = conv2d(x.to(gpu(0)), w.to(gpu(0)), {}, {.padding = 1});
  check_close(got, want, 1e-4);
  CHECK(cuda_stats().cudnn_convs == before.cudnn_convs + 1);
  CHECK(cuda_stats().host_evals == before.host_evals);
}
