// An eager, obviously-correct evaluator over std::vector<double>: the oracle
// the property tests compare tessel's lazy results against. Every op mirrors
// the documented semantics (NumPy broadcasting, NaN-propagating max/min,
// first-index argmax, torch.matmul shape rules).
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <cstdint>
#include <functional>
#include <numeric>
#include <stdexcept>
#include <vector>

namespace naive {

using Dims = std::vector<int64_t>;

struct Value {
  Dims shape;
  std::vector<double> v;
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

inline Dims broadcast(const Dims& a, const Dims& b) {
  size_t r = std::max(a.size(), b.size());
  Dims out(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da != db && da != 1 && db != 1) throw std::logic_error("naive: shapes do not broadcast");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

inline Dims unravel(int64_t i, const Dims& shape) {
  Dims idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = i % shape[d];
    i /= shape[d];
  }
  return idx;
}

// Linear index into `s` of the element that out-index `idx` (of a larger,
// right-aligned shape) broadcasts from.
inline int64_t source_index(const Dims& idx, const Dims& s) {
  size_t lead = idx.size() - s.size();
  int64_t off = 0;
  for (size_t d = 0; d < s.size(); ++d) off = off * s[d] + (s[d] == 1 ? 0 : idx[lead + d]);
  return off;
}

inline Value expand(const Value& x, const Dims& shape) {
  Value out{shape, {}};
  Dims chk = broadcast(x.shape, shape);
  if (chk != shape) throw std::logic_error("naive: bad expand");
  int64_t n = out.numel();
  out.v.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out.v[static_cast<size_t>(i)] = x.v[static_cast<size_t>(source_index(unravel(i, shape), x.shape))];
  return out;
}

inline Value map(const Value& x, const std::function<double(double)>& f) {
  Value out = x;
  for (auto& e : out.v) e = f(e);
  return out;
}

inline Value zip(const Value& a, const Value& b, const std::function<double(double, double)>& f) {
  Dims s = broadcast(a.shape, b.shape);
  Value ea = expand(a, s), eb = expand(b, s);
  Value out{s, std::vector<double>(ea.v.size())};
  for (size_t i = 0; i < out.v.size(); ++i) out.v[i] = f(ea.v[i], eb.v[i]);
  return out;
}

inline Value where(const Value& c, const Value& a, const Value& b) {
  Dims s = broadcast(broadcast(c.shape, a.shape), b.shape);
  Value ec = expand(c, s), ea = expand(a, s), eb = expand(b, s);
  Value out{s, std::vector<double>(ea.v.size())};
  for (size_t i = 0; i < out.v.size(); ++i) out.v[i] = ec.v[i] != 0 ? ea.v[i] : eb.v[i];
  return out;
}

enum class Red { sum, mean, max, min, argmax, prod };

// Reduces over sorted, non-negative `axes` (empty: all).
inline Value reduce(const Value& x, Dims axes, bool keepdim, Red op) {
  size_t r = x.shape.size();
  if (axes.empty())
    for (size_t d = 0; d < r; ++d) axes.push_back(static_cast<int64_t>(d));
  std::vector<bool> red(r, false);
  for (int64_t a : axes) red[static_cast<size_t>(a)] = true;
  Dims out_shape, kept_shape;
  for (size_t d = 0; d < r; ++d) {
    if (!red[d]) {
      out_shape.push_back(x.shape[d]);
      kept_shape.push_back(x.shape[d]);
    } else if (keepdim) {
      out_shape.push_back(1);
    }
  }
  int64_t n_out = 1;
  for (int64_t d : kept_shape) n_out *= d;
  std::vector<double> acc(static_cast<size_t>(n_out), op == Red::prod ? 1.0 : 0.0), best(static_cast<size_t>(n_out), 0.0);
  std::vector<int64_t> count(static_cast<size_t>(n_out), 0);
  int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) {
    Dims idx = unravel(i, x.shape);
    int64_t o = 0, pos = 0;
    for (size_t d = 0; d < r; ++d) {
      if (red[d]) pos = pos * x.shape[d] + idx[d];
      else o = o * x.shape[d] + idx[d];
    }
    double v = x.v[static_cast<size_t>(i)];
    auto& a = acc[static_cast<size_t>(o)];
    int64_t& c = count[static_cast<size_t>(o)];
    switch (op) {
      case Red::sum:
      case Red::mean: a += v; break;
      case Red::prod: a *= v; break;
      case Red::max:
        if (c == 0 || std::isnan(v) || (!std::isnan(a) && v > a)) a = std::isnan(a) && c ? a : v;
        break;
      case Red::min:
        if (c == 0 || std::isnan(v) || (!std::isnan(a) && v < a)) a = std::isnan(a) && c ? a : v;
        break;
      case Red::argmax:  // the first maximum; the first NaN wins outright
        if (c == 0 || (!std::isnan(a) && (std::isnan(v) || v > a))) {
          a = v;
          best[static_cast<size_t>(o)] = static_cast<double>(pos);
        }
        break;
    }
    ++c;
  }
  if (op == Red::mean)
    for (size_t i = 0; i < acc.size(); ++i) acc[i] /= static_cast<double>(count[i]);
  if (op == Red::argmax) acc = best;
  return Value{out_shape, acc};
}

inline Value permute(const Value& x, const Dims& order) {
  Dims s;
  for (int64_t o : order) s.push_back(x.shape[static_cast<size_t>(o)]);
  Value out{s, std::vector<double>(x.v.size())};
  for (int64_t i = 0; i < out.numel(); ++i) {
    Dims idx = unravel(i, s), src(x.shape.size());
    for (size_t d = 0; d < order.size(); ++d) src[static_cast<size_t>(order[d])] = idx[d];
    int64_t off = 0;
    for (size_t d = 0; d < src.size(); ++d) off = off * x.shape[d] + src[d];
    out.v[static_cast<size_t>(i)] = x.v[static_cast<size_t>(off)];
  }
  return out;
}

// torch.flip: reversed along each of `dims` (non-negative).
inline Value flip(const Value& x, const Dims& dims) {
  Value out{x.shape, std::vector<double>(x.v.size())};
  for (int64_t i = 0; i < x.numel(); ++i) {
    Dims idx = unravel(i, x.shape);
    for (int64_t d : dims) idx[static_cast<size_t>(d)] = x.shape[static_cast<size_t>(d)] - 1 - idx[static_cast<size_t>(d)];
    int64_t off = 0;
    for (size_t d = 0; d < idx.size(); ++d) off = off * x.shape[d] + idx[d];
    out.v[static_cast<size_t>(i)] = x.v[static_cast<size_t>(off)];
  }
  return out;
}

// torch.take_along_dim(x, idx, dim): x and idx have one rank and broadcast
// over every dim but `dim`; the result takes idx's size along `dim`.
inline Value take_along_dim(const Value& x, const Value& idx, int64_t dim) {
  const size_t r = x.shape.size(), ax = static_cast<size_t>(dim);
  Dims s(r);
  for (size_t d = 0; d < r; ++d) s[d] = d == ax ? idx.shape[d] : std::max(x.shape[d], idx.shape[d]);
  Value out{s, std::vector<double>(static_cast<size_t>(Value{s, {}}.numel()))};
  for (int64_t i = 0; i < out.numel(); ++i) {
    Dims at = unravel(i, s);
    int64_t io = 0, xo = 0;
    for (size_t d = 0; d < r; ++d) io = io * idx.shape[d] + (idx.shape[d] == 1 ? 0 : at[d]);
    const int64_t k = static_cast<int64_t>(idx.v[static_cast<size_t>(io)]);
    for (size_t d = 0; d < r; ++d) xo = xo * x.shape[d] + (d == ax ? k : x.shape[d] == 1 ? 0 : at[d]);
    out.v[static_cast<size_t>(i)] = x.v[static_cast<size_t>(xo)];
  }
  return out;
}

// F.layer_norm over the last `k` dims (population variance, eps inside the
// root), times w plus b when given (shaped like those dims).
inline Value layer_norm(const Value& x, size_t k, const Value* w, const Value* b, double eps) {
  int64_t row = 1;
  for (size_t d = x.shape.size() - k; d < x.shape.size(); ++d) row *= x.shape[d];
  Value out = x;
  for (size_t start = 0; start < x.v.size(); start += static_cast<size_t>(row)) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < row; ++j) mean += x.v[start + static_cast<size_t>(j)];
    mean /= static_cast<double>(row);
    for (int64_t j = 0; j < row; ++j) {
      const double c = x.v[start + static_cast<size_t>(j)] - mean;
      var += c * c;
    }
    var /= static_cast<double>(row);
    for (int64_t j = 0; j < row; ++j) {
      double y = (x.v[start + static_cast<size_t>(j)] - mean) / std::sqrt(var + eps);
      if (w) y *= w->v[static_cast<size_t>(j)];
      if (b) y += b->v[static_cast<size_t>(j)];
      out.v[start + static_cast<size_t>(j)] = y;
    }
  }
  return out;
}

