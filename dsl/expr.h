// Expression templates: operators on tensors build an object whose *type* is
// the expression tree, e.g. `relu(x * w + b)` has type
//   Node<Relu, Node<Add, Node<Mul, Ref, Ref>, Ref>>.
// Boost.Hana walks that type to lower it to IR (once, when the value is
// used as a Tensor) and to compute a compile-time structural key, so the
// kernels of a tree are known from its type alone.
//
//   Tensor y = relu(x * w + b);                  // lowered here, still lazy
//   static_assert(decltype(relu(x * w + b))::structural_key != 0);
#pragma once

#include <boost/hana/fold_left.hpp>
#include <boost/hana/for_each.hpp>
#include <boost/hana/string.hpp>
#include <boost/hana/tuple.hpp>
#include <boost/hana/type.hpp>
#include <boost/hana/unpack.hpp>

#include <bit>
#include <concepts>
#include <map>
#include <string>
#include <string_view>
#include <type_traits>

#include "dsl/deferred_expr.h"
#include "dsl/lazy_registry.h"
#include "dsl/leaf_stamp.h"
#include "dsl/tensor.h"

namespace tessel {

namespace hana = boost::hana;

/// Symbol bindings used when a tree holds symbolic parameters (param<"W1">).
using SymbolTable = std::map<std::string, Tensor, std::less<>>;

template <class D> struct ExprBase;

namespace expr {

struct ExprTag {};
template <class T> concept Expression = std::is_base_of_v<ExprTag, std::remove_cvref_t<T>>;
template <class T> concept TensorLike =
    Expression<T> || std::is_base_of_v<Tensor, std::remove_cvref_t<T>>;
template <class T> concept Number = std::is_arithmetic_v<std::remove_cvref_t<T>>;
template <class T> concept Operand = TensorLike<T> || Number<T>;

// FNV-1a, constexpr: the structural key of a tree type.
constexpr uint64_t fnv(std::string_view s, uint64_t h = 1469598103934665603ull) {
  for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return h;
}
constexpr uint64_t mix(uint64_t h, uint64_t k) {
  for (int i = 0; i < 8; ++i) h = (h ^ ((k >> (8 * i)) & 0xff)) * 1099511628211ull;
  return h;
}

/// A tensor leaf (held by handle: the same tensor is the same IR input).
struct Ref : ExprTag {
  Tensor t;
  LeafStamp stamp = LeafStamp::of(t);  // evaluating after a write to t is an error
  static constexpr uint64_t key = fnv("T");
};

/// A number leaf; its dtype follows the tensor it meets (int tensor * 0.5 -> f32).
template <class T>
struct Num : ExprTag {
  T v;
  static constexpr uint64_t key = fnv(std::is_floating_point_v<T> ? "Sf" : (std::is_same_v<T, bool> ? "Sb" : "Si"));
};

/// A symbolic parameter: the same name anywhere in a tree is the same parameter.
template <class Name>
struct Sym : ExprTag {
  static constexpr std::string_view name() { return hana::to<char const*>(Name{}); }
  static constexpr uint64_t key = fnv(hana::to<char const*>(Name{}), fnv("P:"));
};

/// An interior node: `Op` names the operation, `Args` the subtrees.
template <class Op, class... Args>
struct Node : ExprTag, ExprBase<Node<Op, Args...>> {
  hana::tuple<Args...> args;
  explicit Node(Args... a) : args(std::move(a)...) {}
  static constexpr uint64_t key = hana::fold_left(hana::tuple_t<Args...>, fnv(Op::name), [](uint64_t h, auto t) {
    return mix(h, decltype(t)::type::key);
  });
};

// Op tags: a name for the key, and how to apply the op to lowered operands.
#define TESSEL_EXPR_BINARY(Tag, IrOp)                                              \
  struct Tag {                                                                     \
    static constexpr std::string_view name = #Tag;                                 \
    template <class A, class B> static Tensor apply(const A& a, const B& b) {      \
      return binary_op(ir::Op::IrOp, a, b);                                        \
    }                                                                              \
  };
TESSEL_EXPR_BINARY(Add, Add)
TESSEL_EXPR_BINARY(Sub, Sub)
TESSEL_EXPR_BINARY(Mul, Mul)
TESSEL_EXPR_BINARY(Div, Div)
TESSEL_EXPR_BINARY(Pow, Pow)
TESSEL_EXPR_BINARY(Maximum, Maximum)
TESSEL_EXPR_BINARY(Minimum, Minimum)
TESSEL_EXPR_BINARY(Eq, Eq)
TESSEL_EXPR_BINARY(Ne, Ne)
TESSEL_EXPR_BINARY(Lt, Lt)
TESSEL_EXPR_BINARY(Le, Le)
TESSEL_EXPR_BINARY(Gt, Gt)
TESSEL_EXPR_BINARY(Ge, Ge)
TESSEL_EXPR_BINARY(And, And)
TESSEL_EXPR_BINARY(Or, Or)
#undef TESSEL_EXPR_BINARY

#define TESSEL_EXPR_UNARY(Tag, IrOp)                                                        \
  struct Tag {                                                                              \
    static constexpr std::string_view name = #Tag;                                          \
    static Tensor apply(const Tensor& x) { return unary_op(ir::Op::IrOp, x); }              \
  };
TESSEL_EXPR_UNARY(Neg, Neg)
TESSEL_EXPR_UNARY(Abs, Abs)
TESSEL_EXPR_UNARY(Exp, Exp)
TESSEL_EXPR_UNARY(Log, Log)
TESSEL_EXPR_UNARY(Sqrt, Sqrt)
TESSEL_EXPR_UNARY(Tanh, Tanh)
TESSEL_EXPR_UNARY(Sigmoid, Sigmoid)
TESSEL_EXPR_UNARY(Relu, Relu)
TESSEL_EXPR_UNARY(Not, Not)
TESSEL_EXPR_UNARY(Sin, Sin)
TESSEL_EXPR_UNARY(Cos, Cos)
TESSEL_EXPR_UNARY(Erf, Erf)
TESSEL_EXPR_UNARY(Log1p, Log1p)
TESSEL_EXPR_UNARY(Expm1, Expm1)
TESSEL_EXPR_UNARY(Rsqrt, Rsqrt)
TESSEL_EXPR_UNARY(Reciprocal, Reciprocal)
TESSEL_EXPR_UNARY(Sign, Sign)
TESSEL_EXPR_UNARY(Floor, Floor)
TESSEL_EXPR_UNARY(Ceil, Ceil)
TESSEL_EXPR_UNARY(Round, Round)
TESSEL_EXPR_UNARY(IsNan, IsNan)
TESSEL_EXPR_UNARY(IsInf, IsInf)
#undef TESSEL_EXPR_UNARY

struct MatMul {
  static constexpr std::string_view name = "MatMul";
  static Tensor apply(const Tensor& a, const Tensor& b) { return matmul(a, b); }
};
struct Where {
  static constexpr std::string_view name = "Where";
  static Tensor apply(const Tensor& c, const Tensor& a, const Tensor& b) { return where(c, a, b); }
  static Tensor apply(const Tensor& c, const Tensor& a, const Scalar& b) { return where(c, a, scalar_like(b, a)); }
  static Tensor apply(const Tensor& c, const Scalar& a, const Tensor& b) { return where(c, scalar_like(a, b), b); }
  static Tensor apply(const Tensor& c, const Scalar& a, const Scalar& b) {
    return where(c, scalar_like(a, c), scalar_like(b, c));  // typed as on their own: where(c, 1.0, 0) is f32
  }
};

// --- lowering: type tree -> IR (through the same functional ops as Tensor) ---

inline Tensor lower(const Ref& r, const SymbolTable*) {
  r.stamp.check(r.t);
  return r.t;
}
template <class T> Scalar lower(const Num<T>& n, const SymbolTable*) { return Scalar(n.v); }
template <class Name>
Tensor lower(const Sym<Name>& s, const SymbolTable* env) {
  if (env) {
    auto it = env->find(s.name());
    if (it != env->end()) return it->second;
  }
  throw ValueError(fmt::format("symbolic parameter '{}' is not bound: evaluate the expression through a model that "
                               "owns its parameters (nn::Symbolic)",
                               s.name()));
}
template <class Op, class... Args>
Tensor lower(const Node<Op, Args...>& n, const SymbolTable* env) {
  return hana::unpack(n.args, [env](const auto&... a) { return Op::apply(lower(a, env)...); });
}

// --- wrapping operands as leaves ---
template <class T> auto wrap(T&& x) {
  using U = std::remove_cvref_t<T>;
  if constexpr (Expression<U>) return U(std::forward<T>(x));
  else if constexpr (Number<U>) return Num<std::conditional_t<std::is_same_v<U, bool>, bool,
                                                              std::conditional_t<std::is_floating_point_v<U>, double, int64_t>>>{
        {}, static_cast<std::conditional_t<std::is_same_v<U, bool>, bool,
                                           std::conditional_t<std::is_floating_point_v<U>, double, int64_t>>>(x)};
  else return Ref{{}, Tensor(x)};
}
template <class Op, class... A> auto make(A&&... a) {
  return Node<Op, decltype(wrap(std::forward<A>(a)))...>(wrap(std::forward<A>(a))...);
}

// --- leaves, in tree order, for the deferred path (deferred_expr.h) ---
struct LeafList {
  const Tensor* tensors[ExprCache::kMaxLeaves];
  size_t num_tensors = 0;
  int64_t numbers[2 * ExprCache::kMaxLeaves];  // (kind, exact bits) per number
  size_t num_numbers = 0;
  bool deferrable = true;  // false: a symbolic parameter, or too many leaves
};
inline void collect(const Ref& r, LeafList& l) {
  r.stamp.check(r.t);
  if (l.num_tensors == ExprCache::kMaxLeaves) l.deferrable = false;
  else l.tensors[l.num_tensors++] = &r.t;
}
template <class T> void collect(const Num<T>& n, LeafList& l) {
  if (l.num_numbers + 2 > std::size(l.numbers)) {
    l.deferrable = false;
    return;
  }
  if constexpr (std::is_floating_point_v<T>) {
    l.numbers[l.num_numbers++] = 1;
    l.numbers[l.num_numbers++] = std::bit_cast<int64_t>(static_cast<double>(n.v));
  } else {
    l.numbers[l.num_numbers++] = std::is_same_v<T, bool> ? 2 : 3;
    l.numbers[l.num_numbers++] = static_cast<int64_t>(n.v);
  }
}
template <class Name> void collect(const Sym<Name>&, LeafList& l) { l.deferrable = false; }
template <class Op, class... Args> void collect(const Node<Op, Args...>& n, LeafList& l) {
  hana::for_each(n.args, [&](const auto& a) { collect(a, l); });
}

/// A tree whose launches are recorded, kept typed in a tensor until it is
/// evaluated or its IR is needed (deferred_expr.h).
template <class D>
class TypedDeferred final : public ReplayDeferred {
 public:
  TypedDeferred(D e, const ExprCache::Entry& entry, ir::NodePtr* leaves, size_t n)
      : ReplayDeferred(entry, leaves, n), e_(std::move(e)) {}
  ir::NodePtr lower() const override {
    NoGradGuard no_grad;              // deferred only when no gradient was needed
    DeferPendingScope intermediates;  // the tensor holding this is registered already
    return expr::lower(e_, nullptr).node();
  }

