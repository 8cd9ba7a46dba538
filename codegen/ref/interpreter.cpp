// The ref backend: evaluates IR node by node, each into its own buffer.
// Deliberately plain -- it is the oracle compiled backends are tested
// against -- but not slow: loops run over merged contiguous rows and matmul
// goes through OpenBLAS.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <unordered_map>

#include "codegen/attention_geometry.h"
#include "codegen/backend.h"
#include "codegen/blas/gemm.h"
#include "codegen/conv_geometry.h"
#include "codegen/ir_verifier.h"
#include "codegen/movement.h"
#include "codegen/verify_mode.h"
#include "codegen/ref/attention_loops.h"
#include "codegen/ref/conv_loops.h"
#include "codegen/ref/strided_loop.h"
#include "runtime/errors.h"

namespace tessel {
namespace {

using ir::BufferView;
using ir::Node;
using ir::Op;
using ref::StridedLoop;


template <class F>
decltype(auto) dispatch(DType t, F&& f) {
  switch (t) {
    case DType::f32: return f(float{});
    case DType::f64: return f(double{});
    case DType::i64: return f(int64_t{});
    case DType::i32: return f(int32_t{});
    case DType::b8: return f(bool{});
    default: break;
  }
  throw InternalError(std::string("ref interpreter: no arithmetic on dtype ") + std::string(dtype_name(t)) +
                      " (builders must cast half types to f32)");
}

// Loads/stores of any storage dtype as a compute type (casts touch halves).
template <class T>
T load_as(DType src, const std::byte* p) {
  switch (src) {
    case DType::f32: return static_cast<T>(*reinterpret_cast<const float*>(p));
    case DType::f64: return static_cast<T>(*reinterpret_cast<const double*>(p));
    case DType::i64: return static_cast<T>(*reinterpret_cast<const int64_t*>(p));
    case DType::i32: return static_cast<T>(*reinterpret_cast<const int32_t*>(p));
    case DType::b8: return static_cast<T>(*reinterpret_cast<const bool*>(p));
    case DType::f16: { uint16_t h; std::memcpy(&h, p, 2); return static_cast<T>(f16_to_f32(h)); }
    case DType::bf16: { uint16_t h; std::memcpy(&h, p, 2); return static_cast<T>(bf16_to_f32(h)); }
  }
  return T{};
}
void store_double(DType dst, std::byte* p, double v, int64_t iv, bool use_int) {
  switch (dst) {
    case DType::f32: *reinterpret_cast<float*>(p) = static_cast<float>(v); break;
    case DType::f64: *reinterpret_cast<double*>(p) = v; break;
    case DType::i64: *reinterpret_cast<int64_t*>(p) = use_int ? iv : static_cast<int64_t>(v); break;
    case DType::i32: *reinterpret_cast<int32_t*>(p) = static_cast<int32_t>(use_int ? iv : static_cast<int64_t>(v)); break;
    case DType::b8: *reinterpret_cast<bool*>(p) = use_int ? iv != 0 : v != 0; break;
    case DType::f16: { uint16_t h = f32_to_f16(static_cast<float>(v)); std::memcpy(p, &h, 2); break; }
    case DType::bf16: { uint16_t h = f32_to_bf16(static_cast<float>(v)); std::memcpy(p, &h, 2); break; }
  }
}

// Bool operands have the logical forms only (kBoolForm; builders compute
// the rest on a number type).
bool bool_apply(Op op, bool x, bool y) {
  if (op == Op::Abs || op == Op::Relu || op == Op::Sign || op == Op::Floor || op == Op::Ceil || op == Op::Round)
    return x;
  if (op == Op::Not) return !x;
  if (op == Op::Add || op == Op::Or || op == Op::Maximum) return x || y;
  if (op == Op::Mul || op == Op::And || op == Op::Minimum) return x && y;
  if (op == Op::Eq) return x == y;
  if (op == Op::Ne) return x != y;
  if (op == Op::Lt) return x < y;
  if (op == Op::Le) return x <= y;
  if (op == Op::Gt) return x > y;
  if (op == Op::Ge) return x >= y;
  throw InternalError(fmt::format("ref interpreter: {} on bool not lowered by builders", ir::op_name(op)));
}

// One element of a unary, binary or comparison op on compute type T: unary
// ops ignore `y`, a comparison gives 1 or 0.
// Always inlined: a loop that calls it with a constant op (with_op below)
// compiles to that op's arithmetic alone, and vectorizes.
template <class T>
[[gnu::always_inline]] inline T apply(Op op, T x, T y) {
  if constexpr (std::is_same_v<T, bool>) {
    return bool_apply(op, x, y);
  } else {
    switch (op) {
      case Op::Neg: return static_cast<T>(-x);
      case Op::Abs: return x < 0 ? static_cast<T>(-x) : x;
      case Op::Exp: return static_cast<T>(std::exp(x));
      case Op::Log: return static_cast<T>(std::log(x));
      case Op::Sqrt: return static_cast<T>(std::sqrt(x));
      case Op::Tanh: return static_cast<T>(std::tanh(x));
      case Op::Sigmoid: return static_cast<T>(T(1) / (T(1) + static_cast<T>(std::exp(-x))));
      case Op::Relu: return (x > T(0) || x != x) ? x : T(0);
      case Op::Sin: return static_cast<T>(std::sin(x));
      case Op::Cos: return static_cast<T>(std::cos(x));
      case Op::Erf: return static_cast<T>(std::erf(x));
      case Op::Log1p: return static_cast<T>(std::log1p(x));
      case Op::Expm1: return static_cast<T>(std::expm1(x));
      case Op::Rsqrt: return static_cast<T>(T(1) / static_cast<T>(std::sqrt(x)));
      case Op::Reciprocal: return static_cast<T>(T(1) / x);
      case Op::Sign: return static_cast<T>((T(0) < x) - (x < T(0)));
      case Op::Floor:
        if constexpr (std::is_integral_v<T>) return x;
        else return std::floor(x);
      case Op::Ceil:
        if constexpr (std::is_integral_v<T>) return x;
        else return std::ceil(x);
      case Op::Round:  // rint: the default rounding mode, half to even
        if constexpr (std::is_integral_v<T>) return x;
        else return std::rint(x);
      case Op::IsNan: return static_cast<T>(x != x);
      case Op::IsInf:
        if constexpr (std::is_integral_v<T>) return T(0);
        else return static_cast<T>(std::isinf(x));
      case Op::Not: return static_cast<T>(x == T(0));
      case Op::Add: return static_cast<T>(x + y);
      case Op::Sub: return static_cast<T>(x - y);
      case Op::Mul: return static_cast<T>(x * y);
      case Op::Div: return static_cast<T>(x / y);
      case Op::Pow:
        if constexpr (std::is_integral_v<T>) {
          if (y < 0) return x == 1 ? 1 : 0;
          T r = 1;
          for (T e = y, base = x; e > 0; e >>= 1, base = static_cast<T>(base * base))
            if (e & 1) r = static_cast<T>(r * base);
          return r;
        } else {
          return static_cast<T>(std::pow(x, y));
        }
      case Op::Maximum: return (x != x || x > y) ? x : y;
      case Op::Minimum: return (x != x || x < y) ? x : y;
      case Op::Eq: return static_cast<T>(x == y);
      case Op::Ne: return static_cast<T>(x != y);
      case Op::Lt: return static_cast<T>(x < y);
      case Op::Le: return static_cast<T>(x <= y);
      case Op::Gt: return static_cast<T>(x > y);
      case Op::Ge: return static_cast<T>(x >= y);
      case Op::And: return static_cast<T>(x != T(0) && y != T(0));
      case Op::Or: return static_cast<T>(x != T(0) || y != T(0));
      case Op::Cast: case Op::Where:  // loops of their own (Interpreter::cast, ::where)
      TESSEL_IR_CASES_NOT_ELEMENTWISE
        break;
    }
    throw InternalError(fmt::format("ref interpreter: {} is not a unary, binary or comparison op", ir::op_name(op)));
  }
}

// Calls body(f) with f(x, y) computing `op` on T. The ops a training step
// interprets most get a lambda of their own with the op fixed, so the loop
// `body` runs is that op's arithmetic alone -- the same arithmetic, as
// apply() is inlined either way -- and the compiler vectorizes it; the rest
// go through apply's switch per element.
template <Op... Ks>
struct Ops {};

template <class T, class Body>
void with_op(Op op, Body&& body) {
  // Runs body with the op fixed when `op` is one of Ks; false when it is none.
  auto fixed = [&]<Op... Ks>(Ops<Ks...>) {
    return ((op == Ks && (body([](T x, T y) { return apply<T>(Ks, x, y); }), true)) || ...);
  };
  if constexpr (!std::is_same_v<T, bool>) {
    using Common = Ops<Op::Add, Op::Sub, Op::Mul, Op::Div, Op::Neg, Op::Relu, Op::Maximum, Op::Eq, Op::Gt, Op::Lt>;
    using Transcendental = Ops<Op::Exp, Op::Log, Op::Sqrt, Op::Rsqrt, Op::Reciprocal, Op::Tanh, Op::Sigmoid>;
    if (fixed(Common{})) return;
    if constexpr (std::is_floating_point_v<T>)
      if (fixed(Transcendental{})) return;
  }
  body([op](T x, T y) { return apply<T>(op, x, y); });
}

class Interpreter {
 public:
  static BufferView dense_copy(DType dt, const Shape& s, const BufferView& in) { return copy_dense(dt, s, in); }
  BufferView eval(const Node& n, const std::vector<BufferView>& args) {
    switch (ir::op_category(n.op)) {
      case ir::Category::Leaf: return constant(n);
      case ir::Category::Unary: return n.op == Op::Cast ? cast(n, args[0]) : unary(n, args[0]);
      case ir::Category::Binary: return binary(n, args[0], args[1]);
      case ir::Category::Compare: return compare(n, args[0], args[1]);
      case ir::Category::Ternary: return where(n, args[0], args[1], args[2]);
      case ir::Category::Reduce: return reduce(n, args[0]);
      case ir::Category::Movement: return movement(n, args[0]);
      case ir::Category::Indexed: return indexed(n, args);
      case ir::Category::Scatter: return scatter_add(n, args[0], args[1]);
      case ir::Category::Contraction:
        switch (n.op) {
          case Op::MatMul: return matmul(n, args[0], args[1]);
          case Op::Attention: case Op::AttentionGrad: return attention(n, args);
          case Op::Conv: case Op::ConvGradInput: case Op::ConvGradWeight: return conv(n, args[0], args[1]);
          TESSEL_IR_CASES_NOT_CONTRACTION break;
        }
        break;
    }
    throw InternalError("ref interpreter: unknown node category");
  }

