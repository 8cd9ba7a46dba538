// The oneDNN convolution binding against plain f64 loops: forward (with and
// without bias), backward-data and backward-weights (with and without the
// bias gradient) over strides, uneven padding, dilation, groups, depthwise,
// 1x1 and a LeNet layer; and its primitive cache.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "codegen/cpu/onednn_conv.h"
#include "runtime/errors.h"
#include "runtime/thread_pool.h"

using tessel::onednn::ConvGeometry;
namespace onednn = tessel::onednn;

namespace {

struct Case {
  std::string name;
  ConvGeometry g;
};

// Fills in oh, ow from the rest, as PyTorch computes them.
ConvGeometry with_output(ConvGeometry g) {
  g.oh = (g.h + g.pad_t + g.pad_b - g.dilation_h * (g.kh - 1) - 1) / g.stride_h + 1;
  g.ow = (g.w + g.pad_l + g.pad_r - g.dilation_w * (g.kw - 1) - 1) / g.stride_w + 1;
  return g;
}

ConvGeometry square(int64_t n, int64_t c, int64_t hw, int64_t o, int64_t k, int64_t pad, int64_t stride = 1) {
  ConvGeometry g;
  g.n = n, g.c = c, g.h = hw, g.w = hw, g.o = o, g.kh = k, g.kw = k;
  g.stride_h = g.stride_w = stride;
  g.pad_t = g.pad_l = g.pad_b = g.pad_r = pad;
  return with_output(g);
}

std::vector<Case> cases() {
  std::vector<Case> out;
  out.push_back({"3x3 pad 1", square(2, 3, 8, 4, 3, 1)});
  out.push_back({"stride 2", square(2, 3, 9, 5, 3, 1, 2)});
  {
    ConvGeometry g = square(2, 3, 7, 4, 3, 0);
    g.pad_t = 2, g.pad_b = 0, g.pad_l = 1, g.pad_r = 3;
    out.push_back({"asymmetric padding", with_output(g)});
  }
  {
    ConvGeometry g = square(2, 3, 9, 4, 3, 2);
    g.dilation_h = g.dilation_w = 2;
    out.push_back({"dilation 2", with_output(g)});
  }
  {
    ConvGeometry g = square(2, 4, 6, 6, 3, 1);
    g.groups = 2;
    out.push_back({"groups 2", g});
  }
  {
    ConvGeometry g = square(2, 8, 6, 8, 3, 1);
    g.groups = 8;
    out.push_back({"depthwise", g});
  }
  out.push_back({"1x1", square(2, 16, 5, 8, 1, 0)});
  out.push_back({"LeNet 5x5", square(4, 1, 28, 6, 5, 2)});
  {
    // Every per-axis parameter different across the two axes at once.
    ConvGeometry g;
    g.n = 3, g.c = 6, g.h = 11, g.w = 9, g.o = 4, g.kh = 3, g.kw = 2, g.groups = 2;
    g.stride_h = 1, g.stride_w = 2, g.pad_t = 1, g.pad_b = 2, g.pad_l = 0, g.pad_r = 1;
    g.dilation_h = 2, g.dilation_w = 1;
    out.push_back({"mixed axes", with_output(g)});
  }
  return out;
}

std::vector<float> random(std::size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

std::size_t x_size(const ConvGeometry& g) { return g.n * g.c * g.h * g.w; }
std::size_t w_size(const ConvGeometry& g) { return g.o * (g.c / g.groups) * g.kh * g.kw; }
std::size_t y_size(const ConvGeometry& g) { return g.n * g.o * g.oh * g.ow; }

// Calls f(n, oc, ic, oy, ox, ky, kx, iy, ix) for every product term of the
// convolution that reads inside the input, with flat indices into x, w, y.
template <class F>
void for_each_term(const ConvGeometry& g, F f) {
  const int64_t cg = g.c / g.groups, og = g.o / g.groups;
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t o = 0; o < g.o; ++o)
      for (int64_t oy = 0; oy < g.oh; ++oy)
        for (int64_t ox = 0; ox < g.ow; ++ox)
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t ky = 0; ky < g.kh; ++ky)
              for (int64_t kx = 0; kx < g.kw; ++kx) {
                const int64_t iy = oy * g.stride_h - g.pad_t + ky * g.dilation_h;
                const int64_t ix = ox * g.stride_w - g.pad_l + kx * g.dilation_w;
                if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) continue;
                const int64_t c = (o / og) * cg + ci;
                f(((n * g.c + c) * g.h + iy) * g.w + ix, ((o * cg + ci) * g.kh + ky) * g.kw + kx,
                  ((n * g.o + o) * g.oh + oy) * g.ow + ox);
              }
}

