// tessel's cuDNN convolutions (runtime/cuda/cudnn.h) over the host stand-in
// (libtessel-emulated-cudnn.so): each pass, dtype, stride, padding, dilation
// and group count against a host loop written from the definition, exactly
// (small integers, so every sum is exact); the algorithm tessel picks and the
// workspace it passes; what never reaches the library; and convolutions of
// the DSL on gpu(0), which must run on it.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "codegen/cuda/cuda_backend.h"
#include "dsl/tessel.h"
#include "emulated_test_support.h"
#include "runtime/cuda/cudnn.h"
#include "runtime/cuda/driver.h"
#include "runtime/errors.h"

using namespace tessel::cuda;
using tessel::DType;

namespace {

enum Pass : int { kForward = 0, kBackwardData = 1, kBackwardFilter = 2 };

template <class F>
F standin(const char* name) {
  (void)cudnn_available();  // loads the library
  return emulated_test::symbol<F>(TESSEL_EMU_CUDNN_PATH, name);
}
unsigned long long calls(Pass p) {
  auto f = standin<unsigned long long (*)(int)>("tessel_emu_cudnn_convolutions");
  return f ? f(p) : ~0ull;
}
int last_algo(Pass p) {
  auto f = standin<int (*)(int)>("tessel_emu_cudnn_last_algo");
  return f ? f(p) : -2;
}
unsigned long long last_workspace(Pass p) {
  auto f = standin<unsigned long long (*)(int)>("tessel_emu_cudnn_last_workspace");
  return f ? f(p) : 0;
}
void refuse(int type) {
  auto f = standin<void (*)(int)>("tessel_emu_cudnn_refuse");
  REQUIRE(f);
  f(type);
}

// The three passes from the definition, each output element a sum gathered on its own.
struct Loops {
  const ConvProblem& p;
  int64_t cg() const { return p.c / p.groups; }
  int64_t og() const { return p.o / p.groups; }
  int64_t xi(int64_t n, int64_t c, int64_t y, int64_t x) const { return ((n * p.c + c) * p.h + y) * p.w + x; }
  int64_t wi(int64_t o, int64_t c, int64_t y, int64_t x) const { return ((o * cg() + c) * p.kh + y) * p.kw + x; }
  int64_t yi(int64_t n, int64_t o, int64_t y, int64_t x) const {
    return ((n * p.o + o) * p.out_h() + y) * p.out_w() + x;
  }
  // The input row a kernel row reads for an output row (may lie in the padding).
  int64_t in_y(int64_t oy, int64_t ky) const { return oy * p.stride_h - p.pad_h + ky * p.dilation_h; }
  int64_t in_x(int64_t ox, int64_t kx) const { return ox * p.stride_w - p.pad_w + kx * p.dilation_w; }
  bool inside(int64_t iy, int64_t ix) const { return iy >= 0 && iy < p.h && ix >= 0 && ix < p.w; }

  template <class T>
  std::vector<T> forward(const std::vector<T>& x, const std::vector<T>& w) const {
    std::vector<T> y(static_cast<size_t>(p.n * p.o * p.out_h() * p.out_w()));
    for (int64_t n = 0; n < p.n; ++n)
      for (int64_t o = 0; o < p.o; ++o)
        for (int64_t oy = 0; oy < p.out_h(); ++oy)
          for (int64_t ox = 0; ox < p.out_w(); ++ox) {
            T s = 0;
            for (int64_t c = 0; c < cg(); ++c)
              for (int64_t ky = 0; ky < p.kh; ++ky)
                for (int64_t kx = 0; kx < p.kw; ++kx)
                  if (inside(in_y(oy, ky), in_x(ox, kx)))
                    s += x[xi(n, o / og() * cg() + c, in_y(oy, ky), in_x(ox, kx))] * w[wi(o, c, ky, kx)];
            y[yi(n, o, oy, ox)] = s;
          }
    return y;
  }
  template <class T>
  std::vector<T> backward_data(const std::vector<T>& gy, const std::vector<T>& w) const {
    std::vector<T> gx(static_cast<size_t>(p.n * p.c * p.h * p.w));
    for (int64_t n = 0; n < p.n; ++n)
      for (int64_t c = 0; c < p.c; ++c)
        for (int64_t iy = 0; iy < p.h; ++iy)
          for (int64_t ix = 0; ix < p.w; ++ix) {
            T s = 0;
            const int64_t g = c / cg();
            for (int64_t o = g * og(); o < (g + 1) * og(); ++o)
              for (int64_t oy = 0; oy < p.out_h(); ++oy)
                for (int64_t ky = 0; ky < p.kh; ++ky)
                  for (int64_t ox = 0; ox < p.out_w(); ++ox)
                    for (int64_t kx = 0; kx < p.kw; ++kx)
                      if (in_y(oy, ky) == iy && in_x(ox, kx) == ix) s += gy[yi(n, o, oy, ox)] * w[wi(o, c % cg(), ky, kx)];
            gx[xi(n, c, iy, ix)] = s;
          }
    return gx;
  }
  template <class T>
  std::vector<T> backward_filter(const std::vector<T>& x, const std::vector<T>& gy) const {
    std::vector<T> gw(static_cast<size_t>(p.o * cg() * p.kh * p.kw));
    for (int64_t o = 0; o < p.o; ++o)
      for (int64_t c = 0; c < cg(); ++c)
        for (int64_t ky = 0; ky < p.kh; ++ky)
          for (int64_t kx = 0; kx < p.kw; ++kx) {
            T s = 0;
            for (int64_t n = 0; n < p.n; ++n)
              for (int64_t oy = 0; oy < p.out_h(); ++oy)
                for (int64_t ox = 0; ox < p.out_w(); ++ox)
                  if (inside(in_y(oy, ky), in_x(ox, kx)))
                    s += x[xi(n, o / og() * cg() + c, in_y(oy, ky), in_x(ox, kx))] * gy[yi(n, o, oy, ox)];
            gw[wi(o, c, ky, kx)] = s;
          }
    return gw;
  }
};

template <class T>
std::vector<T> small_ints(size_t n, int mod, int seed) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = T(static_cast<int>((i * 7 + static_cast<size_t>(seed) * 3) % static_cast<size_t>(mod)) - mod / 2);
  return v;
}

