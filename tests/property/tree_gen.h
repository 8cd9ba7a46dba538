// Random expression trees built twice at once: as lazy tessel tensors and as
// eagerly computed naive::Values. Shapes are random and broadcast against
// each other; leaves are contiguous tensors, strided views, 0-d tensors or
// plain numbers.
#pragma once

#include <optional>
#include <random>
#include <string>

#include "dsl/attention.h"
#include "naive.h"
#include "tests/support/tensor_testing.h"

namespace proptest {

using namespace tessel;
using naive::Dims;

enum class Mode { f64, f32, i64 };

inline DType dtype_of(Mode m) { return m == Mode::f64 ? DType::f64 : m == Mode::f32 ? DType::f32 : DType::i64; }

struct Pair {
  Tensor t;
  naive::Value n;
  double scale = 0;  // largest magnitude seen anywhere in the subtree (bounds rounding error)
  std::string desc;  // the tree, for failure messages
};

inline double max_abs(const naive::Value& v) {
  double m = 0;
  for (double x : v.v)
    if (std::isfinite(x)) m = std::max(m, std::fabs(x));
  return m;
}

class TreeGen {
 public:
  TreeGen(uint64_t seed, Mode mode) : rng_(seed), mode_(mode), dt_(dtype_of(mode)) {}

  // Gradient checks build the same tree several times (same seed): once with
  // leaves that require grad (collected here), then with one leaf element
  // nudged by `nudge` to take finite differences.
  std::vector<Tensor>* grad_leaves = nullptr;
  struct Nudge {
    size_t leaf = 0, element = 0;
    double delta = 0;
  };
  std::optional<Nudge> nudge;
  double magnitude_limit = 0;  // 0: the mode's default
  // Where leaves live: a GPU runs the same programs on its backend.
  tessel::Device device = tessel::cpu();
  // Keeps sqrt off zero, where a constant-zero subtree would make its
  // derivative inf * 0 = nan (as in PyTorch) while finite differences see 0.
  bool smooth = false;

  int64_t uni(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng_); }
  bool coin(double p = 0.5) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  Mode mode() const { return mode_; }
  DType dtype() const { return dt_; }

  Dims random_shape(int max_rank = 4, int64_t max_dim = 4) {
    Dims s(static_cast<size_t>(uni(0, max_rank)));
    for (auto& d : s) d = uni(1, max_dim);
    return s;
  }

  /// A shape that broadcasts to `t`: a suffix of it with some dims set to 1.
  Dims broadcastable_to(const Dims& t) {
    size_t keep = coin(0.7) ? t.size() : static_cast<size_t>(uni(0, static_cast<int64_t>(t.size())));
    Dims s(t.end() - static_cast<int64_t>(keep), t.end());
    for (auto& d : s)
      if (coin(0.25)) d = 1;
    return s;
  }

  /// A tree whose shape broadcasts to `target`.
  Pair gen(const Dims& target, int depth) {
    if (depth <= 0 || coin(0.22)) return leaf(broadcastable_to(target));
    int pick = static_cast<int>(uni(0, 99));
    if (pick < 22) return unary(target, depth);
    if (pick < 55) return binary(target, depth);
    if (pick < 63) return where_node(target, depth);
    if (pick < 77) return reduction(target, depth);
    if (pick < 88) return matmul_node(target, depth);
    return movement(target, depth);
  }

  /// A tree of exactly shape `target` (broadcast explicitly with expand when needed).
  Pair exact(const Dims& target, int depth) {
    Pair p = gen(target, depth);
    if (p.n.shape == target) return p;
    p.t = p.t.expand(target);
    p.n = naive::expand(p.n, target);
    p.desc = "expand(" + p.desc + ")";
    return p;
  }

