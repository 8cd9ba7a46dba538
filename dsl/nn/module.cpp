#include "dsl/nn/module.h"

#include <cxxabi.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <unordered_set>

namespace tessel::nn {

namespace {
std::string demangle(const char* name) {
  int status = 0;
  char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string out = status == 0 && d ? d : name;
  std::free(d);
  return out;
}
}  // namespace

void throw_bad_module_cast(const Module& m, const char* wanted) {
  throw ModuleError(fmt::format("module {} is a {}, not a {}; check the index or use is<T>() first", m.path(),
                                m.type_name(), demangle(wanted)));
}

Tensor Module::forward(const Tensor&) {
  throw ModuleError(fmt::format("module {} ({}) has no forward(); override `Tensor forward(const Tensor&)`", path(),
                                type_name_));
}

void Module::check_name(const char* what, const std::string& name) const {
  if (name.empty()) throw ModuleError(fmt::format("{}: the name must not be empty (in {})", what, path()));
  if (name.find('.') != std::string::npos)
    throw ModuleError(fmt::format("{}: name '{}' must not contain '.' (dots separate path levels); in {}", what, name,
                                  path()));
  if (params_.contains(name) || buffers_.contains(name) || children_.contains(name))
    throw ModuleError(fmt::format("{}: '{}' is already registered in {} ({}); choose another name", what, name,
                                  path(), type_name_));
}

Parameter& Module::register_parameter(const std::string& name, Parameter p) {
  check_name("register_parameter", name);
  if (p.defined() && p.impl_ptr()->name.empty()) p.impl_ptr()->name = type_name_ + "." + name;
  return params_.insert(name, std::move(p));
}

Tensor& Module::register_buffer(const std::string& name, Tensor t) {
  check_name("register_buffer", name);
  return buffers_.insert(name, std::move(t));
}

const Tensor& Module::buffer(const std::string& name) const {
  const Tensor* b = buffers_.find(name);
  if (!b) throw ModuleError(fmt::format("{} ({}): no buffer named '{}'", path(), type_name_, name));
  return *b;
}

void Module::add_module(const std::string& name, std::shared_ptr<Module> m) {
  check_name("add_module", name);
  if (!m) throw ModuleError(fmt::format("add_module: module '{}' is null (in {})", name, path()));
  if (!m->parent_ && m.get() != this) {
    m->parent_ = this;
    m->name_in_parent_ = name;
  }
  children_.insert(name, std::move(m));
}

std::string Module::path() const {
  if (!parent_) return root_name_;
  return parent_->path() + "." + name_in_parent_;
}

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  for (auto& [n, m] : children_) out.push_back(m);
  return out;
}

OrderedDict<std::shared_ptr<Module>> Module::named_modules(const std::string& prefix) {
  OrderedDict<std::shared_ptr<Module>> out;
  std::unordered_set<const Module*> seen;
  std::function<void(const std::string&, const std::shared_ptr<Module>&)> walk = [&](const std::string& p,
                                                                                      const std::shared_ptr<Module>& m) {
    if (!seen.insert(m.get()).second) return;
    out.insert(p, m);
    for (auto& [n, c] : m->children_) walk(p.empty() ? n : p + "." + n, c);
  };
  walk(prefix, shared_from_this());
  return out;
}

std::vector<std::shared_ptr<Module>> Module::modules() {
  std::vector<std::shared_ptr<Module>> out;
  for (auto& [n, m] : named_modules()) out.push_back(m);
  return out;
}

OrderedDict<Parameter> Module::named_parameters(bool recurse) const {
  OrderedDict<Parameter> out;
  std::unordered_set<const TensorImpl*> seen;
  std::unordered_set<const Module*> visited;
  std::function<void(const std::string&, const Module&)> walk = [&](const std::string& p, const Module& m) {
    if (!visited.insert(&m).second) return;
    for (auto& [n, prm] : m.params_)
      if (seen.insert(prm.impl()).second) out.insert(p + n, prm);
    if (!recurse) return;
    for (auto& [n, c] : m.children_) walk(p + n + ".", *c);
  };
  walk("", *this);
  return out;
}

std::vector<Parameter> Module::parameters(bool recurse) const {
  std::vector<Parameter> out;
  for (auto& [n, p] : named_parameters(recurse)) out.push_back(p);
  return out;
}

OrderedDict<Tensor> Module::named_buffers(bool recurse) const {
  OrderedDict<Tensor> out;
  std::unordered_set<const TensorImpl*> seen;
  std::function<void(const std::string&, const Module&)> walk = [&](const std::string& p, const Module& m) {
    for (auto& [n, b] : m.buffers_)
      if (seen.insert(b.impl()).second) out.insert(p + n, b);
    if (!recurse) return;
    for (auto& [n, c] : m.children_) walk(p + n + ".", *c);
  };
  walk("", *this);
  return out;
}

std::vector<Tensor> Module::buffers(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [n, b] : named_buffers(recurse)) out.push_back(b);
  return out;
}