 private:
  static BufferView constant(const Node& n) {
    // One element with zero strides: a splat costs nothing to materialize.
    BufferView v;
    v.storage = Storage::allocate(dtype_size(n.dtype));
    store_double(n.dtype, static_cast<std::byte*>(v.storage->data()), n.value.f, n.value.i, n.value.is_int);
    v.strides.assign(n.shape.dims.size(), 0);
    return v;
  }

  static BufferView cast(const Node& n, const BufferView& in) {
    BufferView out = host_dense(n.dtype, n.shape);
    DType src = n.args[0]->dtype, dst = n.dtype;
    size_t ss = dtype_size(src), ds = dtype_size(dst);
    StridedLoop<2> loop(n.shape, {&out.strides, &in.strides});
    std::byte* o = out.bytes(dst);
    const std::byte* i = in.bytes(src);
    loop.run([&](auto off, auto st, int64_t len) {
      for (int64_t k = 0; k < len; ++k) {
        const std::byte* p = i + (off[1] + k * st[1]) * static_cast<int64_t>(ss);
        std::byte* q = o + (off[0] + k * st[0]) * static_cast<int64_t>(ds);
        if (is_integral(src) || src == DType::b8) {
          int64_t v = load_as<int64_t>(src, p);
          store_double(dst, q, static_cast<double>(v), v, true);
        } else {
          store_double(dst, q, load_as<double>(src, p), 0, false);
        }
      }
    });
    return out;
  }

