// ModuleDict: children held by name, in insertion order, as
// torch.nn.ModuleDict. State-dict keys are "name.weight", and
// "heads.name.weight" once registered as "heads". No forward(): the owner
// picks which module to call.
//   nn::ModuleDict heads;
//   heads->insert("cls", nn::Linear(16, 10));
//   heads->insert("box", nn::Linear(16, 4));
//   Tensor logits = heads->at("cls")(features);
//   for (auto& [name, m] : heads->items()) ...
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dsl/nn/module.h"

namespace tessel::nn {

class ModuleDictImpl : public Module {
 public:
  ModuleDictImpl() : Module("ModuleDict") {}

  /// Adds a module under `name` (non-empty, no '.', not already present:
  /// ModuleError otherwise). Accepts a handle, a ModulePtr, a shared_ptr or a module object.
  template <class M>
  ModuleDictImpl& insert(const std::string& name, M&& m) {
    auto p = detail::to_module_ptr(std::forward<M>(m));
    add_module(name, p);
    keys_.push_back(name);
    return *this;
  }
  /// The module under `name`; IndexError listing the keys when absent.
  ModulePtr at(const std::string& name) const;
  ModulePtr operator[](const std::string& name) const { return at(name); }
  bool contains(const std::string& name) const;
  size_t size() const { return keys_.size(); }
  bool empty() const { return keys_.empty(); }
  /// Names in insertion order.
  const std::vector<std::string>& keys() const { return keys_; }
  /// (name, module) pairs in insertion order.
  std::vector<std::pair<std::string, ModulePtr>> items() const;

  /// A ModuleDict is not a layer: calling it is a ModuleError saying to pick a module.
  Tensor forward(const Tensor& x) override;

 private:
  std::vector<std::string> keys_;
};
TESSEL_MODULE(ModuleDict);

}  // namespace tessel::nn
