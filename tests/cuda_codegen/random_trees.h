// Random expression trees over the IR builders, for the generated-CUDA tests:
// elementwise chains over every dtype, broadcasts, non-contiguous leaves
// (transposed, sliced with steps and offsets, permute/slice nodes), reductions
// over random axes, multi-root graphs and backward graphs. The same (seed,
// index) always builds the same tree over the same values, so a test can
// build one copy for the ref backend and one for the backend under test.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "codegen/autodiff.h"
#include "codegen/builders.h"
#include "codegen/ir.h"
#include "runtime/dtype.h"

namespace cuda_codegen_test {

using tessel::DType;
using tessel::Shape;
using tessel::ir::BufferView;
using tessel::ir::NodePtr;
using tessel::ir::Op;

struct Case {
  std::vector<NodePtr> roots;
  std::string what;  // a one-line description for failure messages
  std::vector<std::shared_ptr<int>> owners;  // keep gradient owners alive
};

class TreeGen {
 public:
  TreeGen(uint64_t seed, int index, int64_t max_numel = 4096) : rng_(seed * 1000003u + static_cast<uint64_t>(index)), max_numel_(max_numel) {}

  /// Every unary op of the node-kind table (Cast aside) over f32, f64 and
  /// i64 leaves, one root each: no op's emitter line is left to chance.
  Case make_every_unary_op() {
    Case c;
    out_ = Shape{3, 37};
    for (int o = 0; o < tessel::ir::kNumOps; ++o) {
      Op op = static_cast<Op>(o);
      if (tessel::ir::op_category(op) != tessel::ir::Category::Unary || op == Op::Cast) continue;
      for (DType t : {DType::f32, DType::f64, DType::i64}) {
        if (op == Op::Not) t = DType::b8;
        c.roots.push_back(tessel::ir::unary(op, broadcast_leaf(t)));
      }
    }
    c.what = "every unary op " + out_.str();
    return c;
  }

  /// Every compiled reduction kind (sum, mean, max, min, prod) over f32, f64,
  /// i32 and i64 leaves, along each dim and over both, one root each: no
  /// accumulator, identity or combine step is left to chance.
  Case make_every_reduction() {
    Case c;
    out_ = Shape{3, 37};
    for (Op op : {Op::Sum, Op::Mean, Op::Max, Op::Min, Op::Prod})
      for (DType t : {DType::f32, DType::f64, DType::i32, DType::i64}) {
        if (op == Op::Mean && !tessel::is_floating(t)) continue;
        for (const std::vector<int64_t>& axes : {std::vector<int64_t>{0}, std::vector<int64_t>{1}, std::vector<int64_t>{0, 1}}) {
          NodePtr x = broadcast_leaf(t);
          c.roots.push_back(tessel::ir::reduce(op, op == Op::Prod ? near_one(x, 1e-3) : x, axes, coin(0.5)));
        }
      }
    c.what = "every reduction " + out_.str();
    return c;
  }

