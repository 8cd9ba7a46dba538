// Symbolic models: parameters as compile-time symbols inside one expression.
// Wherever the same symbol appears it is the same parameter; the whole model
// is a type, so its structure (and kernels) are known without running it, and
// a shape pass over that type sizes every parameter from the input shape alone.
//
//   auto mlp = relu(param<"X"> % param<"W1"> + param<"b1">) % param<"W2"> + param<"b2">;
//   auto net = nn::symbolic(mlp, {.widths = {{"W1", 256}, {"W2", 10}}});
//   nn::SymbolicShapes s = net->infer_shapes({2, 20});  // nothing runs: W1 [20, 256] ... output [2, 10]
//   Tensor y = net(rand({2, 20}));       // W1 [20, 256], b1 [256], W2 [256, 10], b2 [10]
//   net->named_parameters().keys();       // W1, b1, W2, b2
//   static_assert(decltype(mlp)::structural_key != 0);
//
// A symbol's shape comes from the operand beside it in a binary op: a matmul
// weight takes its input width from that operand and its output width from
// `widths`; any other parameter (a bias, a scale) takes the operand's last
// dimension. Shape mistakes are ShapeErrors naming the symbol and the operands.
#pragma once

#include <boost/hana/at.hpp>
#include <boost/hana/for_each.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "codegen/builders.h"
#include "dsl/expr.h"
#include "dsl/nn/init.h"
#include "dsl/nn/module.h"