  static BufferView unary(const Node& n, const BufferView& in) {
    if (n.dtype != n.args[0]->dtype) return predicate(n, in);
    BufferView out = host_dense(n.dtype, n.shape);
    dispatch(n.dtype, [&](auto tag) {
      using T = decltype(tag);
      T* o = out.ptr<T>();
      const T* a = in.ptr<T>();
      StridedLoop<2> loop(n.shape, {&out.strides, &in.strides});
      with_op<T>(n.op, [&](auto f) {
        loop.run([&](auto off, auto st, int64_t len) {
          T* po = o + off[0];
          const T* pa = a + off[1];
          if (st[1] == 1)
            for (int64_t k = 0; k < len; ++k) po[k] = f(pa[k], T{});
          else
            for (int64_t k = 0; k < len; ++k) po[k] = f(pa[k * st[1]], T{});
        });
      });
    });
    return out;
  }

  // A unary op with a bool result on a number (isnan, isinf).
  static BufferView predicate(const Node& n, const BufferView& in) {
    BufferView out = host_dense(DType::b8, n.shape);
    dispatch(n.args[0]->dtype, [&](auto tag) {
      using T = decltype(tag);
      bool* o = out.ptr<bool>();
      const T* a = in.ptr<T>();
      Op op = n.op;
      StridedLoop<2> loop(n.shape, {&out.strides, &in.strides});
      loop.run([&](auto off, auto st, int64_t len) {
        for (int64_t k = 0; k < len; ++k) o[off[0] + k] = apply<T>(op, a[off[1] + k * st[1]], T{}) != T(0);
      });
    });
    return out;
  }