// Device copies of host vectors, freed with the object; `guard` more elements
// after each, holding -77, so a write past the end shows.
template <class T>
struct OnDevice {
  static constexpr size_t guard = 16;
  int device;
  size_t n;
  CUdeviceptr p;
  OnDevice(int dev, const std::vector<T>& v) : device(dev), n(v.size()), p(mem_alloc(dev, (v.size() + guard) * sizeof(T))) {
    std::vector<T> padded = v;
    padded.resize(v.size() + guard, T(-77));
    memcpy_htod(p, padded.data(), padded.size() * sizeof(T));
  }
  OnDevice(int dev, size_t count) : OnDevice(dev, std::vector<T>(count, T(-77))) {}
  ~OnDevice() { mem_free(p); }
  std::vector<T> host() const {
    std::vector<T> v(n + guard);
    memcpy_dtoh(v.data(), p, v.size() * sizeof(T));
    for (size_t i = n; i < v.size(); ++i) CHECK(v[i] == T(-77));
    v.resize(n);
    return v;
  }
};

template <class T>
void check_passes(DType dt, const ConvProblem& p, int device = 0) {
  INFO(p.str());
  const Loops ref{p};
  const size_t nx = static_cast<size_t>(p.n * p.c * p.h * p.w), nw = static_cast<size_t>(p.o * (p.c / p.groups) * p.kh * p.kw),
               ny = static_cast<size_t>(p.n * p.o * p.out_h() * p.out_w());
  const std::vector<T> x = small_ints<T>(nx, 7, 1), w = small_ints<T>(nw, 5, 2), gy = small_ints<T>(ny, 5, 3);
  OnDevice<T> dx(device, x), dw(device, w), dgy(device, gy);

  OnDevice<T> y(device, ny);
  unsigned long long before = calls(kForward);
  conv_forward(device, nullptr, dt, p, dx.p, dw.p, y.p);
  CHECK(calls(kForward) == before + 1);
  CHECK(y.host() == ref.forward(x, w));

  OnDevice<T> gx(device, nx);
  before = calls(kBackwardData);
  conv_backward_data(device, nullptr, dt, p, dw.p, dgy.p, gx.p);
  CHECK(calls(kBackwardData) == before + 1);
  CHECK(gx.host() == ref.backward_data(gy, w));

  OnDevice<T> gw(device, nw);
  before = calls(kBackwardFilter);
  conv_backward_filter(device, nullptr, dt, p, dx.p, dgy.p, gw.p);
  CHECK(calls(kBackwardFilter) == before + 1);
  CHECK(gw.host() == ref.backward_filter(x, gy));
}

std::vector<ConvProblem> problems() {
  return {
      {.n = 2, .c = 3, .h = 7, .w = 6, .o = 4, .kh = 3, .kw = 3},
      {.n = 2, .c = 3, .h = 9, .w = 8, .o = 4, .kh = 3, .kw = 2, .pad_h = 1, .pad_w = 2, .stride_h = 2, .stride_w = 3},
      {.n = 1, .c = 2, .h = 9, .w = 9, .o = 3, .kh = 3, .kw = 3, .pad_h = 2, .pad_w = 1, .dilation_h = 2, .dilation_w = 3},
      {.n = 2, .c = 4, .h = 6, .w = 5, .o = 6, .kh = 2, .kw = 3, .groups = 2, .pad_h = 1, .pad_w = 1},
      {.n = 2, .c = 3, .h = 5, .w = 5, .o = 3, .kh = 3, .kw = 3, .groups = 3, .pad_h = 1, .pad_w = 1, .stride_h = 2},
      {.n = 1, .c = 2, .h = 4, .w = 4, .o = 2, .kh = 1, .kw = 1, .pad_h = 3, .pad_w = 0},  // padding wider than the kernel
  };
}

}  // namespace

