// Sequential: children applied in order, indexed like a list.
//   nn::Sequential net(nn::LazyLinear(8), nn::ReLU(), nn::LazyLinear(1));
//   Tensor y = net(rand({2, 4}));           // [2, 1]
//   auto sd = net[2]->state_dict();          // weight [1, 8], bias [1]
//   nn::Linear last = net[2].as<nn::Linear>();
#pragma once

#include <memory>
#include <type_traits>

#include "dsl/nn/module.h"

namespace tessel::nn {

class SequentialImpl : public Module {
 public:
  SequentialImpl() : Module("Sequential") {}
  template <class... M>
    requires(sizeof...(M) > 0)
  explicit SequentialImpl(M&&... modules) : Module("Sequential") {
    (push_back(std::forward<M>(modules)), ...);
  }

  /// Appends a module handle, a shared_ptr to a module, or a module object.
  template <class M>
  void push_back(M&& m) {
    add_module(std::to_string(size()), detail::to_module_ptr(std::forward<M>(m)));
  }
  size_t size() const { return children().size(); }
  ModulePtr operator[](int64_t i) const;
  Tensor forward(const Tensor& x) override;

  auto begin() const { return named_children().begin(); }
};
TESSEL_MODULE(Sequential);

}  // namespace tessel::nn