  static BufferView binary(const Node& n, const BufferView& a, const BufferView& b) {
    BufferView out = host_dense(n.dtype, n.shape);
    dispatch(n.dtype, [&](auto tag) {
      using T = decltype(tag);
      T* o = out.ptr<T>();
      const T* pa = a.ptr<T>();
      const T* pb = b.ptr<T>();
      StridedLoop<3> loop(n.shape, {&out.strides, &a.strides, &b.strides});
      auto body = [&](auto f) {
        loop.run([&](auto off, auto st, int64_t len) {
          T* po = o + off[0];
          const T* x = pa + off[1];
          const T* y = pb + off[2];
          if (st[1] == 1 && st[2] == 1)
            for (int64_t k = 0; k < len; ++k) po[k] = f(x[k], y[k]);
          else if (st[1] == 1 && st[2] == 0)
            for (int64_t k = 0; k < len; ++k) po[k] = f(x[k], y[0]);
          else
            for (int64_t k = 0; k < len; ++k) po[k] = f(x[k * st[1]], y[k * st[2]]);
        });
      };
      with_op<T>(n.op, body);
    });
    return out;
  }

  static BufferView compare(const Node& n, const BufferView& a, const BufferView& b) {
    BufferView out = host_dense(DType::b8, n.shape);
    dispatch(n.args[0]->dtype, [&](auto tag) {
      using T = decltype(tag);
      bool* o = out.ptr<bool>();
      const T* pa = a.ptr<T>();
      const T* pb = b.ptr<T>();
      StridedLoop<3> loop(n.shape, {&out.strides, &a.strides, &b.strides});
      with_op<T>(n.op, [&](auto f) {
        loop.run([&](auto off, auto st, int64_t len) {
          bool* po = o + off[0];
          const T* x = pa + off[1];
          const T* y = pb + off[2];
          if (st[1] == 1 && st[2] == 0)
            for (int64_t k = 0; k < len; ++k) po[k] = f(x[k], y[0]) != T(0);
          else
            for (int64_t k = 0; k < len; ++k) po[k] = f(x[k * st[1]], y[k * st[2]]) != T(0);
        });
      });
    });
    return out;
  }

  static BufferView where(const Node& n, const BufferView& c, const BufferView& a, const BufferView& b) {
    BufferView out = host_dense(n.dtype, n.shape);
    dispatch(n.dtype, [&](auto tag) {
      using T = decltype(tag);
      T* o = out.ptr<T>();
      const bool* pc = c.ptr<bool>();
      const T* pa = a.ptr<T>();
      const T* pb = b.ptr<T>();
      StridedLoop<4> loop(n.shape, {&out.strides, &c.strides, &a.strides, &b.strides});
      loop.run([&](auto off, auto st, int64_t len) {
        T* po = o + off[0];
        const bool* q = pc + off[1];
        const T* x = pa + off[2];
        const T* y = pb + off[3];
        // Both values dense, or one a splat (a ReLU's backward): loops that vectorize.
        if (st[1] == 1 && st[2] == 1 && st[3] == 1)
          for (int64_t k = 0; k < len; ++k) po[k] = q[k] ? x[k] : y[k];
        else if (st[1] == 1 && st[2] == 1 && st[3] == 0)
          for (int64_t k = 0; k < len; ++k) po[k] = q[k] ? x[k] : y[0];
        else if (st[1] == 1 && st[2] == 0 && st[3] == 1)
          for (int64_t k = 0; k < len; ++k) po[k] = q[k] ? x[0] : y[k];
        else
          for (int64_t k = 0; k < len; ++k) po[k] = q[k * st[1]] ? x[k * st[2]] : y[k * st[3]];
      });
    });
    return out;
  }