 private:
  D e_;
};

/// The compile-time structural key of an expression type.
template <class E> inline constexpr uint64_t structural_key_v = std::remove_cvref_t<E>::key;

template <std::size_t N>
struct fixed_string {
  char chars[N]{};
  constexpr fixed_string(const char (&s)[N]) {
    for (std::size_t i = 0; i < N; ++i) chars[i] = s[i];
  }
};
template <fixed_string S, std::size_t... I>
constexpr auto to_hana_string(std::index_sequence<I...>) {
  return hana::string<S.chars[I]...>{};
}

}  // namespace expr

/// Common Tensor-like methods for every expression (each lowers first).
template <class D>
struct ExprBase {
  Tensor eval(const SymbolTable* env = nullptr) const {
    expr::LeafList l;
    if (!env && deferrable(l)) return defer(static_cast<const D&>(*this), l);
    return lowered(env);
  }
  operator Tensor() const& { return eval(); }
  /// A temporary tree (`Tensor y = relu(a * b + c) * d;`) moves into the tensor.
  operator Tensor() && {
    expr::LeafList l;
    if (deferrable(l)) return defer(std::move(static_cast<D&>(*this)), l);
    return lowered();
  }
  Shape shape() const { return lowered().shape(); }
  DType dtype() const { return lowered().dtype(); }
  template <class T = double> T item() const { return eval().template item<T>(); }
  explicit operator bool() const { return static_cast<bool>(eval()); }
  int64_t dim() const { return lowered().dim(); }
  int64_t size(int64_t d) const { return lowered().size(d); }
  int64_t numel() const { return lowered().numel(); }
  Device device() const { return lowered().device(); }
  bool requires_grad() const { return lowered().requires_grad(); }
  template <class T> std::vector<T> to_vector() const { return eval().template to_vector<T>(); }
  void backward(const Tensor& gradient = Tensor()) const { lowered().backward(gradient); }