// Self-attention over the last two dims: row i of each matrix attends to
// rows j (j <= i when causal) with softmax(x_i . x_j / sqrt(D)) weights.
inline Value self_attention(const Value& x, bool causal) {
  const int64_t t = x.shape[x.shape.size() - 2], d = x.shape.back();
  Value out = x;
  std::vector<double> s(static_cast<size_t>(t));
  for (size_t base = 0; base < x.v.size(); base += static_cast<size_t>(t * d)) {
    auto at = [&](int64_t r, int64_t c) { return x.v[base + static_cast<size_t>(r * d + c)]; };
    for (int64_t i = 0; i < t; ++i) {
      const int64_t keys = causal ? i + 1 : t;
      double m = -std::numeric_limits<double>::infinity(), l = 0;
      for (int64_t j = 0; j < keys; ++j) {
        double dot = 0;
        for (int64_t c = 0; c < d; ++c) dot += at(i, c) * at(j, c);
        s[static_cast<size_t>(j)] = dot / std::sqrt(static_cast<double>(d));
        m = std::max(m, s[static_cast<size_t>(j)]);
      }
      for (int64_t j = 0; j < keys; ++j) l += std::exp(s[static_cast<size_t>(j)] - m);
      for (int64_t c = 0; c < d; ++c) {
        double acc = 0;
        for (int64_t j = 0; j < keys; ++j) acc += std::exp(s[static_cast<size_t>(j)] - m) / l * at(j, c);
        out.v[base + static_cast<size_t>(i * d + c)] = acc;
      }
    }
  }
  return out;
}