  /// One random case. `kind` 0: elementwise, 1: reduction, 2: two roots, 3: backward.
  Case make(int kind) {
    Case c;
    out_ = random_shape();
    switch (kind) {
      case 0: {
        DType t = pick_dtype();
        c.roots.push_back(expr(t, depth()));
        c.what = "elementwise " + std::string(tessel::dtype_name(t)) + " " + out_.str();
        break;
      }
      case 1: {
        DType t = pick<DType>({DType::f32, DType::f32, DType::f64, DType::i32, DType::i64, DType::b8});
        NodePtr x = expr(t, depth());
        std::vector<Op> ops{Op::Sum, Op::Max, Op::Min, Op::Prod};
        if (tessel::is_floating(t)) ops.push_back(Op::Mean);
        Op op = pick(ops);
        if (op == Op::Prod) x = near_one(x, 1e-3);
        std::vector<int64_t> axes;
        for (int64_t d = 0; d < out_.rank(); ++d)
          if (coin(0.5)) axes.push_back(d);
        if (axes.empty() && coin(0.5)) axes.push_back(static_cast<int64_t>(uniform(0, out_.rank() - 1)));
        bool keep = coin(0.5);
        NodePtr r = tessel::ir::reduce(op, x, axes, keep);
        // Sometimes a consumer of the reduction (a second kernel that reads it).
        if (coin(0.3) && tessel::is_floating(r->dtype)) r = tessel::ir::binary(Op::Mul, r, constant(r->dtype));
        c.roots.push_back(r);
        c.what = std::string("reduce ") + std::string(tessel::ir::op_name(op)) + " " + std::string(tessel::dtype_name(t)) +
                 " " + out_.str() + " axes " + std::to_string(axes.size()) + (keep ? " keepdim" : "");
        break;
      }
      case 2: {
        DType t = pick<DType>({DType::f32, DType::f64});
        NodePtr shared = expr(t, 2);
        c.roots.push_back(tessel::ir::binary(Op::Add, shared, expr(t, 2)));
        c.roots.push_back(tessel::ir::unary(Op::Tanh, shared));
        c.what = "two roots " + out_.str();
        break;
      }
      default: {
        DType t = pick<DType>({DType::f32, DType::f64});
        grad_ = true;
        NodePtr y = expr(t, depth());
        grad_ = false;
        NodePtr loss = tessel::ir::reduce(Op::Sum, y, {}, false);
        NodePtr seed = tessel::ir::constant(tessel::ir::ScalarValue::of(1.0), loss->dtype, loss->shape);
        for (auto& g : tessel::autodiff::gradients(loss, seed)) c.roots.push_back(g.grad);
        if (c.roots.empty()) c.roots.push_back(y);
        c.owners = owners_;
        c.what = "backward " + out_.str();
        break;
      }
    }
    return c;
  }

  /// A [rows, n] case reduced along dim `axis` (1: few long rows, the shape
  /// a reduction split across blocks serves), over leaves of any layout
  /// (transposed, stepped windows, permute/slice nodes).
  Case make_rows(int64_t rows, int64_t n, int axis) {
    Case c;
    out_ = Shape({rows, n});
    DType t = pick<DType>({DType::f32, DType::f64, DType::i64});
    NodePtr x = expr(t, 2);
    std::vector<Op> ops{Op::Sum, Op::Max, Op::Min, Op::Prod};
    if (tessel::is_floating(t)) ops.push_back(Op::Mean);
    Op op = pick(ops);
    if (op == Op::Prod) x = near_one(x, 1e-3);
    c.roots.push_back(tessel::ir::reduce(op, x, {axis}, coin(0.5)));
    c.what = fmt::format("reduce {} {} [{}, {}] axis {}", tessel::ir::op_name(op), tessel::dtype_name(t), rows, n, axis);
    return c;
  }

  /// A case over a fixed 1-D size (1, 31, 33, 1000003 ...).
  Case make_sized(int64_t n, bool reduce) {
    Case c;
    out_ = Shape({n});
    DType t = pick<DType>({DType::f32, DType::f64});
    NodePtr x = expr(t, 2);
    if (reduce) {
      Op op = pick<Op>({Op::Sum, Op::Max, Op::Mean, Op::Prod});
      x = tessel::ir::reduce(op, op == Op::Prod ? near_one(x, 1e-6) : x, {}, false);
    }
    c.roots.push_back(x);
    c.what = std::string(reduce ? "reduce" : "elementwise") + " sized " + std::to_string(n);
    return c;
  }

 private:
  std::mt19937_64 rng_;
  int64_t max_numel_;
  Shape out_;
  bool grad_ = false;
  std::vector<std::shared_ptr<int>> owners_;

