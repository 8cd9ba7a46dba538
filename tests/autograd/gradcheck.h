// Central finite differences against backward(), in f64.
//
// f maps leaf tensors to any-shaped output; the checked scalar is
// sum(f(x) * W) for a fixed random W, so every output element's gradient
// path is exercised with a different weight.
#pragma once

#include <functional>
#include <random>
#include <sstream>
#include <string>

#include "tests/support/tensor_testing.h"

namespace gradcheck {

using namespace tessel;
using Dims = std::vector<int64_t>;
using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

enum class Domain { any, away_from_zero, positive };

struct Input {
  Dims shape;
  std::vector<double> v;
};

inline std::string str(const Dims& d) {
  std::ostringstream o;
  o << "[";
  for (size_t i = 0; i < d.size(); ++i) o << (i ? "," : "") << d[i];
  return o.str() + "]";
}

inline int64_t numel(const Dims& d) {
  int64_t n = 1;
  for (int64_t x : d) n *= x;
  return n;
}

inline Input random_input(std::mt19937_64& rng, const Dims& shape, Domain dom) {
  std::uniform_real_distribution<double> u(-2, 2), mag(0.3, 2), pos(0.5, 2.5);
  Input in{shape, std::vector<double>(static_cast<size_t>(numel(shape)))};
  for (auto& x : in.v) {
    switch (dom) {
      case Domain::any: x = u(rng); break;
      case Domain::away_from_zero: x = (rng() & 1 ? 1 : -1) * mag(rng); break;
      case Domain::positive: x = pos(rng); break;
    }
  }
  return in;
}

inline std::vector<Tensor> leaves(const std::vector<Input>& ins, bool grad) {
  std::vector<Tensor> out;
  for (const auto& in : ins) {
    Tensor t = from_vector<double>(in.v, Shape(Dims(in.shape)));
    if (grad) t.requires_grad_();
    out.push_back(t);
  }
  return out;
}

inline double weighted(const Tensor& out, const std::vector<double>& w) {
  std::vector<double> v = out.to_vector<double>();
  double s = 0;
  for (size_t i = 0; i < v.size(); ++i) s += v[i] * w[i];
  return s;
}

/// Checks d sum(f(x) * W) / dx_i for every input element. `h` is the step.
inline void check(const std::string& what, const Fn& f, const std::vector<Input>& ins, std::mt19937_64& rng,
                  double h = 1e-6, double rtol = 1e-5, double atol = 1e-7) {
  INFO(what);
  std::vector<Tensor> xs = leaves(ins, true);
  Tensor out = f(xs);
  REQUIRE(out.dtype() == DType::f64);
  std::vector<double> w(static_cast<size_t>(out.numel()));
  std::uniform_real_distribution<double> u(-1, 1);
  for (auto& x : w) x = u(rng);
  Tensor W = from_vector<double>(w, out.shape());
  Tensor loss = (out * W).sum();
  REQUIRE(loss.requires_grad());
  loss.backward();
  for (size_t i = 0; i < ins.size(); ++i) {
    INFO("input " << i << " of shape " << str(ins[i].shape));
    Tensor g = xs[i].grad();
    std::vector<double> analytic(ins[i].v.size(), 0.0);  // undefined: no path carries a gradient (as PyTorch's None)
    if (g.defined()) {
      REQUIRE(g.shape() == xs[i].shape());
      REQUIRE(g.dtype() == DType::f64);
      analytic = g.to_vector<double>();
    }
    for (size_t j = 0; j < ins[i].v.size(); ++j) {
      std::vector<Input> plus = ins, minus = ins;
      plus[i].v[j] += h;
      minus[i].v[j] -= h;
      double fp, fm;
      {
        NoGradGuard ng;
        fp = weighted(f(leaves(plus, false)), w);
        fm = weighted(f(leaves(minus, false)), w);
      }
      double numeric = (fp - fm) / (2 * h);
      INFO("element " << j << ": analytic " << analytic[j] << ", numeric " << numeric);
      CHECK(std::fabs(analytic[j] - numeric) <= atol + rtol * (1 + std::fabs(numeric)));
    }
  }
}

/// Random shapes that broadcast together: a target and operands that broadcast to it.
struct Shapes {
  std::mt19937_64& rng;
  int64_t uni(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); }
  Dims target(int max_rank = 3, int64_t max_dim = 3) {
    Dims s(static_cast<size_t>(uni(0, max_rank)));
    for (auto& d : s) d = uni(1, max_dim);
    return s;
  }
  Dims broadcastable_to(const Dims& t) {
    size_t keep = uni(0, 3) ? t.size() : static_cast<size_t>(uni(0, static_cast<int64_t>(t.size())));
    Dims s(t.end() - static_cast<int64_t>(keep), t.end());
    for (auto& d : s)
      if (uni(0, 3) == 0) d = 1;
    return s;
  }
};

/// The run's seed (printed; TESSEL_TEST_SEED replays) mixed with a per-test salt.
inline std::mt19937_64 rng_for(const char* name, uint64_t salt) {
  uint64_t seed = tessel::testing::test_seed(name);
  return std::mt19937_64(seed ^ salt);
}

}  // namespace gradcheck