  static BufferView reduce(const Node& n, const BufferView& in) {
    const Node& x = *n.args[0];
    BufferView out = host_dense(n.dtype, n.shape);
    // Kept axes first (the output's order), reduced axes last.
    Shape kept, red;
    Strides kept_st, red_st;
    for (int64_t d = 0; d < x.shape.rank(); ++d) {
      const std::vector<int64_t>& axes = n.reduce().axes;
      bool is_red = std::find(axes.begin(), axes.end(), d) != axes.end();
      (is_red ? red : kept).dims.push_back(x.shape[d]);
      (is_red ? red_st : kept_st).push_back(in.strides[static_cast<size_t>(d)]);
    }
    Strides out_st = contiguous_strides(kept);
    int64_t count = red.numel();
    dispatch(x.dtype, [&](auto tag) {
      using T = decltype(tag);
      using Acc = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;
      const T* src = in.ptr<T>();
      StridedLoop<2> outer(kept, {&out_st, &kept_st});
      const StridedLoop<1> inner(red, {&red_st});  // the same walk for every output element
      outer.run([&](auto off, auto st, int64_t len) {
        for (int64_t k = 0; k < len; ++k) {
          const T* base = src + off[1] + k * st[1];
          int64_t o = off[0] + k * st[0];
          Acc acc = n.op == Op::Sum || n.op == Op::Mean ? Acc(0) : n.op == Op::Prod ? Acc(1) : static_cast<Acc>(base[0]);
          // Floating sums add into ir::kSumLanes partial sums (ir.h), integer ones in one.
          Acc partial[ir::kSumLanes] = {};
          constexpr int64_t lanes = std::is_floating_point_v<Acc> ? ir::kSumLanes : 1;
          int64_t pos = 0;
          // Sums (most reductions) in a loop of their own: no switch per element.
          if (n.op == Op::Sum || n.op == Op::Mean) {
            inner.run([&](auto ioff, auto ist, int64_t ilen) {
              const T* p = base + ioff[0];
              for (int64_t j = 0; j < ilen; ++j, ++pos) partial[pos % lanes] += static_cast<Acc>(p[j * ist[0]]);
            });
          } else {
            inner.run([&](auto ioff, auto ist, int64_t ilen) {
              for (int64_t j = 0; j < ilen; ++j, ++pos) {
                Acc v = static_cast<Acc>(base[ioff[0] + j * ist[0]]);
                // NaN propagates through max/min; integers are never NaN.
                auto nan = [](Acc a) {
                  if constexpr (std::is_floating_point_v<Acc>) return std::isnan(a);
                  else return false;
                };
                switch (n.op) {
                  case Op::Sum: case Op::Mean: break;  // the loop above
                  case Op::Prod:
                    // Integers wrap on overflow, as torch.prod's int64 product does.
                    if constexpr (std::is_integral_v<Acc>)
                      acc = static_cast<Acc>(static_cast<uint64_t>(acc) * static_cast<uint64_t>(v));
                    else
                      acc *= v;
                    break;
                  case Op::Max: if (v > acc || nan(v)) acc = nan(acc) ? acc : v; break;
                  case Op::Min: if (v < acc || nan(v)) acc = nan(acc) ? acc : v; break;
                  TESSEL_IR_CASES_NOT_REDUCE break;
                }
              }
            });
          }
          if (n.op == Op::Sum || n.op == Op::Mean)
            for (int64_t l = 0; l < lanes; ++l) acc += partial[l];
          if (n.op == Op::Mean) acc = count ? acc / static_cast<Acc>(count) : std::numeric_limits<Acc>::quiet_NaN();
          store_double(n.dtype, out.bytes(n.dtype) + o * static_cast<int64_t>(dtype_size(n.dtype)),
                            static_cast<double>(acc), static_cast<int64_t>(acc), std::is_integral_v<Acc>);
        }
      });
    });
    return out;
  }