TEST_CASE("the cuDNN stand-in is what tessel loads", "[emulated-gpu][cudnn]") {
  INFO(cudnn_unavailable_reason());
  REQUIRE(cudnn_available());
  CHECK(cudnn_library() == std::getenv("TESSEL_CUDNN"));
  CHECK(cudnn_version() == 90000);
}

TEST_CASE("f32 convolutions, both gradients, with stride, padding, dilation and groups match host loops",
          "[emulated-gpu][cudnn]") {
  for (const ConvProblem& p : problems()) check_passes<float>(DType::f32, p);
}

TEST_CASE("f64 convolutions and both gradients match host loops", "[emulated-gpu][cudnn]") {
  for (const ConvProblem& p : problems()) check_passes<double>(DType::f64, p);
}

TEST_CASE("tessel takes the heuristic's first deterministic algorithm and passes the workspace it asks for",
          "[emulated-gpu][cudnn]") {
  check_passes<float>(DType::f32, {.n = 1, .c = 2, .h = 5, .w = 5, .o = 2, .kh = 3, .kw = 3, .groups = 2});
  // The stand-in lists PRECOMP_GEMM / ALGO_1 (with a workspace) first; for the
  // filter gradient it lists the non-deterministic ALGO_0 before ALGO_1.
  CHECK(last_algo(kForward) == 1);
  CHECK(last_algo(kBackwardData) == 1);
  CHECK(last_algo(kBackwardFilter) == 1);
  // One im2col row (c / groups * kh * kw elements) and 64 bytes.
  CHECK(last_workspace(kForward) == 1 * 9 * 4 + 64);
  CHECK(last_workspace(kBackwardFilter) == 1 * 9 * 4 + 64);
}

TEST_CASE("a convolution on cuda:1 reads and writes cuda:1's memory", "[emulated-gpu][cudnn]") {
  check_passes<float>(DType::f32, {.n = 1, .c = 2, .h = 4, .w = 5, .o = 3, .kh = 2, .kw = 2, .pad_h = 1}, 1);
}

TEST_CASE("empty convolutions never reach cuDNN: nothing to write, or zeros", "[emulated-gpu][cudnn]") {
  const unsigned long long f = calls(kForward), d = calls(kBackwardData), b = calls(kBackwardFilter);
  // No images: nothing to write forward or into gx; gw is a sum over none of them.
  const ConvProblem no_images{.n = 0, .c = 2, .h = 4, .w = 4, .o = 3, .kh = 3, .kw = 3};
  OnDevice<float> x(0, std::vector<float>{}), w(0, std::vector<float>(54, 1.0f)), gy(0, std::vector<float>{});
  OnDevice<float> y(0, std::vector<float>{}), gx(0, std::vector<float>{}), gw(0, 54);
  conv_forward(0, nullptr, DType::f32, no_images, x.p, w.p, y.p);
  conv_backward_data(0, nullptr, DType::f32, no_images, w.p, gy.p, gx.p);
  conv_backward_filter(0, nullptr, DType::f32, no_images, x.p, gy.p, gw.p);
  CHECK(gw.host() == std::vector<float>(54, 0.0f));
  // No input channels: the output is a sum over none of them.
  const ConvProblem no_channels{.n = 2, .c = 0, .h = 3, .w = 3, .o = 2, .kh = 1, .kw = 1};
  OnDevice<float> y2(0, 36);
  conv_forward(0, nullptr, DType::f32, no_channels, x.p, w.p, y2.p);
  CHECK(y2.host() == std::vector<float>(36, 0.0f));
  CHECK(calls(kForward) == f);
  CHECK(calls(kBackwardData) == d);
  CHECK(calls(kBackwardFilter) == b);
}