void Module::collect_state(const std::string& prefix, OrderedDict<Tensor>& out) const {
  // Values, as PyTorch's state_dict gives them: detached views of the same
  // memory (tied names share it). Uninitialized parameters stay as they are.
  for (auto& [n, p] : params_) out.insert(prefix + n, p.is_initialized() ? p.detach() : Tensor(p));
  for (auto& [n, b] : buffers_) out.insert(prefix + n, b);
  for (auto& [n, c] : children_) c->collect_state(prefix + n + ".", out);
}

OrderedDict<Tensor> Module::state_dict() const {
  OrderedDict<Tensor> out;
  collect_state("", out);
  return out;
}

void Module::materialize_for_load(const std::string& name, const Tensor& value) {
  throw CheckpointError(fmt::format("{}: parameter '{}' is uninitialized and {} cannot infer it from a checkpoint",
                                    path(), name, type_name_));
}

LoadResult Module::load_state_dict(const OrderedDict<Tensor>& dict, bool strict) {
  LoadResult r;
  // Every (owner, local name) slot, in state_dict order.
  struct Slot {
    Module* owner;
    std::string local;
    bool is_param;
  };
  std::vector<std::pair<std::string, Slot>> slots;
  std::function<void(const std::string&, Module&)> walk = [&](const std::string& p, Module& m) {
    for (auto& [n, prm] : m.params_) slots.push_back({p + n, {&m, n, true}});
    for (auto& [n, b] : m.buffers_) slots.push_back({p + n, {&m, n, false}});
    for (auto& [n, c] : m.children_) walk(p + n + ".", *c);
  };
  walk("", *this);
  std::unordered_set<std::string> known;
  for (auto& [key, slot] : slots) {
    known.insert(key);
    const Tensor* v = dict.find(key);
    if (!v) {
      r.missing_keys.push_back(key);
      continue;
    }
    if (slot.is_param) {
      Parameter& p = const_cast<Parameter&>(*slot.owner->params_.find(slot.local));
      if (!p.is_initialized()) slot.owner->materialize_for_load(slot.local, *v);
      if (!p.is_initialized()) {  // a lazy layer whose shape-giving key is missing
        r.mismatched_keys.push_back(fmt::format("{}: not loaded, {} is still lazy (the key that gives its shape is "
                                                "missing)",
                                                key, slot.owner->path()));
        continue;
      }
      if (!(p.shape() == v->shape())) {
        r.mismatched_keys.push_back(fmt::format("{}: expected {}, got {}", key, p.shape().str(), v->shape().str()));
        continue;
      }
      NoGradGuard g;
      p.data().copy_(*v);
    } else {
      const Tensor& b = *slot.owner->buffers_.find(slot.local);
      if (!(b.shape() == v->shape())) {
        r.mismatched_keys.push_back(fmt::format("{}: expected {}, got {}", key, b.shape().str(), v->shape().str()));
        continue;
      }
      b.copy_(*v);
    }
  }
  for (auto& [key, v] : dict)
    if (!known.count(key)) r.unexpected_keys.push_back(key);
  if (strict && (!r.missing_keys.empty() || !r.unexpected_keys.empty() || !r.mismatched_keys.empty())) {
    std::string msg = fmt::format("load_state_dict into {} ({}) failed:", path(), type_name_);
    if (!r.missing_keys.empty()) msg += fmt::format("\n  missing keys: {}", fmt::join(r.missing_keys, ", "));
    if (!r.unexpected_keys.empty()) msg += fmt::format("\n  unexpected keys: {}", fmt::join(r.unexpected_keys, ", "));
    if (!r.mismatched_keys.empty()) msg += fmt::format("\n  shape mismatches: {}", fmt::join(r.mismatched_keys, "; "));
    msg += "\n  (build the same architecture in code, or pass strict=false to load what fits)";
    throw CheckpointError(msg);
  }
  return r;
}

Module& Module::apply(const std::function<void(Module&)>& fn) {
  for (auto& [n, c] : children_) c->apply(fn);
  fn(*this);
  return *this;
}

Module& Module::apply_init(const Tensor& example, const std::function<void(Module&)>& init) {
  {
    NoGradGuard g;
    forward(example);
  }
  if (init) apply(init);
  return *this;
}

Module& Module::to(Device d) {
  for (auto& m : modules()) {
    for (auto& [n, p] : m->params_) {
      if (!p.defined()) continue;
      if (!p.is_initialized()) p.move_uninitialized(d);
      else if (!(p.device() == d)) p.set_value(p.data().to(d));
    }
    for (auto& [n, b] : m->buffers_)
      if (b.defined() && !(b.device() == d)) b = b.to(d);
  }
  return *this;
}

Module& Module::train(bool on) {
  for (auto& m : modules()) m->training_ = on;
  return *this;
}

void Module::zero_grad() {
  for (auto& p : parameters())
    if (p.defined()) p.set_grad(Tensor());
}

std::string Module::repr_indented(int indent) const {
  std::string head = type_name_ + "(" + extra_repr();
  if (children_.empty()) return head + ")";
  std::string pad(static_cast<size_t>(indent + 2), ' ');
  std::string out = head + "\n";
  for (auto& [n, c] : children_) out += fmt::format("{}({}): {}\n", pad, n, c->repr_indented(indent + 2));
  return out + std::string(static_cast<size_t>(indent), ' ') + ")";
}

std::string Module::repr() const { return repr_indented(0); }

}  // namespace tessel::nn