  static BufferView copy_dense(DType dt, const Shape& s, const BufferView& in) {
    BufferView out = host_dense(dt, s);
    size_t es = dtype_size(dt);
    StridedLoop<2> loop(s, {&out.strides, &in.strides});
    std::byte* o = out.bytes(dt);
    const std::byte* i = in.bytes(dt);
    loop.run([&](auto off, auto st, int64_t len) {
      if (st[0] == 1 && st[1] == 1) {
        std::memcpy(o + off[0] * static_cast<int64_t>(es), i + off[1] * static_cast<int64_t>(es), static_cast<size_t>(len) * es);
        return;
      }
      for (int64_t k = 0; k < len; ++k)
        std::memcpy(o + (off[0] + k * st[0]) * static_cast<int64_t>(es), i + (off[1] + k * st[1]) * static_cast<int64_t>(es), es);
    });
    return out;
  }

  static BufferView movement(const Node& n, const BufferView& in) {
    if (auto v = ir::movement_view(n, in)) return *v;
    // A reshape no strides express: a dense copy, viewed anew.
    const Node& x = *n.args[0];
    BufferView v = copy_dense(x.dtype, x.shape, in);
    v.strides = contiguous_strides(n.shape);
    return v;
  }

  // Iota, Pad, Cat: element by element over the output's multi-index.
  static BufferView indexed(const Node& n, const std::vector<BufferView>& args) {
    BufferView out = host_dense(n.dtype, n.shape);
    const size_t es = dtype_size(n.dtype);
    const int64_t rank = n.shape.rank(), total = n.numel();
    std::vector<int64_t> idx(static_cast<size_t>(rank), 0);
    std::byte* o = static_cast<std::byte*>(out.storage->data());
    const std::byte* fill = n.op == Op::Pad ? args[1].bytes(n.dtype) : nullptr;  // a scalar
    auto read = [&](size_t a, const std::vector<int64_t>& at) { return element(args[a], at, es); };
    std::vector<int64_t> src(static_cast<size_t>(rank));
    for (int64_t e = 0; e < total; ++e) {
      std::byte* q = o + e * static_cast<int64_t>(es);
      switch (n.op) {
        case Op::Iota: {
          int64_t v = rank == 0 ? 0 : idx[static_cast<size_t>(n.axis())];
          std::memcpy(q, &v, 8);
          break;
        }
        case Op::Pad: {
          bool inside = true;
          for (size_t d = 0; d < src.size(); ++d) {
            src[d] = idx[d] - n.widths().dims[d].before;
            inside = inside && src[d] >= 0 && src[d] < n.args[0]->shape.dims[d];
          }
          std::memcpy(q, inside ? read(0, src) : fill, es);
          break;
        }
        case Op::Cat: {
          const size_t ax = static_cast<size_t>(n.axis());
          src = idx;
          size_t a = 0;
          while (src[ax] >= n.args[a]->shape.dims[ax]) src[ax] -= n.args[a++]->shape.dims[ax];
          std::memcpy(q, read(a, src), es);
          break;
        }
        case Op::Gather: {
          const size_t ax = static_cast<size_t>(n.axis());
          src = idx;
          int64_t at;
          std::memcpy(&at, read_i64(args[1], idx), 8);
          if (at < 0 || at >= n.args[0]->shape.dims[ax])
            throw IndexError(fmt::format("gather: index {} is out of bounds for dim {} of size {}", at, ax,
                                         n.args[0]->shape.dims[ax]));
          src[ax] = at;
          std::memcpy(q, read(0, src), es);
          break;
        }
        TESSEL_IR_CASES_NOT_INDEXED throw InternalError("ref interpreter: not an indexed op");
      }
      for (int64_t d = rank - 1; d >= 0; --d) {  // next multi-index, row-major
        if (++idx[static_cast<size_t>(d)] < n.shape[d]) break;
        idx[static_cast<size_t>(d)] = 0;
      }
    }
    return out;
  }

  // Element `at` (a multi-index) of a view with elements of `es` bytes, by its strides.
  static const std::byte* element(const BufferView& v, const std::vector<int64_t>& at, size_t es) {
    int64_t off = v.offset;
    for (size_t d = 0; d < at.size(); ++d) off += at[d] * v.strides[d];
    return static_cast<const std::byte*>(v.storage->data()) + off * static_cast<int64_t>(es);
  }
  static const std::byte* read_i64(const BufferView& v, const std::vector<int64_t>& at) { return element(v, at, 8); }