  int64_t uniform(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng_); }
  bool coin(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  template <class T>
  T pick(const std::vector<T>& v) {
    return v[static_cast<size_t>(uniform(0, static_cast<int64_t>(v.size()) - 1))];
  }
  int depth() { return static_cast<int>(uniform(1, 4)); }

  Shape random_shape() {
    static const int64_t dims[] = {1, 2, 3, 5, 7, 31, 33};
    for (;;) {
      int rank = static_cast<int>(uniform(1, 4));
      std::vector<int64_t> s;
      for (int i = 0; i < rank; ++i) s.push_back(dims[uniform(0, 6)]);
      Shape sh(s);
      if (sh.numel() <= max_numel_) return sh;
    }
  }

  // Floating factors 1 + eps * tanh(x): a product over up to 1 / eps of them
  // stays within [1/e, e], far from overflow, and a wrong identity shows
  // (integers wrap, exactly, in any order).
  NodePtr near_one(NodePtr x, double eps) {
    if (!tessel::is_floating(x->dtype)) return x;
    const DType t = x->dtype;
    NodePtr small = tessel::ir::binary(Op::Mul, tessel::ir::unary(Op::Tanh, std::move(x)),
                                       tessel::ir::constant(tessel::ir::ScalarValue::of(eps), t));
    return tessel::ir::binary(Op::Add, tessel::ir::constant(tessel::ir::ScalarValue::of(1.0), t), small);
  }

  DType pick_dtype() { return pick<DType>({DType::f32, DType::f32, DType::f32, DType::f64, DType::i32, DType::i64, DType::b8}); }

  NodePtr constant(DType t) {
    if (t == DType::b8) return tessel::ir::constant(tessel::ir::ScalarValue::of_int(coin(0.5)), t);
    if (tessel::is_integral(t)) return tessel::ir::constant(tessel::ir::ScalarValue::of_int(uniform(-4, 4)), t);
    return tessel::ir::constant(tessel::ir::ScalarValue::of(std::uniform_real_distribution<double>(-2, 2)(rng_)), t);
  }

  void fill(const BufferView& v, DType t, int64_t n) {
    auto* p = static_cast<std::byte*>(v.storage->data());
    std::uniform_real_distribution<double> f(-2.0, 2.0);
    for (int64_t i = 0; i < n; ++i) {
      std::byte* q = p + i * static_cast<int64_t>(tessel::dtype_size(t));
      switch (t) {
        case DType::f32: { float x = static_cast<float>(f(rng_)); std::memcpy(q, &x, 4); break; }
        case DType::f64: { double x = f(rng_); std::memcpy(q, &x, 8); break; }
        case DType::i64: { int64_t x = uniform(-6, 6); std::memcpy(q, &x, 8); break; }
        case DType::i32: { int32_t x = static_cast<int32_t>(uniform(-6, 6)); std::memcpy(q, &x, 4); break; }
        case DType::b8: { uint8_t x = coin(0.5); std::memcpy(q, &x, 1); break; }
        case DType::f16: { uint16_t x = tessel::f32_to_f16(static_cast<float>(f(rng_))); std::memcpy(q, &x, 2); break; }
        case DType::bf16: { uint16_t x = tessel::f32_to_bf16(static_cast<float>(f(rng_))); std::memcpy(q, &x, 2); break; }
      }
    }
  }

  // A leaf of shape `s`: contiguous, strided (transposed storage), a stepped
  // window into a larger buffer, or a permute/slice node over a dense input.
  NodePtr leaf(DType t, const Shape& s) {
    const int layout = static_cast<int>(uniform(0, grad_ ? 3 : 4));  // no backward through slice nodes yet
    const size_t r = s.dims.size();
    BufferView v;
    if (layout == 1 && r >= 2) {  // memory in reversed dim order
      Shape rev(std::vector<int64_t>(s.dims.rbegin(), s.dims.rend()));
      tessel::Strides cs = tessel::contiguous_strides(rev);
      v.storage = tessel::Storage::allocate(static_cast<size_t>(std::max<int64_t>(s.numel(), 1)) * tessel::dtype_size(t));
      fill(v, t, s.numel());
      v.strides.assign(cs.rbegin(), cs.rend());
    } else if (layout == 2) {  // every other element of a bigger buffer, from an offset
      std::vector<int64_t> big(s.dims);
      for (auto& d : big) d = 2 * d + 1;
      Shape bs(big);
      tessel::Strides cs = tessel::contiguous_strides(bs);
      v.storage = tessel::Storage::allocate(static_cast<size_t>(bs.numel()) * tessel::dtype_size(t));
      fill(v, t, bs.numel());
      v.offset = 0;
      for (size_t i = 0; i < r; ++i) v.offset += cs[i];
      v.strides.clear();
      for (size_t i = 0; i < r; ++i) v.strides.push_back(2 * cs[i]);
    } else if (layout == 3 && r >= 2) {  // a permute node over a dense input of the permuted shape
      std::vector<int64_t> order(r);
      for (size_t i = 0; i < r; ++i) order[i] = static_cast<int64_t>(i);
      std::shuffle(order.begin(), order.end(), rng_);
      std::vector<int64_t> src(r);
      for (size_t i = 0; i < r; ++i) src[static_cast<size_t>(order[i])] = s.dims[i];
      NodePtr in = dense_input(t, Shape(src));
      return tessel::ir::permute(in, order);
    } else if (layout == 4) {  // a slice node: [1 :: 2] windows
      std::vector<int64_t> big(s.dims), starts(r, 1), steps(r, 2);
      for (auto& d : big) d = 2 * d + 1;
      return tessel::ir::slice(dense_input(t, Shape(big)), starts, steps, s);
    } else {
      return dense_input(t, s);
    }
    return make_input(v, t, s);
  }

  NodePtr dense_input(DType t, const Shape& s) {
    BufferView v;
    v.storage = tessel::Storage::allocate(static_cast<size_t>(std::max<int64_t>(s.numel(), 1)) * tessel::dtype_size(t));
    v.strides = tessel::contiguous_strides(s);
    fill(v, t, s.numel());
    return make_input(v, t, s);
  }

  NodePtr make_input(const BufferView& v, DType t, const Shape& s) {
    if (grad_ && tessel::is_floating(t)) {
      owners_.push_back(std::make_shared<int>(0));
      return tessel::ir::input(v, t, s, true, owners_.back());
    }
    return tessel::ir::input(v, t, s);
  }

  // A leaf that broadcasts to out_: some dims 1, maybe fewer leading dims.
  NodePtr broadcast_leaf(DType t) {
    std::vector<int64_t> d(out_.dims);
    for (auto& x : d)
      if (coin(0.25)) x = 1;
    if (!d.empty() && coin(0.2)) d.erase(d.begin());
    NodePtr l = leaf(t, Shape(d));
    if (!(l->shape == out_)) l = tessel::ir::expand(l, out_);
    return l;
  }

  NodePtr expr(DType t, int depth) {
    if (depth <= 0 || coin(0.15)) return coin(0.12) ? tessel::ir::expand(constant(t), out_) : broadcast_leaf(t);
    NodePtr r;
    if (t == DType::b8) {
      switch (uniform(0, 4)) {
        case 0: r = tessel::ir::unary(Op::Not, expr(t, depth - 1)); break;
        case 4:
          r = tessel::ir::unary(pick<Op>({Op::IsNan, Op::IsInf}), expr(pick<DType>({DType::f32, DType::f64}), depth - 1));
          break;
        case 1: r = tessel::ir::binary(pick<Op>({Op::And, Op::Or}), expr(t, depth - 1), expr(t, depth - 1)); break;
        case 2: {  // a mask from element indices (tril-like), computed in the kernel
          const int64_t rank = out_.rank();
          if (rank == 0) return expr(t, depth - 1);
          const int64_t d1 = uniform(0, rank - 1), d2 = uniform(0, rank - 1);
          r = tessel::ir::binary(pick<Op>({Op::Ge, Op::Lt, Op::Eq}), tessel::ir::iota(out_, d1),
                                 tessel::ir::iota(out_, d2));
          break;
        }
        default: {
          DType u = pick<DType>({DType::f32, DType::i32, DType::f64, DType::i64});
          r = tessel::ir::binary(pick<Op>({Op::Eq, Op::Ne, Op::Lt, Op::Le, Op::Gt, Op::Ge}), expr(u, depth - 1),
                                 expr(u, depth - 1));
        }
      }
    } else if (tessel::is_integral(t)) {
      switch (uniform(0, 4)) {
        case 0:
          r = tessel::ir::unary(pick<Op>({Op::Neg, Op::Abs, Op::Relu, Op::Sign, Op::Floor, Op::Ceil, Op::Round}),
                                expr(t, depth - 1));
          break;
        case 1: case 2:
          r = tessel::ir::binary(pick<Op>({Op::Add, Op::Sub, Op::Mul, Op::Maximum, Op::Minimum}), expr(t, depth - 1),
                                 expr(t, depth - 1));
          break;
        case 3: r = tessel::ir::where(expr(DType::b8, depth - 1), expr(t, depth - 1), expr(t, depth - 1)); break;
        default: r = tessel::ir::cast(expr(pick<DType>({DType::b8, DType::i32, DType::i64}), depth - 1), t); break;
      }
    } else {
      switch (uniform(0, 8)) {
        case 0: case 1:
          r = tessel::ir::unary(pick<Op>({Op::Neg, Op::Abs, Op::Exp, Op::Log, Op::Sqrt, Op::Tanh, Op::Sigmoid, Op::Relu,
                                          Op::Sin, Op::Cos, Op::Erf, Op::Log1p, Op::Expm1, Op::Rsqrt, Op::Reciprocal,
                                          Op::Sign, Op::Floor, Op::Ceil, Op::Round}),
                                expr(t, depth - 1));
          break;
        case 2: case 3:
          r = tessel::ir::binary(pick<Op>({Op::Add, Op::Sub, Op::Mul, Op::Div, Op::Maximum, Op::Minimum, Op::Pow}),
                                 expr(t, depth - 1), expr(t, depth - 1));
          break;
        case 4:
          r = tessel::ir::where(expr(DType::b8, depth - 1), expr(t, depth - 1), expr(t, depth - 1));
          break;
        case 6: case 7: {  // pad then a window of the original shape, or a rotation by cat
          const int64_t rank = out_.rank();
          if (rank == 0) return expr(t, depth - 1);
          const int64_t d = uniform(0, rank - 1), len = out_[d];
          NodePtr x = expr(t, depth - 1);
          std::vector<int64_t> starts(static_cast<size_t>(rank), 0), steps(static_cast<size_t>(rank), 1);
          if (uniform(0, 1) == 0 || len < 2) {
            std::vector<int64_t> before(static_cast<size_t>(rank), 0), after(before);
            before[static_cast<size_t>(d)] = 1;
            after[static_cast<size_t>(d)] = 2;
            starts[static_cast<size_t>(d)] = uniform(0, 3);
            r = tessel::ir::slice(tessel::ir::pad(x, before, after, tessel::ir::ScalarValue::of(-0.5)), starts, steps, out_);
          } else {
            const int64_t k = uniform(1, len - 1);
            Shape head = out_, tail = out_;
            head.dims[static_cast<size_t>(d)] = len - k;
            tail.dims[static_cast<size_t>(d)] = k;
            starts[static_cast<size_t>(d)] = k;
            NodePtr a = tessel::ir::slice(x, starts, steps, head);
            starts[static_cast<size_t>(d)] = 0;
            NodePtr b = tessel::ir::slice(x, starts, steps, tail);
            r = tessel::ir::cat({a, b}, d);
          }
          break;
        }
        case 5:  // a half leaf selected through where, then converted (f16/bf16 storage paths)
          r = tessel::ir::cast(tessel::ir::where(expr(DType::b8, depth - 1), broadcast_leaf(DType::f16),
                                                 broadcast_leaf(DType::f16)), t);
          break;
        default:
          r = tessel::ir::cast(expr(pick<DType>({DType::i32, DType::i64, DType::b8, DType::f32, DType::f64}), depth - 1), t);
          break;
      }
    }
    if (r->dtype != t) r = tessel::ir::cast(r, t);
    return r;
  }
};

}  // namespace cuda_codegen_test