namespace tessel::nn {

struct SymbolicOptions {
  std::string input = "X";                 // the symbol that stands for the model's input
  std::map<std::string, int64_t> widths;   // output widths of matmul weights
};

/// One parameter symbol as the shape pass found it.
struct SymbolShape {
  std::string name;
  Shape shape;
  bool inferred = false;   // sized by this pass (false: the parameter already had this shape)
  double init_bound = 0;   // first values U(-bound, bound), 1/sqrt(fan_in) as torch.nn.Linear; 0: zeros
};

/// What a shape pass derives: the model's output shape and every parameter,
/// in the order a forward pass meets (and initializes) them.
struct SymbolicShapes {
  Shape output;
  std::vector<SymbolShape> params;
  const SymbolShape* find(std::string_view name) const {
    for (const auto& p : params)
      if (p.name == name) return &p;
    return nullptr;
  }
};

namespace detail {
template <class T> struct is_sym : std::false_type {};
template <class N> struct is_sym<expr::Sym<N>> : std::true_type {};

// The symbols of an expression type, in order of first appearance.
template <class T> void collect_symbols(const T*, std::vector<std::string>& out) {
  if constexpr (is_sym<T>::value) {
    std::string n(T::name());
    if (std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
  }
}
template <class Op, class... A> void collect_symbols(const expr::Node<Op, A...>*, std::vector<std::string>& out) {
  (collect_symbols(static_cast<const A*>(nullptr), out), ...);
}
template <class E> std::vector<std::string> symbols_of() {
  std::vector<std::string> out;
  collect_symbols(static_cast<const E*>(nullptr), out);
  return out;
}

// How a binary op is written in messages, and how tightly it binds (C++'s order).
struct Infix {
  std::string_view sym;
  int prec = 0;  // 0: not an operator, written op(a, b)
};
inline Infix infix(std::string_view op) {
  static const std::map<std::string_view, Infix> ops = {
      {"Mul", {"*", 6}}, {"Div", {"/", 6}}, {"MatMul", {"%", 6}}, {"Add", {"+", 5}}, {"Sub", {"-", 5}},
      {"Lt", {"<", 4}},  {"Le", {"<=", 4}}, {"Gt", {">", 4}},     {"Ge", {">=", 4}}, {"Eq", {"==", 3}},
      {"Ne", {"!=", 3}}, {"And", {"&&", 2}}, {"Or", {"||", 1}}};
  auto it = ops.find(op);
  return it == ops.end() ? Infix{} : it->second;
}

// torch.matmul's result shape (builders.cpp's rule, on shapes only).
inline Shape matmul_shape(const Shape& sa, const Shape& sb) {
  if (sa.rank() == 0 || sb.rank() == 0)
    throw ShapeError(fmt::format("matmul: both operands need at least 1 dimension, got shapes {} and {}", sa.str(),
                                 sb.str()));
  std::vector<int64_t> a = sa.dims, b = sb.dims;
  bool squeeze_rows = a.size() == 1, squeeze_cols = b.size() == 1;
  if (squeeze_rows) a.insert(a.begin(), 1);
  if (squeeze_cols) b.push_back(1);
  int64_t k = a[a.size() - 1], k2 = b[b.size() - 2];
  if (k != k2)
    throw ShapeError(fmt::format("matmul: shapes {} and {} cannot be multiplied: inner dimensions {} and {} differ",
                                 sa.str(), sb.str(), k, k2));
  Shape batch = ir::broadcast_shapes("matmul", Shape(std::vector<int64_t>(a.begin(), a.end() - 2)),
                                     Shape(std::vector<int64_t>(b.begin(), b.end() - 2)));
  if (!squeeze_rows) batch.dims.push_back(a[a.size() - 2]);
  if (!squeeze_cols) batch.dims.push_back(b.back());
  return batch;
}

/// The shape pass: walks the expression type as forward lowers it, on shapes
/// instead of tensors. Nothing is evaluated and no buffer is read; captured
/// tensors (Ref leaves) give only their shape.
class ShapePass {
 public:
  /// `where` prefixes every message (the module's path); `known`: symbols whose shape is fixed (the input).
  ShapePass(const SymbolicOptions& opt, std::string where, std::map<std::string, Shape, std::less<>> known)
      : opt_(opt), where_(std::move(where)), known_(std::move(known)) {}

  template <class E>
  SymbolicShapes run(const E& e) {
    std::vector<std::string> syms = symbols_of<E>();
    for (const auto& [name, w] : opt_.widths) {
      if (std::find(syms.begin(), syms.end(), name) == syms.end())
        throw ValueError(fmt::format("{}: widths names '{}', which is not a symbol of the expression (its symbols: {})",
                                     where_, name, fmt::join(syms, ", ")));
      if (w <= 0) throw ValueError(fmt::format("{}: the width of '{}' must be positive, got {}", where_, name, w));
    }
    out_.output = walk(e, nullptr, "", 0).shape;
    return std::move(out_);
  }

 private:
  // What the pass knows of a subtree: its shape and how to name it in messages.
  struct Val {
    Shape shape;
    std::string text;
    int prec = 100;  // of its outermost operator; leaves and calls never need parentheses
  };

  static std::string paren(const Val& v, bool need) { return need ? "(" + v.text + ")" : v.text; }

  template <class T>
  Val walk(const T& leaf, const Val* sib, std::string_view op, int pos) {
    if constexpr (is_sym<T>::value) return resolve(std::string(T::name()), sib, op, pos);
    else if constexpr (std::is_same_v<T, expr::Ref>) return {leaf.t.shape(), "a tensor of shape " + leaf.t.shape().str()};
    else return {Shape{}, fmt::format("{}", leaf.v)};  // a number: rank 0 in broadcasting
  }

  template <class Op, class... A>
  Val walk(const expr::Node<Op, A...>& n, const Val*, std::string_view, int) {
    if constexpr (sizeof...(A) == 2) {
      using L = std::tuple_element_t<0, std::tuple<A...>>;
      const auto& a = hana::at_c<0>(n.args);
      const auto& b = hana::at_c<1>(n.args);
      Val va, vb;
      bool left_unknown = false;
      if constexpr (is_sym<L>::value) left_unknown = !known_.count(L::name());
      if (left_unknown) {  // W % x: the right side fixes W's shape
        vb = walk(b, nullptr, "", 0);
        va = walk(a, &vb, Op::name, 0);
      } else {
        va = walk(a, nullptr, "", 0);
        vb = walk(b, &va, Op::name, 1);
      }
      const Infix in = infix(Op::name);
      std::string text = in.prec == 0 ? fmt::format("{}({}, {})", lower_name(Op::name), va.text, vb.text)
                                      : fmt::format("{} {} {}", paren(va, va.prec < in.prec), in.sym,
                                                    paren(vb, vb.prec <= in.prec));
      return {combine<Op>(text, va.shape, vb.shape), text, in.prec == 0 ? 100 : in.prec};
    } else {
      std::vector<Val> vs;
      hana::for_each(n.args, [&](const auto& x) { vs.push_back(walk(x, nullptr, "", 0)); });
      std::vector<std::string> texts;
      for (auto& v : vs) texts.push_back(v.text);
      std::string text = fmt::format("{}({})", lower_name(Op::name), fmt::join(texts, ", "));
      if constexpr (sizeof...(A) == 1) return {vs[0].shape, text};
      else return {checked(text, [&] {
                     return ir::broadcast_shapes("where", ir::broadcast_shapes("where", vs[0].shape, vs[1].shape),
                                                 vs[2].shape);
                   }),
                   text};
    }
  }

  template <class Op>
  Shape combine(const std::string& text, const Shape& a, const Shape& b) {
    return checked(text, [&] {
      if constexpr (std::is_same_v<Op, expr::MatMul>) return matmul_shape(a, b);
      else return ir::broadcast_shapes(lower_name(Op::name), a, b);
    });
  }

  // Runs a shape rule; its ShapeError gains the expression it happened in.
  template <class F>
  Shape checked(const std::string& text, F&& rule) {
    try {
      return rule();
    } catch (const ShapeError& e) {
      throw ShapeError(fmt::format("{}: in {}: {}", where_, text, e.what()));
    }
  }

  static std::string lower_name(std::string_view s) {
    std::string out(s);
    std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return out;
  }

  Val resolve(const std::string& name, const Val* sib, std::string_view op, int pos) {
    if (auto it = known_.find(name); it != known_.end()) {
      if (name != opt_.input && !out_.find(name)) out_.params.push_back({name, it->second, false, 0});
      return {it->second, name};
    }
    if (!sib)
      throw ShapeError(fmt::format("{}: cannot infer the shape of symbol '{}' ({}): it needs a tensor operand beside "
                                   "it in a binary op",
                                   where_, name, op.empty() ? "unary use" : op));
    if (sib->shape.rank() == 0)
      throw ShapeError(fmt::format("{}: cannot infer the shape of symbol '{}' ({}): the operand beside it, {}, has "
                                   "shape [] and no dimension to size it by",
                                   where_, name, op, sib->text));
    SymbolShape s{name, {}, true, 0};
    if (op == "MatMul") {
      auto w = opt_.widths.find(name);
      if (w == opt_.widths.end())
        throw ShapeError(fmt::format("{}: the output width of '{}' is unknown; pass it as widths = {{{{\"{}\", N}}}}",
                                     where_, name, name));
      const Shape& o = sib->shape;
      int64_t k = pos == 1 ? o[o.rank() - 1] : o[o.rank() >= 2 ? o.rank() - 2 : 0];
      s.shape = pos == 1 ? Shape{k, w->second} : Shape{w->second, k};
      fan_in_ = k;
      s.init_bound = 1.0 / std::sqrt(static_cast<double>(k));
    } else {
      s.shape = Shape{sib->shape[sib->shape.rank() - 1]};
      if (fan_in_ > 0) s.init_bound = 1.0 / std::sqrt(static_cast<double>(fan_in_));
    }
    known_.emplace(name, s.shape);
    out_.params.push_back(s);
    return {s.shape, name};
  }

  const SymbolicOptions& opt_;
  std::string where_;
  std::map<std::string, Shape, std::less<>> known_;
  SymbolicShapes out_;
  int64_t fan_in_ = 0;  // of the last matmul weight sized: the bound of the bias after it
};

}  // namespace detail

/// Shapes of every parameter of `expression` for an input of shape `input`,
/// from the expression type alone (see the file comment). `where` names the
/// model in messages.
template <class E>
SymbolicShapes infer_shapes(const E& expression, const SymbolicOptions& opt, const Shape& input,
                            std::string where = "symbolic model") {
  return detail::ShapePass(opt, std::move(where), {{opt.input, input}}).run(expression);
}

/// The non-template face of every symbolic model (what export code needs).
class SymbolicBase : public Module {
 public:
  using Module::Module;
  /// Every parameter's shape for an input of shape `input` (initialized
  /// parameters keep theirs); evaluates nothing. ShapeError naming the symbol.
  virtual SymbolicShapes infer_shapes(const Shape& input) const = 0;
  /// forward with the symbols in `bound` taking those tensors instead of the
  /// model's parameters (an export traces with stand-ins this way).
  virtual Tensor forward_with(const Tensor& x, const SymbolTable& bound) = 0;
  /// Sizes and initializes every uninitialized parameter for inputs of shape
  /// `input`, without a forward pass.
  virtual void materialize(const Shape& input) = 0;
  virtual const SymbolicOptions& options() const = 0;
  /// The expression's symbols in order of first appearance (the input included).
  virtual std::vector<std::string> symbols() const = 0;
};

template <class E>
class SymbolicImpl : public SymbolicBase {
 public:
  SymbolicImpl(E expression, SymbolicOptions opt) : SymbolicBase("Symbolic"), expr_(std::move(expression)), opt_(std::move(opt)) {
    for (auto& n : detail::symbols_of<E>())
      if (n != opt_.input) register_parameter(n, Parameter::uninitialized());
  }

