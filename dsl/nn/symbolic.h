// Symbolic models: parameters as compile-time symbols inside one expression.
// Wherever the same symbol appears it is the same parameter; the whole model
// is a type, so its structure (and kernels) are known without running it.
//
//   auto mlp = relu(param<"X"> % param<"W1"> + param<"b1">) % param<"W2"> + param<"b2">;
//   auto net = nn::symbolic(mlp, {.widths = {{"W1", 256}, {"W2", 10}}});
//   Tensor y = net(rand({2, 20}));       // W1 [20, 256], b1 [256], W2 [256, 10], b2 [10]
//   net->named_parameters().keys();       // W1, b1, W2, b2
//   static_assert(decltype(mlp)::structural_key != 0);
#pragma once

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <string>

#include "dsl/expr.h"
#include "dsl/nn/init.h"
#include "dsl/nn/module.h"

namespace tessel::nn {

struct SymbolicOptions {
  std::string input = "X";                 // the symbol that stands for the model's input
  std::map<std::string, int64_t> widths;   // output widths of matmul weights
};

namespace detail {
template <class T> struct is_sym : std::false_type {};
template <class N> struct is_sym<expr::Sym<N>> : std::true_type {};

}  // namespace detail

template <class E>
class SymbolicImpl : public Module {
 public:
  SymbolicImpl(E expression, SymbolicOptions opt) : Module("Symbolic"), expr_(std::move(expression)), opt_(std::move(opt)) {
    std::vector<std::string> names;
    collect(static_cast<const E*>(nullptr), names);
    for (auto& n : names)
      if (n != opt_.input) register_parameter(n, Parameter::uninitialized());
  }

  Tensor forward(const Tensor& x) override {
    SymbolTable env{{opt_.input, x}};
    for (auto& [n, p] : own_parameters())
      if (p.is_initialized()) env.emplace(n, p);
    fan_in_ = 0;
    return as_tensor(lower(expr_, env, nullptr, "", 0));
  }

  std::string extra_repr() const override { return fmt::format("key={:#x}", E::key); }
  static constexpr uint64_t structural_key = E::key;

 private:
  // --- the symbols of the type, in order of first appearance ---
  template <class T> static void collect(const T*, std::vector<std::string>& out) {
    if constexpr (detail::is_sym<T>::value) {
      std::string n(T::name());
      if (std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
    }
  }
  template <class Op, class... A> static void collect(const expr::Node<Op, A...>*, std::vector<std::string>& out) {
    (collect(static_cast<const A*>(nullptr), out), ...);
  }

  static Tensor as_tensor(const Tensor& t) { return t; }

  // --- lowering that gives unbound symbols their shape from their sibling ---
  template <class T>
  auto lower(const T& leaf, SymbolTable& env, const Tensor* sibling, std::string_view op, int pos) {
    if constexpr (detail::is_sym<T>::value) return resolve(std::string(T::name()), env, sibling, op, pos);
    else return expr::lower(leaf, &env);
  }
  template <class Op, class... A>
  Tensor lower(const expr::Node<Op, A...>& n, SymbolTable& env, const Tensor*, std::string_view, int) {
    if constexpr (sizeof...(A) == 2) {
      using L = std::tuple_element_t<0, std::tuple<A...>>;
      const auto& a = hana::at_c<0>(n.args);
      const auto& b = hana::at_c<1>(n.args);
      if constexpr (detail::is_sym<L>::value) {
        if (!env.count(std::string(L::name()))) {  // W % x: the right side fixes W's shape
          auto vb = lower(b, env, nullptr, "", 0);
          const Tensor* sib = nullptr;
          if constexpr (std::is_same_v<decltype(vb), Tensor>) sib = &vb;
          auto va = lower(a, env, sib, Op::name, 0);
          return Op::apply(va, vb);
        }
      }
      auto va = lower(a, env, nullptr, "", 0);
      const Tensor* sib = nullptr;
      if constexpr (std::is_same_v<decltype(va), Tensor>) sib = &va;
      auto vb = lower(b, env, sib, Op::name, 1);
      return Op::apply(va, vb);
    } else {
      return hana::unpack(n.args, [&](const auto&... a) { return Op::apply(lower(a, env, nullptr, "", 0)...); });
    }
  }

  Tensor resolve(const std::string& name, SymbolTable& env, const Tensor* sib, std::string_view op, int pos) {
    if (auto it = env.find(name); it != env.end()) return it->second;
    Parameter& p = const_cast<Parameter&>(*own_parameters().find(name));
    if (!sib || sib->dim() == 0)
      throw ShapeError(fmt::format("{}: cannot infer the shape of symbol '{}' ({}): it needs a tensor operand beside it",
                                   path(), name, op.empty() ? "unary use" : op));
    if (op == "MatMul") {
      auto w = opt_.widths.find(name);
      if (w == opt_.widths.end())
        throw ValueError(fmt::format("{}: the output width of '{}' is unknown; pass it as widths = {{{{\"{}\", N}}}}",
                                     path(), name, name));
      int64_t k = pos == 1 ? sib->size(-1) : sib->size(sib->dim() >= 2 ? -2 : -1);
      p.materialize(pos == 1 ? Shape{k, w->second} : Shape{w->second, k});
      fan_in_ = k;
      double bound = 1.0 / std::sqrt(static_cast<double>(k));
      init::uniform_(p, -bound, bound);
    } else {
      p.materialize(Shape{sib->size(-1)});
      if (fan_in_ > 0) {
        double bound = 1.0 / std::sqrt(static_cast<double>(fan_in_));
        init::uniform_(p, -bound, bound);
      } else {
        init::zeros_(p);
      }
    }
    env.emplace(name, p);
    return p;
  }

  E expr_;
  SymbolicOptions opt_;
  int64_t fan_in_ = 0;
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