TEST_CASE("convolutions cuDNN cannot compute are refused before anything runs", "[emulated-gpu][cudnn]") {
  const ConvProblem p{.n = 1, .c = 4, .h = 5, .w = 5, .o = 2, .kh = 3, .kw = 3};
  CHECK_THROWS_AS(conv_forward(0, nullptr, DType::f16, p, 0x1000, 0x2000, 0x3000), tessel::DTypeError);
  CHECK_THROWS_WITH(conv_forward(0, nullptr, DType::i32, p, 0x1000, 0x2000, 0x3000),
                    "cuDNN convolution: i32 convolution forward (input [1, 4, 5, 5], weight [2, 4, 3, 3], groups 1, "
                    "stride (1, 1), padding (0, 0), dilation (1, 1)): only f32 and f64 convolutions run on cuDNN");
  ConvProblem q = p;
  q.groups = 3;
  CHECK_THROWS_WITH(conv_backward_data(0, nullptr, DType::f32, q, 0x1000, 0x2000, 0x3000),
                    Catch::Contains("groups must divide both c and o"));
  q = p;
  q.kh = 7;
  CHECK_THROWS_WITH(conv_backward_filter(0, nullptr, DType::f64, q, 0x1000, 0x2000, 0x3000),
                    Catch::Contains("the kernel is larger than the padded input"));
  q = p;
  q.stride_w = 0;
  CHECK_THROWS_AS(conv_forward(0, nullptr, DType::f32, q, 0x1000, 0x2000, 0x3000), tessel::ValueError);
  CHECK_FALSE(conv_supported(0, DType::f16, ConvPass::forward, p));
  CHECK_FALSE(conv_supported(0, DType::f32, ConvPass::forward, q));
  CHECK(conv_supported(0, DType::f32, ConvPass::forward, p));
}

TEST_CASE("a problem the heuristic has no algorithm for is unsupported, and running it says so",
          "[emulated-gpu][cudnn]") {
  // A shape no other test uses: the pick is kept per problem.
  const ConvProblem p{.n = 1, .c = 1, .h = 11, .w = 3, .o = 1, .kh = 2, .kw = 2};
  refuse(1);  // no f64 algorithms
  const bool f64 = conv_supported(0, DType::f64, ConvPass::backward_filter, p);
  const bool f32 = conv_supported(0, DType::f32, ConvPass::backward_filter, p);
  CHECK_THROWS_WITH(conv_backward_filter(0, nullptr, DType::f64, p, 0x1000, 0x2000, 0x3000),
                    Catch::Contains("has no algorithm for f64 convolution backward filter") &&
                        Catch::Contains("on cuda:0"));
  refuse(-1);
  CHECK_FALSE(f64);
  CHECK(f32);
}

TEST_CASE("conv2d on gpu(0) and its backward run on the cuDNN stand-in", "[emulated-gpu][cudnn]") {
  using namespace tessel;
  manual_seed(7);
  Tensor x = randn({2, 3, 6, 6}), w = randn({4, 3, 3, 3}), b = randn({4});
  Tensor xg = x.to(gpu(0)), wg = w.to(gpu(0)), bg = b.to(gpu(0));
  xg.requires_grad_(true);
  wg.requires_grad_(true);
  const unsigned long long f = calls(kForward), d = calls(kBackwardData), bf = calls(kBackwardFilter);
  const CudaStats before = cuda_stats();
  Tensor y = conv2d(xg, wg, bg, {.stride = 1, .padding = 1});
  (y * y).sum().backward();
  const Tensor yh = y.cpu(), gx = xg.grad().cpu(), gw = wg.grad().cpu();
  CHECK(calls(kForward) == f + 1);
  CHECK(calls(kBackwardData) == d + 1);
  CHECK(calls(kBackwardFilter) == bf + 1);
  CHECK(cuda_stats().cudnn_convs == before.cudnn_convs + 3);
  CHECK(cuda_stats().host_evals == before.host_evals);
  x.requires_grad_(true);
  w.requires_grad_(true);
  Tensor want = conv2d(x, w, b, {.stride = 1, .padding = 1});
  (want * want).sum().backward();
  CHECK(allclose(yh, want, 1e-5, 1e-5));
  CHECK(allclose(gx, x.grad(), 1e-4, 1e-4));
  CHECK(allclose(gw, w.grad(), 1e-4, 1e-4));
}

TEST_CASE("an f64 convolution cuDNN has no algorithm for runs on the host and gives the same numbers",
          "[emulated-gpu][cudnn]") {
  using namespace tessel;
  manual_seed(9);
  Tensor x = randn({1, 2, 7, 5}).to(DType::f64), w = randn({3, 2, 2, 3}).to(DType::f64);
  refuse(1);
  const unsigned long long f = calls(kForward);
  const CudaStats before = cuda_stats();
  Tensor y;
  try {
    y = conv2d(x.to(gpu(0)), w.to(gpu(0)), {}, {.padding = "same"}).cpu();
  } catch (...) {
    refuse(-1);
    throw;
  }
  refuse(-1);
  CHECK(calls(kForward) == f);
  CHECK(cuda_stats().cudnn_convs == before.cudnn_convs);
  CHECK(cuda_stats().host_evals == before.host_evals + 1);
  CHECK(allclose(y, conv2d(x, w, {}, {.padding = "same"}), 1e-12, 1e-12));
}