  // Zeros, then src's elements added at idx's positions in element order: the
  // same sums in the same order every run (no atomics).
  static BufferView scatter_add(const Node& n, const BufferView& src, const BufferView& index) {
    BufferView out = host_dense(n.dtype, n.shape);
    const size_t ax = static_cast<size_t>(n.axis());
    const Shape& s = n.args[0]->shape;
    dispatch(n.dtype, [&](auto tag) {
      using T = decltype(tag);
      T* o = out.ptr<T>();
      std::fill(o, o + n.numel(), T(0));
      const int64_t rank = s.rank(), total = s.numel();
      std::vector<int64_t> idx(static_cast<size_t>(rank), 0);
      for (int64_t e = 0; e < total; ++e) {
        int64_t at;
        std::memcpy(&at, read_i64(index, idx), 8);
        if (at < 0 || at >= n.shape.dims[ax])
          throw IndexError(fmt::format("scatter_add: index {} is out of bounds for dim {} of size {}", at, ax,
                                       n.shape.dims[ax]));
        int64_t so = src.offset, oo = 0;
        for (size_t d = 0; d < idx.size(); ++d) {
          so += idx[d] * src.strides[d];
          oo += (d == ax ? at : idx[d]) * out.strides[d];
        }
        const T v = static_cast<const T*>(src.storage->data())[so];
        if constexpr (std::is_same_v<T, bool>) o[oo] = o[oo] || v;
        else o[oo] = static_cast<T>(o[oo] + v);
        for (int64_t d = rank - 1; d >= 0; --d) {
          if (++idx[static_cast<size_t>(d)] < s[d]) break;
          idx[static_cast<size_t>(d)] = 0;
        }
      }
    });
    return out;
  }

  // A matrix operand in BLAS form, densified when neither axis is contiguous.
  static gemm::Operand as_blas(DType dt, const Shape& s, const BufferView& in) {
    if (auto op = gemm::operand(s, in)) return *op;
    return {copy_dense(dt, s, in), false, std::max<int64_t>(s.dims.back(), 1)};
  }

  static BufferView matmul(const Node& n, const BufferView& a, const BufferView& b) {
    const Shape& sa = n.args[0]->shape;
    const Shape& sb = n.args[1]->shape;
    size_t r = sa.dims.size();
    int64_t M = sa.dims[r - 2], K = sa.dims[r - 1], N = sb.dims[r - 1];
    BufferView out = host_dense(n.dtype, n.shape);
    Shape batch(std::vector<int64_t>(n.shape.dims.begin(), n.shape.dims.end() - 2));
    Strides bsa(a.strides.begin(), a.strides.end() - 2), bsb(b.strides.begin(), b.strides.end() - 2);
    Strides bso(out.strides.begin(), out.strides.end() - 2);
    gemm::Operand ma = as_blas(n.dtype, sa, a), mb = as_blas(n.dtype, sb, b);
    if (ma.v.storage != a.storage) bsa = Strides(ma.v.strides.begin(), ma.v.strides.end() - 2);
    if (mb.v.storage != b.storage) bsb = Strides(mb.v.strides.begin(), mb.v.strides.end() - 2);
    if (M == 0 || N == 0) return out;
    const size_t es = dtype_size(n.dtype);
    StridedLoop<3> loop(batch, {&bso, &bsa, &bsb});
    loop.run([&](auto off, auto st, int64_t len) {
      for (int64_t k = 0; k < len; ++k) {
        auto* C = static_cast<std::byte*>(out.storage->data()) + (out.offset + off[0] + k * st[0]) * static_cast<int64_t>(es);
        const auto* A = static_cast<const std::byte*>(ma.v.storage->data()) + (ma.v.offset + off[1] + k * st[1]) * static_cast<int64_t>(es);
        const auto* B = static_cast<const std::byte*>(mb.v.storage->data()) + (mb.v.offset + off[2] + k * st[2]) * static_cast<int64_t>(es);
        gemm::rows(n.dtype, ma, mb, A, B, C, M, N, K, 0, M);
      }
    });
    return out;
  }