  Pair leaf(const Dims& s) {
    int64_t n = 1;
    for (int64_t d : s) n *= d;
    naive::Value v{s, std::vector<double>(static_cast<size_t>(n))};
    for (auto& x : v.v) x = draw();
    Pair p;
    p.n = v;
    p.scale = max_abs(v);
    int kind = static_cast<int>(uni(0, 9));
    if (kind == 0 && s.size() >= 2) {
      // A transposed view over memory laid out the other way round.
      Dims st = s;
      std::swap(st[st.size() - 1], st[st.size() - 2]);
      std::vector<int64_t> order(s.size());
      std::iota(order.begin(), order.end(), 0);
      std::swap(order[s.size() - 1], order[s.size() - 2]);
      naive::Value mem = naive::permute(v, order);  // mem has shape st
      p.t = leaf_memory(mem).transpose(-1, -2);
      p.desc = "T" + shape_str(s) + "^t";
    } else if (kind == 1 && !s.empty()) {
      // Every second row of a tensor twice as tall.
      Dims big = s;
      big[0] *= 2;
      naive::Value mem{big, std::vector<double>(v.v.size() * 2)};
      int64_t row = n / s[0];
      for (int64_t i = 0; i < big[0]; ++i)
        for (int64_t j = 0; j < row; ++j)
          mem.v[static_cast<size_t>(i * row + j)] = i % 2 == 0 ? v.v[static_cast<size_t>((i / 2) * row + j)] : draw();
      p.t = leaf_memory(mem).slice(0, 0, big[0], 2);
      p.desc = "T" + shape_str(s) + "[::2]";
    } else {
      p.t = leaf_memory(v);
      p.desc = "T" + shape_str(s);
    }
    return p;
  }

  /// A number that joins a tensor op as a Python-style scalar.
  std::pair<Scalar, double> scalar() {
    if (mode_ == Mode::i64) {
      int64_t k = uni(-3, 3);
      return {Scalar(k), static_cast<double>(k)};
    }
    double x = static_cast<double>(uni(-24, 24)) / 8.0;
    return {Scalar(x), x};
  }

  static std::string shape_str(const Dims& s) {
    std::string r = "[";
    for (size_t i = 0; i < s.size(); ++i) r += (i ? "," : "") + std::to_string(s[i]);
    return r + "]";
  }

 private:
  double draw() {
    if (mode_ == Mode::i64) return static_cast<double>(uni(-3, 3));
    double x = std::uniform_real_distribution<double>(-3, 3)(rng_);
    return mode_ == Mode::f32 ? static_cast<double>(static_cast<float>(x)) : x;
  }

  // A leaf's memory as a tensor (the unit gradient checks nudge and differentiate).
  Tensor leaf_memory(naive::Value v) {
    size_t id = leaf_count_++;
    if (nudge && nudge->leaf == id) v.v[nudge->element] += nudge->delta;
    Tensor t = tensor_of(v);
    if (grad_leaves) {
      t.requires_grad_();
      grad_leaves->push_back(t);
    }
    return t;
  }

  Tensor tensor_of(const naive::Value& v) {
    Shape s{Dims(v.shape)};
    Tensor t;
    if (mode_ == Mode::f64) {
      t = from_vector<double>(v.v, s);
    } else if (mode_ == Mode::f32) {
      t = from_vector<float>(std::vector<float>(v.v.begin(), v.v.end()), s);
    } else {
      std::vector<int64_t> iv;
      for (double x : v.v) iv.push_back(static_cast<int64_t>(x));
      t = from_vector<int64_t>(iv, s);
    }
    return device.is_cpu() ? t : t.to(device);
  }

  double limit() const {
    if (magnitude_limit > 0) return magnitude_limit;
    return mode_ == Mode::i64 ? 1e14 : mode_ == Mode::f32 ? 1e12 : 1e60;
  }

  Pair finish(Pair p, const std::vector<const Pair*>& kids) {
    p.scale = max_abs(p.n);
    for (auto* k : kids) p.scale = std::max(p.scale, k->scale);
    return p;
  }