std::vector<double> ref_forward(const ConvGeometry& g, const std::vector<float>& x, const std::vector<float>& w,
                                const float* bias) {
  std::vector<double> y(y_size(g), 0.0);
  for_each_term(g, [&](int64_t xi, int64_t wi, int64_t yi) { y[yi] += double(x[xi]) * w[wi]; });
  if (bias)
    for (std::size_t i = 0; i < y.size(); ++i) y[i] += bias[(i / (g.oh * g.ow)) % g.o];
  return y;
}

std::vector<double> ref_backward_data(const ConvGeometry& g, const std::vector<float>& gy,
                                      const std::vector<float>& w) {
  std::vector<double> gx(x_size(g), 0.0);
  for_each_term(g, [&](int64_t xi, int64_t wi, int64_t yi) { gx[xi] += double(gy[yi]) * w[wi]; });
  return gx;
}

std::vector<double> ref_backward_weights(const ConvGeometry& g, const std::vector<float>& x,
                                         const std::vector<float>& gy) {
  std::vector<double> gw(w_size(g), 0.0);
  for_each_term(g, [&](int64_t xi, int64_t wi, int64_t yi) { gw[wi] += double(x[xi]) * gy[yi]; });
  return gw;
}

std::vector<double> ref_bias_grad(const ConvGeometry& g, const std::vector<float>& gy) {
  std::vector<double> gb(g.o, 0.0);
  for (std::size_t i = 0; i < gy.size(); ++i) gb[(i / (g.oh * g.ow)) % g.o] += gy[i];
  return gb;
}

// 1e-4 relative, against the larger of the element and 1 so that sums that
// cancel to near zero are not held to a tighter bound than float can give.
void check_close(const std::vector<float>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!(std::abs(got[i] - want[i]) <= 1e-4 * std::max(1.0, std::abs(want[i])))) {
      if (bad++ == 0) first = i;
    }
  INFO("first mismatch at " << first << ": got " << got[first] << ", want " << want[first]);
  CHECK(bad == 0);
}

bool skip() {
  if (onednn::available()) return false;
  WARN("built without oneDNN (libdnnl-dev): skipped");
  return true;
}

}  // namespace

TEST_CASE("oneDNN conv forward matches f64 loops, with and without bias", "[onednn]") {
  if (skip()) return;
  for (const Case& c : cases()) {
    const ConvGeometry& g = c.g;
    INFO(c.name);
    const auto x = random(x_size(g), 1), w = random(w_size(g), 2), b = random(g.o, 3);
    std::vector<float> y(y_size(g), NAN);
    onednn::conv_forward(g, x.data(), w.data(), nullptr, y.data());
    check_close(y, ref_forward(g, x, w, nullptr));
    std::fill(y.begin(), y.end(), NAN);
    onednn::conv_forward(g, x.data(), w.data(), b.data(), y.data());
    check_close(y, ref_forward(g, x, w, b.data()));
  }
}

TEST_CASE("oneDNN conv backward-data matches f64 loops", "[onednn]") {
  if (skip()) return;
  for (const Case& c : cases()) {
    const ConvGeometry& g = c.g;
    INFO(c.name);
    const auto gy = random(y_size(g), 4), w = random(w_size(g), 5);
    std::vector<float> gx(x_size(g), NAN);
    onednn::conv_backward_data(g, gy.data(), w.data(), gx.data());
    check_close(gx, ref_backward_data(g, gy, w));
  }
}

TEST_CASE("oneDNN conv backward-weights matches f64 loops, with and without the bias gradient", "[onednn]") {
  if (skip()) return;
  for (const Case& c : cases()) {
    const ConvGeometry& g = c.g;
    INFO(c.name);
    const auto x = random(x_size(g), 6), gy = random(y_size(g), 7);
    std::vector<float> gw(w_size(g), NAN), gb(g.o, NAN);
    onednn::conv_backward_weights(g, x.data(), gy.data(), gw.data(), nullptr);
    check_close(gw, ref_backward_weights(g, x, gy));
    std::fill(gw.begin(), gw.end(), NAN);
    onednn::conv_backward_weights(g, x.data(), gy.data(), gw.data(), gb.data());
    check_close(gw, ref_backward_weights(g, x, gy));
    check_close(gb, ref_bias_grad(g, gy));
  }
}