  // Every Tensor op, as on the tensor the expression lowers to (lazy IR:
  // `relu(x * w + b).sum({1})` is one tree).
  Tensor reshape(std::vector<int64_t> s) const { return lowered().reshape(std::move(s)); }
  Tensor view(std::vector<int64_t> s) const { return lowered().view(std::move(s)); }
  Tensor flatten(int64_t start = 0, int64_t end = -1) const { return lowered().flatten(start, end); }
  Tensor transpose(int64_t d0, int64_t d1) const { return lowered().transpose(d0, d1); }
  Tensor t() const { return lowered().t(); }
  Tensor permute(std::vector<int64_t> order) const { return lowered().permute(std::move(order)); }
  Tensor unsqueeze(int64_t d) const { return lowered().unsqueeze(d); }
  Tensor squeeze(int64_t d) const { return lowered().squeeze(d); }
  Tensor expand(std::vector<int64_t> s) const { return lowered().expand(std::move(s)); }
  Tensor select(int64_t d, int64_t i) const { return lowered().select(d, i); }
  Tensor operator[](int64_t i) const { return lowered()[i]; }
  Tensor slice(int64_t d, int64_t start, int64_t end, int64_t step = 1) const {
    return lowered().slice(d, start, end, step);
  }
  Tensor narrow(int64_t d, int64_t start, int64_t length) const { return lowered().narrow(d, start, length); }
  Tensor contiguous() const { return lowered().contiguous(); }
  Tensor clone() const { return lowered().clone(); }
  Tensor detach() const { return lowered().detach(); }
  Tensor to(DType t) const { return lowered().to(t); }
  Tensor to(Device d) const { return lowered().to(d); }
  Tensor abs() const { return lowered().abs(); }
  Tensor neg() const { return lowered().neg(); }
  Tensor exp() const { return lowered().exp(); }
  Tensor log() const { return lowered().log(); }
  Tensor sqrt() const { return lowered().sqrt(); }
  Tensor tanh() const { return lowered().tanh(); }
  Tensor sigmoid() const { return lowered().sigmoid(); }
  Tensor relu() const { return lowered().relu(); }
  Tensor sin() const { return lowered().sin(); }
  Tensor cos() const { return lowered().cos(); }
  Tensor erf() const { return lowered().erf(); }
  Tensor log1p() const { return lowered().log1p(); }
  Tensor expm1() const { return lowered().expm1(); }
  Tensor rsqrt() const { return lowered().rsqrt(); }
  Tensor reciprocal() const { return lowered().reciprocal(); }
  Tensor sign() const { return lowered().sign(); }
  Tensor floor() const { return lowered().floor(); }
  Tensor ceil() const { return lowered().ceil(); }
  Tensor round() const { return lowered().round(); }
  Tensor isnan() const { return lowered().isnan(); }
  Tensor isinf() const { return lowered().isinf(); }
  Tensor clamp(std::optional<Scalar> min, std::optional<Scalar> max = std::nullopt) const {
    return lowered().clamp(std::move(min), std::move(max));
  }
  Tensor pow(const Scalar& e) const { return lowered().pow(e); }
  Tensor pow(const Tensor& e) const { return lowered().pow(e); }
  Tensor matmul(const Tensor& other) const { return lowered().matmul(other); }
  Tensor sum() const { return lowered().sum(); }
  Tensor sum(std::vector<int64_t> dims, bool keepdim = false) const { return lowered().sum(std::move(dims), keepdim); }
  Tensor mean() const { return lowered().mean(); }
  Tensor mean(std::vector<int64_t> dims, bool keepdim = false) const { return lowered().mean(std::move(dims), keepdim); }
  Tensor max() const { return lowered().max(); }
  Tensor max(int64_t d, bool keepdim = false) const { return lowered().max(d, keepdim); }
  Tensor min() const { return lowered().min(); }
  Tensor min(int64_t d, bool keepdim = false) const { return lowered().min(d, keepdim); }
  Tensor argmax() const { return lowered().argmax(); }
  Tensor argmax(int64_t d, bool keepdim = false) const { return lowered().argmax(d, keepdim); }
  Tensor prod() const { return lowered().prod(); }
  Tensor prod(int64_t d, bool keepdim = false) const { return lowered().prod(d, keepdim); }
  Tensor all() const { return lowered().all(); }
  Tensor all(int64_t d, bool keepdim = false) const { return lowered().all(d, keepdim); }
  Tensor any() const { return lowered().any(); }
  Tensor any(int64_t d, bool keepdim = false) const { return lowered().any(d, keepdim); }
  std::string str() const { return eval().str(); }
  static constexpr uint64_t structural_key = D::key;