inline Value reshape(Value x, const Dims& s) {
  x.shape = s;
  return x;
}

// torch.matmul: 1-d operands get a dim added (and removed from the result);
// batch dims broadcast.
inline Value matmul(Value a, Value b) {
  bool sq_rows = a.shape.size() == 1, sq_cols = b.shape.size() == 1;
  if (sq_rows) a.shape.insert(a.shape.begin(), 1);
  if (sq_cols) b.shape.push_back(1);
  int64_t n = a.shape[a.shape.size() - 2], k = a.shape.back(), m = b.shape.back();
  if (b.shape[b.shape.size() - 2] != k) throw std::logic_error("naive: matmul inner dims");
  Dims ba(a.shape.begin(), a.shape.end() - 2), bb(b.shape.begin(), b.shape.end() - 2);
  Dims batch = broadcast(ba, bb);
  Dims sa = batch, sb = batch;
  sa.push_back(n), sa.push_back(k), sb.push_back(k), sb.push_back(m);
  Value ea = expand(a, sa), eb = expand(b, sb);
  int64_t nb = 1;
  for (int64_t d : batch) nb *= d;
  Dims out_shape = batch;
  out_shape.push_back(n), out_shape.push_back(m);
  Value out{out_shape, std::vector<double>(static_cast<size_t>(nb * n * m), 0.0)};
  for (int64_t z = 0; z < nb; ++z)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < m; ++j) {
        double s = 0;
        for (int64_t p = 0; p < k; ++p)
          s += ea.v[static_cast<size_t>(z * n * k + i * k + p)] * eb.v[static_cast<size_t>(z * k * m + p * m + j)];
        out.v[static_cast<size_t>(z * n * m + i * m + j)] = s;
      }
  Dims final_shape = batch;
  if (!sq_rows) final_shape.push_back(n);
  if (!sq_cols) final_shape.push_back(m);
  out.shape = final_shape;
  return out;
}

}  // namespace naive
