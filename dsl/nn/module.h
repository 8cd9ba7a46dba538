// nn::Module: the base of every layer and model. A module registers its
// parameters, buffers and child modules by name (insertion-ordered), and
// everything else -- parameters(), state_dict(), apply(), to(device),
// train()/eval(), printing -- walks that registry.
//
//   struct MLPImpl : nn::Module {
//     nn::LazyLinear hidden{256}, out{10};
//     MLPImpl() : Module("MLP") {
//       register_module("hidden", hidden);
//       register_module("out", out);
//     }
//     Tensor forward(const Tensor& x) override { return out(relu(hidden(x))); }
//   };
//   TESSEL_MODULE(MLP);        // MLP is a shared handle to an MLPImpl
//   MLP net;  Tensor y = net(rand({2, 20}));
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "dsl/nn/parameter.h"
#include "dsl/ordered_dict.h"
#include "dsl/tensor.h"

namespace tessel::nn {

class Module;

/// What a non-strict load_state_dict found wrong (all empty when it fit).
struct LoadResult {
  std::vector<std::string> missing_keys;
  std::vector<std::string> unexpected_keys;
  std::vector<std::string> mismatched_keys;  // "name: expected [8, 4], got [8, 5]"
};

class Module : public std::enable_shared_from_this<Module> {
 public:
  explicit Module(std::string type_name = "Module") : type_name_(std::move(type_name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  /// The computation. Containers and layers override it.
  virtual Tensor forward(const Tensor& x);
  Tensor operator()(const Tensor& x) { return forward(x); }

  // --- registration (names: non-empty, no '.', unique within the module) ---
  Parameter& register_parameter(const std::string& name, Parameter p);
  Parameter& register_parameter(const std::string& name, const Tensor& t) { return register_parameter(name, Parameter(t)); }
  Tensor& register_buffer(const std::string& name, Tensor t);
  void add_module(const std::string& name, std::shared_ptr<Module> m);
  template <class H>
  H register_module(const std::string& name, H handle) {
    add_module(name, as_module_ptr(handle));
    return handle;
  }

  // --- the tree ---
  std::vector<std::shared_ptr<Module>> children() const;
  OrderedDict<std::shared_ptr<Module>> named_children() const { return children_; }
  /// This module and every descendant, each once, depth first.
  std::vector<std::shared_ptr<Module>> modules();
  OrderedDict<std::shared_ptr<Module>> named_modules(const std::string& prefix = "");

  // --- state ---
  /// Each parameter once (a tied one under its first name).
  OrderedDict<Parameter> named_parameters(bool recurse = true) const;
  std::vector<Parameter> parameters(bool recurse = true) const;
  OrderedDict<Tensor> named_buffers(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  /// Every parameter and buffer under every name it has (tied names kept), ordered;
  /// parameters as detached views of their memory.
  OrderedDict<Tensor> state_dict() const;
  /// Copies values in by name. Lazy parameters take their shape from the dict.
  /// strict: CheckpointError listing missing, unexpected and mis-shaped keys.
  LoadResult load_state_dict(const OrderedDict<Tensor>& dict, bool strict = true);

  /// Calls fn on every descendant, then on this module (PyTorch's order).
  Module& apply(const std::function<void(Module&)>& fn);
  /// Dry run: a forward pass on `example` (no gradients) so lazy layers learn
  /// their shapes, then apply(init).
  Module& apply_init(const Tensor& example, const std::function<void(Module&)>& init = {});
  /// Moves parameters and buffers to `d` (the same Parameter objects).
  Module& to(Device d);
  Module& train(bool on = true);
  Module& eval() { return train(false); }
  bool is_training() const { return training_; }
  /// Clears every parameter's gradient.
  void zero_grad();

  // --- identity and printing ---
  const std::string& type_name() const { return type_name_; }
  /// Where this module sits: "net", "net.2", "net.hidden".
  std::string path() const;
  void set_name(std::string root_name) { root_name_ = std::move(root_name); }
  /// PyTorch-style tree: Sequential(\n  (0): Linear(in_features=20, ...)\n)
  std::string repr() const;
  virtual std::string extra_repr() const { return {}; }

  /// This module as a T (ModuleError naming both types otherwise).
  template <class T> T& as();
  template <class T> T* as_if() { return dynamic_cast<T*>(this); }
  template <class T> bool is() const { return dynamic_cast<const T*>(this) != nullptr; }

  const OrderedDict<Parameter>& own_parameters() const { return params_; }

 protected:
  void set_type_name(std::string n) { type_name_ = std::move(n); }
  /// The buffer registered as `name`, by its current handle (to() replaces
  /// buffers, so layers look them up instead of keeping copies).
  const Tensor& buffer(const std::string& name) const;
  /// Lazy modules override: give parameter `name` the shape of `value` before loading.
  virtual void materialize_for_load(const std::string& name, const Tensor& value);

 private:
  template <class H> static std::shared_ptr<Module> as_module_ptr(const H& h) {
    if constexpr (std::is_convertible_v<H, std::shared_ptr<Module>>) return h;
    else return h.ptr();
  }
  void check_name(const char* what, const std::string& name) const;
  void collect_state(const std::string& prefix, OrderedDict<Tensor>& out) const;
  std::string repr_indented(int indent) const;

  std::string type_name_;
  std::string root_name_ = "net";
  const Module* parent_ = nullptr;  // first registration; paths in messages follow it
  std::string name_in_parent_;
  bool training_ = true;
  OrderedDict<Parameter> params_;
  OrderedDict<Tensor> buffers_;
  OrderedDict<std::shared_ptr<Module>> children_;
};

/// A shared handle to a module implementation, as LibTorch's ModuleHolder:
/// copies share the module, so one layer used twice is one set of parameters.
template <class Impl>
class ModuleHolder {
 public:
  using ImplType = Impl;
  template <class... A>
    requires(!(sizeof...(A) == 1 && (std::is_base_of_v<ModuleHolder, std::remove_cvref_t<A>> && ...)))
  explicit ModuleHolder(A&&... args) : impl_(std::make_shared<Impl>(std::forward<A>(args)...)) {}
  ModuleHolder(std::shared_ptr<Impl> p) : impl_(std::move(p)) {}

  Impl* operator->() const { return impl_.get(); }
  Impl& operator*() const { return *impl_; }
  Impl* get() const { return impl_.get(); }
  const std::shared_ptr<Impl>& ptr() const { return impl_; }
  Tensor operator()(const Tensor& x) const { return impl_->forward(x); }
  /// Containers index through the handle: net[2].
  template <class I>
    requires requires(Impl& m, I i) { m[i]; }
  decltype(auto) operator[](I i) const {
    return (*impl_)[i];
  }
  bool is_same(const ModuleHolder& o) const { return impl_ == o.impl_; }

 private:
  std::shared_ptr<Impl> impl_;
};

/// Declares `Name` as the shared handle of `Name##Impl`.
#define TESSEL_MODULE(Name)                                  \
  class Name : public ::tessel::nn::ModuleHolder<Name##Impl> { \
   public:                                                   \
    using ::tessel::nn::ModuleHolder<Name##Impl>::ModuleHolder; \
  }

/// Any module, as a container hands it out: net[2]->state_dict(), net[2].as<Linear>().
class ModulePtr {
 public:
  ModulePtr(std::shared_ptr<Module> m) : m_(std::move(m)) {}
  Module* operator->() const { return m_.get(); }
  Module& operator*() const { return *m_; }
  const std::shared_ptr<Module>& ptr() const { return m_; }
  Tensor operator()(const Tensor& x) const { return m_->forward(x); }
  /// The module as T: a handle type (nn::Linear) or an Impl type (nn::LinearImpl).
  template <class T> T as() const;
  template <class T> bool is() const;

 private:
  std::shared_ptr<Module> m_;
};

[[noreturn]] void throw_bad_module_cast(const Module& m, const char* wanted);

namespace detail {
/// What containers accept as a child: a module handle (nn::Linear), a
/// ModulePtr, a shared_ptr to a module, or a module object (moved into a new one).
template <class M>
std::shared_ptr<Module> to_module_ptr(M&& m) {
  using D = std::remove_cvref_t<M>;
  if constexpr (std::is_convertible_v<D, std::shared_ptr<Module>>) return m;
  else if constexpr (std::is_same_v<D, ModulePtr>) return m.ptr();
  else if constexpr (requires { m.ptr(); }) return m.ptr();
  else return std::make_shared<D>(std::forward<M>(m));
}
}  // namespace detail

template <class T> struct is_module_holder : std::false_type {};
template <class T>
  requires requires { typename T::ImplType; }
struct is_module_holder<T> : std::is_base_of<ModuleHolder<typename T::ImplType>, T> {};

template <class T>
T& Module::as() {
  if (auto* p = dynamic_cast<T*>(this)) return *p;
  throw_bad_module_cast(*this, typeid(T).name());
}

template <class T>
T ModulePtr::as() const {
  if constexpr (is_module_holder<T>::value) {
    auto p = std::dynamic_pointer_cast<typename T::ImplType>(m_);
    if (!p) throw_bad_module_cast(*m_, typeid(typename T::ImplType).name());
    return T(p);
  } else {
    static_assert(std::is_pointer_v<T> || std::is_reference_v<T>, "as<T>: T is a handle (nn::Linear), Impl& or Impl*");
    using Impl = std::remove_pointer_t<std::remove_reference_t<T>>;
    auto* p = dynamic_cast<Impl*>(m_.get());
    if (!p) throw_bad_module_cast(*m_, typeid(Impl).name());
    if constexpr (std::is_pointer_v<T>) return p;
    else return *p;
  }
}

template <class T>
bool ModulePtr::is() const {
  if constexpr (is_module_holder<T>::value) return dynamic_cast<typename T::ImplType*>(m_.get()) != nullptr;
  else return dynamic_cast<T*>(m_.get()) != nullptr;
}

}  // namespace tessel::nn
