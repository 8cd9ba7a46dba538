// ModuleList: children held in a list, as torch.nn.ModuleList. It registers
// them (parameters(), state_dict() with keys "0.weight", "1.bias", ..., and
// "layers.0.weight" once registered as "layers"), but has no forward(): the
// owner decides how to call them.
//   struct StackImpl : nn::Module {
//     nn::ModuleList layers;
//     StackImpl() : Module("Stack") {
//       for (int i = 0; i < 3; ++i) layers->append(nn::Linear(8, 8));
//       register_module("layers", layers);
//     }
//     Tensor forward(const Tensor& x) override {
//       Tensor h = x;
//       for (auto& layer : *layers) h = layer(h).relu();
//       return h;
//     }
//   };
#pragma once

#include <memory>
#include <vector>

#include "dsl/nn/module.h"

namespace tessel::nn {

class ModuleListImpl : public Module {
 public:
  ModuleListImpl() : Module("ModuleList") {}
  template <class... M>
    requires(sizeof...(M) > 0)
  explicit ModuleListImpl(M&&... modules) : Module("ModuleList") {
    (append(std::forward<M>(modules)), ...);
  }

  /// Appends a module handle, a ModulePtr, a shared_ptr to a module, or a module object.
  template <class M>
  ModuleListImpl& append(M&& m) {
    auto p = detail::to_module_ptr(std::forward<M>(m));
    add_module(std::to_string(items_.size()), p);
    items_.emplace_back(std::move(p));
    return *this;
  }
  /// Appends each module of another list (the same module objects, not copies).
  ModuleListImpl& extend(const ModuleListImpl& other);
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  /// The i-th module; negative i counts from the end, as in Python.
  ModulePtr operator[](int64_t i) const;

  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }

  /// A ModuleList is not a layer: calling it is a ModuleError saying to loop over it.
  Tensor forward(const Tensor& x) override;

 private:
  std::vector<ModulePtr> items_;
};
TESSEL_MODULE(ModuleList);

}  // namespace tessel::nn