  Pair unary(const Dims& target, int depth) {
    Pair a = gen(target, depth - 1);
    bool fl = mode_ != Mode::i64;
    // Integer trees draw ops 0-4 and sign; floor/ceil/round and sign of floats
    // are left to the compiled-vs-ref trees: a last-bit difference from the
    // naive double evaluation would flip them.
    int op = static_cast<int>(uni(0, fl ? 22 : 5));
    if (!fl && op == 5) op = 22;
    else if (fl && op == 22) op = 23;
    Pair r;
    if (coin(0.08) && !a.n.shape.empty()) {  // a shift along the last dim with zeros coming in: pad, then a window
      const int64_t n = a.n.shape.back(), shift = uni(0, 2);
      r.t = pad(a.t, {1, 1}).narrow(-1, shift, n);
      r.n = a.n;
      for (size_t i = 0; i < r.n.v.size(); ++i) {
        const int64_t j = static_cast<int64_t>(i) % n, from = j + shift - 1;
        r.n.v[i] = from >= 0 && from < n ? a.n.v[i - static_cast<size_t>(j) + static_cast<size_t>(from)] : 0.0;
      }
      r.desc = "shift(" + a.desc + "," + std::to_string(shift - 1) + ")";
      return finish(r, {&a});
    }
    if (fl && coin(0.06) && a.n.shape.size() == 2) {
      // A depthwise 3-tap convolution along the last dim, zeros at the borders:
      // each row a channel of conv1d (an unfold of strided windows + a product).
      const int64_t m = a.n.shape[0], n = a.n.shape[1];
      const double taps[3] = {0.5, -1.0, 0.25};
      naive::Value w{{m, 1, 3}, {}};
      for (int64_t c = 0; c < m; ++c) w.v.insert(w.v.end(), taps, taps + 3);
      r.t = conv1d(a.t.unsqueeze(0), tensor_of(w), Tensor(), {.padding = 1, .groups = m}).squeeze(0);
      r.n = a.n;
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double acc = 0;
          for (int64_t k = 0; k < 3; ++k) {
            const int64_t from = j + k - 1;
            if (from >= 0 && from < n) acc += taps[k] * a.n.v[static_cast<size_t>(i * n + from)];
          }
          r.n.v[static_cast<size_t>(i * n + j)] = acc;
        }
      r.desc = "conv3(" + a.desc + ")";
      return finish(r, {&a});
    }
    if (fl && coin(0.05) && !a.n.shape.empty()) {
      // F.layer_norm over the last one or two dims, sometimes with a weight
      // and a bias (leaves, so gradient checks reach them too).
      const size_t k = a.n.shape.size() >= 2 && coin(0.3) ? 2 : 1;
      const Dims ns(a.n.shape.end() - static_cast<int64_t>(k), a.n.shape.end());
      const double eps = coin(0.7) ? 1e-5 : 0.25;
      // Rows of (nearly) equal values normalize rounding noise: the naive and
      // the computed results would differ by more than rounding.
      if (!spread_rows(a.n, k)) return a;
      if (coin(0.6)) {
        Pair w = leaf(ns), b = leaf(ns);
        r.t = layer_norm(a.t, ns, &w.t, &b.t, eps);
        r.n = naive::layer_norm(a.n, k, &w.n, &b.n, eps);
        r.desc = "layer_norm(" + a.desc + "," + shape_str(ns) + "," + w.desc + "," + b.desc + ")";
        return finish(r, {&a, &w, &b});
      }
      r.t = layer_norm(a.t, ns, nullptr, nullptr, eps);
      r.n = naive::layer_norm(a.n, k, nullptr, nullptr, eps);
      r.desc = "layer_norm(" + a.desc + "," + shape_str(ns) + ")";
      return finish(r, {&a});
    }
    if (fl && coin(0.04) && a.n.shape.size() >= 2 && bounded(a.n, 8.0)) {
      // Self-attention over the last two dims, sometimes causal: the fused
      // Attention node (and its gradient node) against softmax over scores.
      const bool causal = coin(0.5);
      r.t = scaled_dot_product_attention(a.t, a.t, a.t, {.causal = causal});
      r.n = naive::self_attention(a.n, causal);
      r.desc = std::string(causal ? "causal_attention(" : "attention(") + a.desc + ")";
      return finish(r, {&a});
    }
    switch (op) {
      case 0:
        r.t = -a.t, r.n = naive::map(a.n, [](double x) { return -x; }), r.desc = "-(" + a.desc + ")";
        break;
      case 1:
        r.t = a.t.abs(), r.n = naive::map(a.n, [](double x) { return std::fabs(x); }), r.desc = "abs(" + a.desc + ")";
        break;
      case 2:
        r.t = relu(a.t), r.n = naive::map(a.n, [](double x) { return x > 0 || std::isnan(x) ? x : 0.0; });
        r.desc = "relu(" + a.desc + ")";
        break;
      case 3: {
        if (a.scale * a.scale > limit()) return a;
        r.t = a.t.pow(2), r.n = naive::map(a.n, [](double x) { return x * x; }), r.desc = "pow(" + a.desc + ",2)";
        break;
      }
      case 4:
        if (a.scale * a.scale * a.scale > limit()) return a;
        r.t = pow(a.t, 3), r.n = naive::map(a.n, [](double x) { return x * x * x; }), r.desc = "pow(" + a.desc + ",3)";
        break;
      case 5:  // exp of a value capped at 5
        r.t = exp(minimum(a.t, 5.0)), r.n = naive::map(a.n, [](double x) { return std::exp(std::min(x, 5.0)); });
        r.desc = "exp(min(" + a.desc + ",5))";
        break;
      case 6:
        r.t = log(a.t.abs() + 0.5), r.n = naive::map(a.n, [](double x) { return std::log(std::fabs(x) + 0.5); });
        r.desc = "log(|" + a.desc + "|+.5)";
        break;
      case 7:
        if (smooth) {
          r.t = Tensor(a.t.abs() + 0.25).sqrt();
          r.n = naive::map(a.n, [](double x) { return std::sqrt(std::fabs(x) + 0.25); });
          r.desc = "sqrt(|" + a.desc + "|+.25)";
          break;
        }
        r.t = a.t.abs().sqrt(), r.n = naive::map(a.n, [](double x) { return std::sqrt(std::fabs(x)); });
        r.desc = "sqrt(|" + a.desc + "|)";
        break;
      case 8:
        r.t = tanh(a.t), r.n = naive::map(a.n, [](double x) { return std::tanh(x); }), r.desc = "tanh(" + a.desc + ")";
        break;
      case 9:
        r.t = a.t.sigmoid(), r.n = naive::map(a.n, [](double x) { return 1.0 / (1.0 + std::exp(-x)); });
        r.desc = "sigmoid(" + a.desc + ")";
        break;
      case 10:
        r.t = sin(a.t), r.n = naive::map(a.n, [](double x) { return std::sin(x); }), r.desc = "sin(" + a.desc + ")";
        break;
      case 11:
        r.t = a.t.cos(), r.n = naive::map(a.n, [](double x) { return std::cos(x); }), r.desc = "cos(" + a.desc + ")";
        break;
      case 12:
        r.t = erf(a.t), r.n = naive::map(a.n, [](double x) { return std::erf(x); }), r.desc = "erf(" + a.desc + ")";
        break;
      case 13:
        r.t = gelu(a.t), r.n = naive::map(a.n, [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); });
        r.desc = "gelu(" + a.desc + ")";
        break;
      case 14:
        r.t = gelu(a.t, "tanh");
        r.n = naive::map(a.n, [](double x) {
          return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
        });
        r.desc = "gelu_tanh(" + a.desc + ")";
        break;
      case 15:
        r.t = silu(a.t), r.n = naive::map(a.n, [](double x) { return x / (1 + std::exp(-x)); });
        r.desc = "silu(" + a.desc + ")";
        break;
      case 16:
        r.t = softplus(a.t), r.n = naive::map(a.n, [](double x) { return x > 20 ? x : std::log1p(std::exp(x)); });
        r.desc = "softplus(" + a.desc + ")";
        break;
      case 17:
        r.t = log1p(a.t.abs()), r.n = naive::map(a.n, [](double x) { return std::log1p(std::fabs(x)); });
        r.desc = "log1p(|" + a.desc + "|)";
        break;
      case 18:  // expm1 of a value capped at 5
        r.t = expm1(minimum(a.t, 5.0)), r.n = naive::map(a.n, [](double x) { return std::expm1(std::min(x, 5.0)); });
        r.desc = "expm1(min(" + a.desc + ",5))";
        break;
      case 19:
        r.t = Tensor(a.t.abs() + 0.5).rsqrt();
        r.n = naive::map(a.n, [](double x) { return 1 / std::sqrt(std::fabs(x) + 0.5); });
        r.desc = "rsqrt(|" + a.desc + "|+.5)";
        break;
      case 20:
        r.t = Tensor(a.t.abs() + 0.5).reciprocal();
        r.n = naive::map(a.n, [](double x) { return 1 / (std::fabs(x) + 0.5); });
        r.desc = "reciprocal(|" + a.desc + "|+.5)";
        break;
      case 21:
        if (smooth) return a;  // kinks at the bounds
        r.t = a.t.clamp(-1.0, 1.0), r.n = naive::map(a.n, [](double x) { return x < -1 ? -1 : x > 1 ? 1 : x; });
        r.desc = "clamp(" + a.desc + ",-1,1)";
        break;
      case 22:
        r.t = a.t.sign(), r.n = naive::map(a.n, [](double x) { return static_cast<double>((0 < x) - (x < 0)); });
        r.desc = "sign(" + a.desc + ")";
        break;
      default:
        r.t = Tensor(a.t.abs() + 1).pow(0.5), r.n = naive::map(a.n, [](double x) { return std::pow(std::fabs(x) + 1, 0.5); });
        r.desc = "pow(|" + a.desc + "|+1,.5)";
        break;
    }
    return finish(r, {&a});
  }

  Pair binary(const Dims& target, int depth) {
    Pair a = gen(target, depth - 1);
    bool use_scalar = coin(0.2);
    Pair b;
    double sv = 0;
    if (use_scalar) {
      sv = scalar().second;
      b.n = naive::Value{{}, {sv}};
      b.scale = std::fabs(sv);
      b.desc = std::to_string(sv);
    } else {
      b = gen(target, depth - 1);
    }
    // The right operand as a tensor, or as a plain C++ number (a Python-style scalar).
    auto apply = [&](auto f) -> Tensor {
      if (!use_scalar) return f(a.t, b.t);
      if (mode_ == Mode::i64) return f(a.t, static_cast<int64_t>(sv));
      return f(a.t, sv);
    };
    bool fl = mode_ != Mode::i64;
    int op = static_cast<int>(uni(0, fl ? 9 : 7));
    Pair r;
    switch (op) {
      case 0:
        r.t = apply([](const Tensor& x, const auto& y) { return Tensor(x + y); });
        r.n = naive::zip(a.n, b.n, [](double x, double y) { return x + y; }), r.desc = "+";
        break;
      case 1:
        r.t = apply([](const Tensor& x, const auto& y) { return Tensor(x - y); });
        r.n = naive::zip(a.n, b.n, [](double x, double y) { return x - y; }), r.desc = "-";
        break;
      case 2:
        if (a.scale * b.scale > limit()) return a;
        r.t = apply([](const Tensor& x, const auto& y) { return Tensor(x * y); });
        r.n = naive::zip(a.n, b.n, [](double x, double y) { return x * y; }), r.desc = "*";
        break;
      case 3:
        r.t = apply([](const Tensor& x, const auto& y) { return Tensor(maximum(x, y)); });
        r.n = naive::zip(a.n, b.n, [](double x, double y) { return std::isnan(x) || x > y ? x : y; }), r.desc = "max";
        break;
      case 4:
        r.t = apply([](const Tensor& x, const auto& y) { return Tensor(minimum(x, y)); });
        r.n = naive::zip(a.n, b.n, [](double x, double y) { return std::isnan(x) || x < y ? x : y; }), r.desc = "min";
        break;
      case 5:
        r.t = apply([this](const Tensor& x, const auto& y) { return Tensor(x > y).to(dt_); });
        r.n = naive::zip(a.n, b.n, [](double x, double y) { return x > y ? 1.0 : 0.0; }), r.desc = ">";
        break;
      case 6:
        r.t = apply([this](const Tensor& x, const auto& y) { return Tensor(x <= y).to(dt_); });
        r.n = naive::zip(a.n, b.n, [](double x, double y) { return x <= y ? 1.0 : 0.0; }), r.desc = "<=";
        break;
      case 7:
        r.t = apply([this](const Tensor& x, const auto& y) { return Tensor(x == y).to(dt_); });
        r.n = naive::zip(a.n, b.n, [](double x, double y) { return x == y ? 1.0 : 0.0; }), r.desc = "==";
        break;
      case 8:  // division by a denominator kept away from zero
        if (use_scalar) {
          if (sv == 0) return a;
          r.t = a.t / sv;
          r.n = naive::zip(a.n, b.n, [](double x, double y) { return x / y; });
        } else {
          r.t = div(a.t, b.t.abs() + 0.5);
          r.n = naive::zip(a.n, b.n, [](double x, double y) { return x / (std::fabs(y) + 0.5); });
        }
        r.desc = "/";
        break;
      default:  // pow with a tensor exponent on a positive base
        if (use_scalar) return a;
        r.t = pow(a.t.abs() + 0.5, b.t.tanh());
        r.n = naive::zip(a.n, b.n, [](double x, double y) { return std::pow(std::fabs(x) + 0.5, std::tanh(y)); });
        r.desc = "pow";
        break;
    }
    r.desc = "(" + a.desc + " " + r.desc + " " + b.desc + ")";
    return finish(r, {&a, &b});
  }

  Pair where_node(const Dims& target, int depth) {
    Pair c = gen(target, depth - 1), a = gen(target, depth - 1), b = gen(target, depth - 1);
    // A condition within rounding of 0 (e.g. gelu far below 0) may have
    // either sign once computed: check_pair's tolerance could not tell.
    if (mode_ != Mode::i64) {
      const double eps = mode_ == Mode::f64 ? 1.1e-16 : 6e-8;
      for (double x : c.n.v)
        if (x != 0 && std::fabs(x) <= 4096 * eps * (1 + c.scale)) return a;
    }
    Pair r;
    if (coin()) {
      r.t = where(c.t > 0, a.t, b.t);
      r.n = naive::where(naive::map(c.n, [](double x) { return x > 0 ? 1.0 : 0.0; }), a.n, b.n);
    } else {
      auto [s, v] = scalar();
      r.t = where(c.t < 0, a.t, scalar_like(s, a.t));
      r.n = naive::where(naive::map(c.n, [](double x) { return x < 0 ? 1.0 : 0.0; }), a.n, naive::Value{{}, {v}});
    }
    r.desc = "where(" + c.desc + ", " + a.desc + ", " + b.desc + ")";
    return finish(r, {&c, &a, &b});
  }

  Pair reduction(const Dims& target, int depth) {
    int kind = static_cast<int>(uni(0, 2));
    int op = static_cast<int>(uni(0, 5));
    if (mode_ == Mode::f32 && op == 4) op = 5;  // argmax is exact only without f32 rounding
    if (mode_ == Mode::i64 && op == 1) op = 0;  // mean needs a float input
    Pair a, r;
    Dims axes;
    bool keepdim = false;
    if (kind == 0) {  // drop one axis that the target lacks
      int64_t q = uni(0, static_cast<int64_t>(target.size()));
      Dims t2 = target;
      t2.insert(t2.end() - q, uni(1, 4));
      a = gen(t2, depth - 1);
      int64_t r2 = static_cast<int64_t>(a.n.shape.size());
      if (r2 <= q) return a;
      axes = {r2 - 1 - q};
    } else if (kind == 1) {  // keepdim over some axes
      a = gen(target, depth - 1);
      keepdim = true;
      for (size_t d = 0; d < a.n.shape.size(); ++d)
        if (coin()) axes.push_back(static_cast<int64_t>(d));
      if (axes.empty()) return a;
    } else {  // everything, to a 0-d tensor
      a = gen(random_shape(3, 4), depth - 1);
    }
    if (op == 4 && axes.size() > 1) axes.resize(1);
    int64_t count = 1;
    for (size_t d = 0; d < a.n.shape.size(); ++d)
      if (axes.empty() || std::find(axes.begin(), axes.end(), static_cast<int64_t>(d)) != axes.end()) count *= a.n.shape[d];
    // (a may have a shape that does not broadcast to the target: a fresh leaf instead)
    if (op == 0 && a.scale * static_cast<double>(count) > limit()) return leaf(broadcastable_to(target));
    // A product's rounding error grows with the partial products: at most
    // count * (1 + 2 * scale) * scale^(count - 1) for factors of error ~ (1 + scale).
    const double prod_bound = static_cast<double>(count) * (1 + 2 * a.scale) *
                              std::pow(std::max(1.0, a.scale), static_cast<double>(std::max<int64_t>(count - 1, 0)));
    if (op == 5 && !(prod_bound <= limit())) return leaf(broadcastable_to(target));
    // Sometimes name the axes from the end.
    Dims tessel_axes = axes;
    for (auto& x : tessel_axes)
      if (coin(0.3)) x -= static_cast<int64_t>(a.n.shape.size());
    naive::Red red = op == 0 ? naive::Red::sum : op == 1 ? naive::Red::mean : op == 2 ? naive::Red::max
                     : op == 3 ? naive::Red::min : op == 4 ? naive::Red::argmax : naive::Red::prod;
    r.n = naive::reduce(a.n, axes, keepdim, red);
    static const char* names[] = {"sum", "mean", "max", "min", "argmax", "prod"};
    switch (op) {
      case 0: r.t = axes.empty() ? a.t.sum() : a.t.sum(tessel_axes, keepdim); break;
      case 1: r.t = axes.empty() ? a.t.mean() : a.t.mean(tessel_axes, keepdim); break;
      case 2: r.t = axes.empty() ? a.t.max() : a.t.max(tessel_axes[0], keepdim); break;
      case 3: r.t = axes.empty() ? a.t.min() : a.t.min(tessel_axes[0], keepdim); break;
      case 4: r.t = (axes.empty() ? a.t.argmax() : a.t.argmax(tessel_axes[0], keepdim)).to(dt_); break;
      default:  // the method or the free function
        r.t = axes.empty() ? (coin() ? a.t.prod() : prod(a.t)) : coin() ? a.t.prod(tessel_axes[0], keepdim)
                                                                         : prod(a.t, tessel_axes[0], keepdim);
        break;
    }
    if ((op == 2 || op == 3 || op == 5) && axes.size() > 1) {
      // max/min/prod reduce one dim at a time; reduce the highest first so lower dims keep their index.
      r.t = a.t;
      naive::Value nv = a.n;
      for (auto it = axes.rbegin(); it != axes.rend(); ++it) {
        r.t = op == 2 ? r.t.max(*it, keepdim) : op == 3 ? r.t.min(*it, keepdim) : r.t.prod(*it, keepdim);
        nv = naive::reduce(nv, {*it}, keepdim, red);
      }
      r.n = nv;
    }
    r.desc = std::string(names[op]) + "(" + a.desc + ")";
    r = finish(r, {&a});
    if (op == 5) r.scale = std::max(r.scale, prod_bound);
    return r;
  }

  Pair matmul_node(const Dims& target, int depth) {
    int64_t k = uni(1, 4);
    Pair a, b, r;
    if (target.empty()) {
      a = exact({k}, depth - 1), b = exact({k}, depth - 1);
    } else if (target.size() == 1) {
      if (coin()) a = exact({k}, depth - 1), b = exact({k, target[0]}, depth - 1);
      else a = exact({target[0], k}, depth - 1), b = exact({k}, depth - 1);
    } else {
      Dims batch(target.begin(), target.end() - 2);
      Dims ba = broadcastable_to(batch), bb = broadcastable_to(batch);
      ba.push_back(target[target.size() - 2]), ba.push_back(k);
      bb.push_back(k), bb.push_back(target.back());
      a = exact(ba, depth - 1), b = exact(bb, depth - 1);
    }
    if (a.scale * b.scale * static_cast<double>(k) > limit()) return leaf(broadcastable_to(target));
    r.t = coin() ? Tensor(a.t % b.t) : a.t.matmul(b.t);
    r.n = naive::matmul(a.n, b.n);
    r.desc = "(" + a.desc + " @ " + b.desc + ")";
    return finish(r, {&a, &b});
  }

  Pair movement(const Dims& target, int depth) {
    Pair r;
    int kind = static_cast<int>(uni(0, 5));
    if (kind == 4 && !target.empty()) {  // flip along some dims
      Pair a = gen(target, depth - 1);
      const int64_t rank = static_cast<int64_t>(a.n.shape.size());
      if (rank == 0) return a;
      Dims dims, named;
      for (int64_t d = 0; d < rank; ++d)
        if (coin()) dims.push_back(d);
      if (dims.empty()) dims.push_back(uni(0, rank - 1));
      for (int64_t d : dims) named.push_back(coin(0.3) ? d - rank : d);
      r.t = flip(a.t, named);
      r.n = naive::flip(a.n, dims);
      r.desc = "flip(" + a.desc + "," + shape_str(named) + ")";
      return finish(r, {&a});
    }
    if (kind == 5 && !target.empty()) return take_along(target, depth);
    if (target.size() >= 2 && kind == 0) {  // permute
      std::vector<int64_t> p(target.size());
      std::iota(p.begin(), p.end(), 0);
      std::shuffle(p.begin(), p.end(), rng_);
      Dims src(target.size());
      for (size_t i = 0; i < p.size(); ++i) src[static_cast<size_t>(p[i])] = target[i];
      Pair a = exact(src, depth - 1);
      r.t = a.t.permute(p);
      r.n = naive::permute(a.n, p);
      r.desc = "permute(" + a.desc + ")";
      return finish(r, {&a});
    }
    if (target.size() >= 2 && kind == 1) {  // transpose of the last two
      Dims src = target;
      std::swap(src[src.size() - 1], src[src.size() - 2]);
      Pair a = exact(src, depth - 1);
      std::vector<int64_t> p(target.size());
      std::iota(p.begin(), p.end(), 0);
      std::swap(p[p.size() - 1], p[p.size() - 2]);
      r.t = a.t.transpose(-1, -2);
      r.n = naive::permute(a.n, p);
      r.desc = "transpose(" + a.desc + ")";
      return finish(r, {&a});
    }
    if (kind == 2) {  // flatten and reshape back
      Pair a = exact(target, depth - 1);
      std::vector<int64_t> s(target.begin(), target.end());
      r.t = a.t.reshape({-1}).reshape(s);
      r.n = a.n;
      r.desc = "reshape(" + a.desc + ")";
      return finish(r, {&a});
    }
    // unsqueeze then squeeze
    Pair a = gen(target, depth - 1);
    int64_t d = uni(0, static_cast<int64_t>(a.n.shape.size()));
    r.t = a.t.unsqueeze(d).squeeze(d);
    r.n = a.n;
    r.desc = "unsq(" + a.desc + ")";
    return finish(r, {&a});
  }

  // Whether every value is finite and at most `limit` in magnitude (attention
  // scores of such rows stay where f32 and the naive doubles agree).
  static bool bounded(const naive::Value& x, double limit) {
    for (double v : x.v)
      if (!(std::fabs(v) <= limit)) return false;
    return true;
  }

  // Whether every row of the last k dims with two or more elements has a
  // standard deviation of at least 1% of its magnitude.
  static bool spread_rows(const naive::Value& x, size_t k) {
    int64_t row = 1;
    for (size_t d = x.shape.size() - k; d < x.shape.size(); ++d) row *= x.shape[d];
    if (row < 2) return true;
    for (size_t start = 0; start < x.v.size(); start += static_cast<size_t>(row)) {
      double mean = 0, var = 0;
      for (int64_t j = 0; j < row; ++j) mean += x.v[start + static_cast<size_t>(j)];
      mean /= static_cast<double>(row);
      for (int64_t j = 0; j < row; ++j) var += std::pow(x.v[start + static_cast<size_t>(j)] - mean, 2);
      var /= static_cast<double>(row);
      if (!(var >= 1e-4 * (1 + mean * mean))) return false;
    }
    return true;
  }

  // torch.take_along_dim over random in-range indices (an integer tensor
  // that is no gradient leaf): along one dim, x and the indices broadcasting
  // over the others, or over both flattened.
  Pair take_along(const Dims& target, int depth) {
    Pair a, r;
    naive::Value idx;
    const bool flat = coin(0.25);
    if (flat) {
      a = gen(random_shape(3, 3), depth - 1);
      idx.shape = {target.back()};
      for (int64_t i = 0; i < target.back(); ++i) idx.v.push_back(static_cast<double>(uni(0, a.n.numel() - 1)));
    } else {
      const size_t ax = static_cast<size_t>(uni(0, static_cast<int64_t>(target.size()) - 1));
      Dims xs = target;
      xs[ax] = uni(1, 4);
      idx.shape = target;
      for (size_t d = 0; d < target.size(); ++d) {
        if (d == ax) continue;
        if (coin(0.2)) xs[d] = 1;
        else if (coin(0.2)) idx.shape[d] = 1;
      }
      a = exact(xs, depth - 1);
      for (int64_t i = 0; i < idx.numel(); ++i) idx.v.push_back(static_cast<double>(uni(0, xs[ax] - 1)));
      r.n = naive::take_along_dim(a.n, idx, static_cast<int64_t>(ax));
      const int64_t named = coin(0.3) ? static_cast<int64_t>(ax) - static_cast<int64_t>(target.size()) : static_cast<int64_t>(ax);
      r.t = take_along_dim(a.t, index_tensor(idx), named);
      r.desc = "take_along_dim(" + a.desc + "," + shape_str(idx.shape) + "," + std::to_string(named) + ")";
      return finish(r, {&a});
    }
    r.n = idx;
    for (auto& x : r.n.v) x = a.n.v[static_cast<size_t>(x)];
    r.t = take_along_dim(a.t, index_tensor(idx));
    r.desc = "take_along_dim(" + a.desc + "," + shape_str(idx.shape) + ")";
    return finish(r, {&a});
  }

  Tensor index_tensor(const naive::Value& v) {
    std::vector<int64_t> iv(v.v.begin(), v.v.end());
    Tensor t = from_vector<int64_t>(iv, Shape{Dims(v.shape)});
    return device.is_cpu() ? t : t.to(device);
  }

  std::mt19937_64 rng_;
  Mode mode_;
  DType dt_;
  size_t leaf_count_ = 0;
};

/// Compares a realized tessel tensor with its naive value.
inline void check_pair(const Pair& p, Mode mode) {
  INFO("tree: " << p.desc);
  REQUIRE(p.t.dtype() == dtype_of(mode));
  REQUIRE(p.t.shape().dims == p.n.shape);
  std::vector<double> got = p.t.to_vector<double>();
  REQUIRE(got.size() == p.n.v.size());
  double eps = mode == Mode::f64 ? 1.1e-16 : mode == Mode::f32 ? 6e-8 : 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    double e = p.n.v[i];
    INFO("element " << i << ": got " << got[i] << ", expected " << e << " (scale " << p.scale << ")");
    if (std::isnan(e)) {
      CHECK(std::isnan(got[i]));
      continue;
    }
    if (mode == Mode::i64) {
      CHECK(got[i] == e);
      continue;
    }
    double tol = 4096 * eps * (1 + std::fabs(e) + p.scale);
    CHECK(std::fabs(got[i] - e) <= tol);
  }
}

}  // namespace proptest