TEST_CASE("a repeated oneDNN conv call creates no new primitive", "[onednn]") {
  if (skip()) return;
  // A shape no other test uses, so the first call here is a cache miss.
  const ConvGeometry g = square(3, 5, 10, 7, 3, 1);
  const auto x = random(x_size(g), 8), w = random(w_size(g), 9), b = random(g.o, 10);
  std::vector<float> y(y_size(g)), gx(x_size(g)), gw(w_size(g)), gb(g.o);
  const auto all = [&](std::vector<float>& out) {
    onednn::conv_forward(g, x.data(), w.data(), b.data(), out.data());
    onednn::conv_backward_data(g, out.data(), w.data(), gx.data());
    onednn::conv_backward_weights(g, x.data(), out.data(), gw.data(), gb.data());
  };
  const int64_t before = onednn::primitives_created();
  all(y);
  const int64_t after_first = onednn::primitives_created();
  CHECK(after_first >= before + 3);  // at least the three convolutions
  // Other buffers, same shapes: the cached primitives run on them.
  std::vector<float> y2(y_size(g), NAN);
  all(y2);
  CHECK(onednn::primitives_created() == after_first);
  check_close(y2, ref_forward(g, x, w, b.data()));
  check_close(gb, ref_bias_grad(g, y2));
}

TEST_CASE("oneDNN conv gives the same results on one thread and on all", "[onednn]") {
  if (skip()) return;
  const int threads = tessel::num_threads();
  const ConvGeometry g = square(4, 8, 12, 16, 3, 1);
  const auto x = random(x_size(g), 11), w = random(w_size(g), 12), gy = random(y_size(g), 13);
  const auto want_y = ref_forward(g, x, w, nullptr);
  const auto want_gx = ref_backward_data(g, gy, w);
  const auto want_gw = ref_backward_weights(g, x, gy);
  for (int t : {1, std::max(2, threads)}) {
    INFO(t << " threads");
    tessel::set_num_threads(t);
    std::vector<float> y(y_size(g)), gx(x_size(g)), gw(w_size(g));
    onednn::conv_forward(g, x.data(), w.data(), nullptr, y.data());
    onednn::conv_backward_data(g, gy.data(), w.data(), gx.data());
    onednn::conv_backward_weights(g, x.data(), gy.data(), gw.data(), nullptr);
    check_close(y, want_y);
    check_close(gx, want_gx);
    check_close(gw, want_gw);
  }
  tessel::set_num_threads(threads);
}

TEST_CASE("oneDNN conv calls from several threads at once each get their own result", "[onednn]") {
  if (skip()) return;
  // Two threads on one shape (one cached plan) and a third on another.
  const ConvGeometry shared = square(2, 4, 9, 8, 3, 1), other = square(2, 3, 7, 5, 3, 0);
  struct Work {
    ConvGeometry g;
    std::vector<float> x, w;
    std::vector<double> want;
    int bad = 0;
  };
  std::vector<Work> work;
  for (uint32_t i = 0; i < 3; ++i) {
    const ConvGeometry& g = i < 2 ? shared : other;
    Work k{g, random(x_size(g), 20 + i), random(w_size(g), 30 + i), {}};
    k.want = ref_forward(g, k.x, k.w, nullptr);
    work.push_back(std::move(k));
  }
  std::vector<std::thread> threads;
  for (Work& k : work)
    threads.emplace_back([&k] {
      std::vector<float> y(y_size(k.g));
      for (int rep = 0; rep < 20; ++rep) {
        std::fill(y.begin(), y.end(), NAN);
        onednn::conv_forward(k.g, k.x.data(), k.w.data(), nullptr, y.data());
        for (std::size_t i = 0; i < y.size(); ++i)
          if (!(std::abs(y[i] - k.want[i]) <= 1e-4 * std::max(1.0, std::abs(k.want[i])))) ++k.bad;
      }
    });
  for (std::thread& t : threads) t.join();
  for (const Work& k : work) CHECK(k.bad == 0);
}

TEST_CASE("an inconsistent oneDNN conv geometry is an internal error naming it", "[onednn]") {
  if (skip()) return;
  ConvGeometry g = square(1, 2, 6, 3, 3, 1);
  g.oh = 5;  // 6 with pad 1
  std::vector<float> x(x_size(g)), w(w_size(g)), y(g.n * g.o * 6 * 6);
  CHECK_THROWS_AS(onednn::conv_forward(g, x.data(), w.data(), nullptr, y.data()), tessel::InternalError);
  CHECK_THROWS_WITH(onednn::conv_forward(g, x.data(), w.data(), nullptr, y.data()),
                    Catch::Contains("x [1, 2, 6, 6]") && Catch::Contains("y [1, 3, 5, 6]"));
}