 private:
  // The tree as IR (lazy), for uses that build more IR on it.
  Tensor lowered(const SymbolTable* env = nullptr) const { return lower_tree(static_cast<const D&>(*this), env); }

  // Realized CPU leaves, no gradient, no symbols: may stay typed (deferred_expr.h).
  // Fills `l` with the tree's leaves (they point into *this).
  bool deferrable(expr::LeafList& l) const {
    expr::collect(static_cast<const D&>(*this), l);
    if (!l.deferrable || l.num_tensors == 0) return false;
    const bool grad = grad_enabled();
    for (size_t i = 0; i < l.num_tensors; ++i) {
      const TensorImpl* t = l.tensors[i]->impl_ptr().get();
      // (An undefined or uninitialized leaf takes the IR path, which says what is wrong.)
      if (!t || t->kind == TensorImpl::Kind::uninitialized_parameter || !t->device.is_cpu() || !t->node ||
          !t->node->realized() || (grad && t->node->requires_grad))
        return false;
    }
    return true;
  }
  static ExprCache& cache() {
    static ExprCache c;  // one per expression type
    return c;
  }
  // Leaves realized and no gradient: a cached signature keeps the tree typed;
  // a miss builds the IR now and records its launches when evaluated.
  // `l`: the leaves deferrable() found in `tree` (read before `tree` moves).
  template <class E> static Tensor defer(E&& tree, const expr::LeafList& l) {
    thread_local std::vector<int64_t> sig;
    std::span<const Tensor* const> tensors(l.tensors, l.num_tensors);
    if (!ExprCache::signature(tensors, {l.numbers, l.num_numbers}, sig)) return lower_tree(tree);
    if (const ExprCache::Entry* e = cache().find(sig)) {
      if (!e->replay) return lower_tree(tree);
      ir::NodePtr nodes[ExprCache::kMaxLeaves];
      for (size_t i = 0; i < l.num_tensors; ++i) nodes[i] = l.tensors[i]->node();
      auto impl = std::make_shared<TensorImpl>();
      impl->device = cpu();
      impl->deferred = std::make_shared<const expr::TypedDeferred<D>>(std::forward<E>(tree), *e, nodes, l.num_tensors);
      register_pending(impl);
      return Tensor(std::move(impl));
    }
    if (cache().full()) return lower_tree(tree);
    return cache().recording(sig, lower_tree(tree), tensors);
  }
  static Tensor lower_tree(const D& tree, const SymbolTable* env = nullptr) {
    Tensor t;
    {
      DeferPendingScope intermediates;  // nothing but the root escapes the expression
      t = expr::lower(tree, env);
    }
    register_if_lazy(t.impl_ptr());
    return t;
  }
};

/// A symbolic parameter usable inside expressions: relu(x % param<"W1"> + param<"b1">).
template <expr::fixed_string S>
inline constexpr expr::Sym<decltype(expr::to_hana_string<S>(std::make_index_sequence<sizeof(S.chars) - 1>{}))> param{};

// --- operators (found by ADL through ExprBase and Tensor) ---
#define TESSEL_EXPR_OPERATOR(sym, Tag)                                                    \
  template <expr::Operand A, expr::Operand B>                                             \
    requires(expr::TensorLike<A> || expr::TensorLike<B>)                                  \
  auto operator sym(A&& a, B&& b) {                                                       \
    return expr::make<expr::Tag>(std::forward<A>(a), std::forward<B>(b));                 \
  }
TESSEL_EXPR_OPERATOR(+, Add)
TESSEL_EXPR_OPERATOR(-, Sub)
TESSEL_EXPR_OPERATOR(*, Mul)
TESSEL_EXPR_OPERATOR(/, Div)
TESSEL_EXPR_OPERATOR(==, Eq)
TESSEL_EXPR_OPERATOR(!=, Ne)
TESSEL_EXPR_OPERATOR(<, Lt)
TESSEL_EXPR_OPERATOR(<=, Le)
TESSEL_EXPR_OPERATOR(>, Gt)
TESSEL_EXPR_OPERATOR(>=, Ge)
TESSEL_EXPR_OPERATOR(&&, And)
TESSEL_EXPR_OPERATOR(||, Or)
/// Matrix product, as Python's @: x % W.
TESSEL_EXPR_OPERATOR(%, MatMul)
#undef TESSEL_EXPR_OPERATOR

template <expr::TensorLike A> auto operator-(A&& a) { return expr::make<expr::Neg>(std::forward<A>(a)); }
template <expr::TensorLike A> auto operator!(A&& a) { return expr::make<expr::Not>(std::forward<A>(a)); }

#define TESSEL_EXPR_FUNCTION(fn, Tag)                                                     \
  template <expr::TensorLike A> auto fn(A&& a) { return expr::make<expr::Tag>(std::forward<A>(a)); }
TESSEL_EXPR_FUNCTION(relu, Relu)
TESSEL_EXPR_FUNCTION(exp, Exp)
TESSEL_EXPR_FUNCTION(log, Log)
TESSEL_EXPR_FUNCTION(sqrt, Sqrt)
TESSEL_EXPR_FUNCTION(tanh, Tanh)
TESSEL_EXPR_FUNCTION(sigmoid, Sigmoid)
TESSEL_EXPR_FUNCTION(abs, Abs)
TESSEL_EXPR_FUNCTION(sin, Sin)
TESSEL_EXPR_FUNCTION(cos, Cos)
TESSEL_EXPR_FUNCTION(erf, Erf)
TESSEL_EXPR_FUNCTION(log1p, Log1p)
TESSEL_EXPR_FUNCTION(expm1, Expm1)
TESSEL_EXPR_FUNCTION(rsqrt, Rsqrt)
TESSEL_EXPR_FUNCTION(reciprocal, Reciprocal)
TESSEL_EXPR_FUNCTION(sign, Sign)
TESSEL_EXPR_FUNCTION(floor, Floor)
TESSEL_EXPR_FUNCTION(ceil, Ceil)
TESSEL_EXPR_FUNCTION(round, Round)
TESSEL_EXPR_FUNCTION(isnan, IsNan)
TESSEL_EXPR_FUNCTION(isinf, IsInf)
#undef TESSEL_EXPR_FUNCTION

template <expr::Operand A, expr::Operand B>
  requires(expr::TensorLike<A> || expr::TensorLike<B>) && (expr::Expression<A> || expr::Expression<B> || expr::Number<A> || expr::Number<B>)
auto maximum(A&& a, B&& b) { return expr::make<expr::Maximum>(std::forward<A>(a), std::forward<B>(b)); }
template <expr::Operand A, expr::Operand B>
  requires(expr::TensorLike<A> || expr::TensorLike<B>) && (expr::Expression<A> || expr::Expression<B> || expr::Number<A> || expr::Number<B>)
auto minimum(A&& a, B&& b) { return expr::make<expr::Minimum>(std::forward<A>(a), std::forward<B>(b)); }
template <expr::TensorLike A, expr::Operand B>
  requires(expr::Expression<A> || expr::Number<B> || expr::Expression<B>)
auto pow(A&& a, B&& b) { return expr::make<expr::Pow>(std::forward<A>(a), std::forward<B>(b)); }
/// A number raised to tensor powers, as torch.pow(2, x).
template <expr::Number A, expr::TensorLike B>
auto pow(A a, B&& b) { return expr::make<expr::Pow>(a, std::forward<B>(b)); }
template <expr::TensorLike C, expr::Operand A, expr::Operand B>
  requires(expr::Expression<C> || expr::Expression<A> || expr::Expression<B> || expr::Number<A> || expr::Number<B>)
auto where(C&& c, A&& a, B&& b) { return expr::make<expr::Where>(std::forward<C>(c), std::forward<A>(a), std::forward<B>(b)); }
template <expr::TensorLike A, expr::TensorLike B>
  requires(expr::Expression<A> || expr::Expression<B>)
auto matmul(A&& a, B&& b) { return expr::make<expr::MatMul>(std::forward<A>(a), std::forward<B>(b)); }

}  // namespace tessel

template <class E>
  requires tessel::expr::Expression<E>
struct fmt::formatter<E> : fmt::formatter<std::string> {
  auto format(const E& e, fmt::format_context& ctx) const { return fmt::formatter<std::string>::format(e.str(), ctx); }
};