  // The two attention nodes by direct loops (codegen/ref/attention_loops.h),
  // reading the views in place where their layouts allow.
  static BufferView attention(const Node& n, const std::vector<BufferView>& args) {
    ir::PreparedAttention p = ir::prepare_attention(n, args, [&](size_t i) {
      return copy_dense(n.args[i]->dtype, n.args[i]->shape, args[i]);
    });
    BufferView out = host_dense(n.dtype, n.shape);
    auto run = [&](auto tag) {
      using T = decltype(tag);
      const ir::AttentionOperands<T> a = p.operands<T>();
      if (n.op == Op::Attention) {
        ref::attention_forward(p.geometry, a, out.ptr<T>());
      } else {
        ref::attention_backward(p.geometry, a, p.views[3].ptr<T>(), p.views[4].ptr<T>(), p.layouts.operands[4], out.ptr<T>());
      }
    };
    if (n.dtype == DType::f32) run(float{});
    else if (n.dtype == DType::f64) run(double{});
    else throw InternalError(fmt::format("ref interpreter: a {} attention (builders make f32 or f64 ones)", dtype_name(n.dtype)));
    return out;
  }

  // The three convolution nodes by direct loops over dense copies (f32, f64:
  // builders compute halves in f32).
  static BufferView conv(const Node& n, const BufferView& a, const BufferView& b) {
    const ir::ConvGeometry g = ir::conv_geometry(n);
    auto dense = [](const Node& x, const BufferView& v) {
      return ir::is_contiguous(x.shape, v.strides) ? v : copy_dense(x.dtype, x.shape, v);
    };
    const BufferView da = dense(*n.args[0], a), db = dense(*n.args[1], b);
    BufferView out = host_dense(n.dtype, n.shape);
    auto run = [&](auto tag) {
      using T = decltype(tag);
      const T* pa = da.ptr<T>();
      const T* pb = db.ptr<T>();
      T* po = out.ptr<T>();
      if (n.op == Op::Conv) ref::conv_forward(g, pa, pb, po);
      else if (n.op == Op::ConvGradInput) ref::conv_backward_data(g, pa, pb, po);
      else ref::conv_backward_weights(g, pa, pb, po);
    };
    if (n.dtype == DType::f32) run(float{});
    else if (n.dtype == DType::f64) run(double{});
    else throw InternalError(fmt::format("ref interpreter: a {} convolution (builders make f32 or f64 ones)", dtype_name(n.dtype)));
    return out;
  }
};

class RefBackend final : public Backend {
 public:
  std::string_view name() const override { return "ref"; }

  void realize(const std::vector<ir::NodePtr>& roots, bool keep_grad_values) override {
    detail::count_ref_realization();
    if (verify_enabled()) ir::verify_ir(roots, "builders");
    std::vector<Node*> order = ir::topo_order(roots);
    std::unordered_map<Node*, int> uses;
    for (Node* n : order)
      if (!n->realized())
        for (auto& a : n->args) ++uses[a.get()];
    for (auto& r : roots) ++uses[r.get()];  // roots outlive the walk
    std::unordered_map<Node*, BufferView> values;
    Interpreter interp;
    for (Node* n : order) {
      if (n->realized()) continue;
      std::vector<BufferView> args;
      args.reserve(n->args.size());
      for (auto& a : n->args) args.push_back(a->realized() ? *a->buffer : values.at(a.get()));
      BufferView v = interp.eval(*n, args);
      for (auto& a : n->args)
        if (!a->realized() && --uses[a.get()] == 0) values.erase(a.get());
      // Values backward will read are kept on their nodes, as autograd saves them.
      if (keep_grad_values && n->requires_grad && n->op != Op::Constant && ir::op_category(n->op) != ir::Category::Movement)
        n->buffer = v;
      values[n] = std::move(v);
    }
    for (auto& r : roots) {
      if (r->realized()) continue;
      BufferView v = values.at(r.get());
      // A root is a tensor users may write into: never hand out aliased (0-stride) memory.
      bool aliased = false;
      for (size_t d = 0; d < v.strides.size(); ++d) aliased = aliased || (v.strides[d] == 0 && r->shape.dims[d] > 1);
      if (aliased || (r->op == Op::Constant)) v = Interpreter::dense_copy(r->dtype, r->shape, v);
      r->buffer = std::move(v);
    }
  }
};

}  // namespace

Backend& ref_backend() {
  static RefBackend b;
  return b;
}

// Registered as the lowest-ranked CPU backend: TESSEL_BACKEND=ref picks it,
// and it computes where no compiled CPU backend is built.
namespace {
const BackendRegistration g_registration{{"ref", Device::Kind::cpu, 0, [](int) -> Backend& { return ref_backend(); }}};
}  // namespace
TESSEL_BACKEND_ANCHOR(ref)

}  // namespace tessel