  Tensor forward(const Tensor& x) override {
    for (auto& [n, p] : own_parameters())
      if (!p.is_initialized()) {
        materialize(x.shape());
        break;
      }
    return forward_with(x, {});
  }

  Tensor forward_with(const Tensor& x, const SymbolTable& bound) override {
    SymbolTable env = bound;
    env.insert_or_assign(opt_.input, x);
    for (auto& [n, p] : own_parameters())
      if (p.is_initialized()) env.emplace(n, p);  // keeps a binding from `bound`
    return expr::lower(expr_, &env);
  }

  SymbolicShapes infer_shapes(const Shape& input) const override {
    std::map<std::string, Shape, std::less<>> known{{opt_.input, input}};
    for (auto& [n, p] : own_parameters())
      if (p.is_initialized()) known.emplace(n, p.shape());
    return detail::ShapePass(opt_, path(), std::move(known)).run(expr_);
  }

  void materialize(const Shape& input) override {
    // Sized and initialized in the order forward meets them, so a seed gives the same values as ever.
    for (const SymbolShape& s : infer_shapes(input).params) {
      if (!s.inferred) continue;
      Parameter p = *own_parameters().find(s.name);  // a handle: the module's parameter itself
      p.materialize(s.shape);
      if (s.init_bound > 0) init::uniform_(p, -s.init_bound, s.init_bound);
      else init::zeros_(p);
    }
  }

  const SymbolicOptions& options() const override { return opt_; }
  std::vector<std::string> symbols() const override { return detail::symbols_of<E>(); }
  const E& expression() const { return expr_; }

  std::string extra_repr() const override { return fmt::format("key={:#x}", E::key); }
  static constexpr uint64_t structural_key = E::key;

 protected:
  // Weights from a checkpoint size a fresh model: no forward, no init.
  void materialize_for_load(const std::string& name, const Tensor& value) override {
    Parameter p = *own_parameters().find(name);
    p.materialize(value.shape());
  }

 private:
  E expr_;
  SymbolicOptions opt_;
};

template <class E>
class Symbolic : public ModuleHolder<SymbolicImpl<E>> {
 public:
  using ModuleHolder<SymbolicImpl<E>>::ModuleHolder;
};

/// A module from a symbolic expression (see the file comment).
template <class E>
Symbolic<E> symbolic(E expression, SymbolicOptions opt = {}) {
  return Symbolic<E>(std::make_shared<SymbolicImpl<E>>(std::move(expression), std::move(opt)));
}

}  // namespace tessel::nn
