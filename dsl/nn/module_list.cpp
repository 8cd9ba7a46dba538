#include "dsl/nn/module_list.h"

#include <fmt/format.h>

namespace tessel::nn {

ModuleListImpl& ModuleListImpl::extend(const ModuleListImpl& other) {
  // Copied first: extending a list by itself must not walk a growing list.
  std::vector<ModulePtr> add = other.items_;
  for (auto& m : add) append(m);
  return *this;
}

ModulePtr ModuleListImpl::operator[](int64_t i) const {
  auto n = static_cast<int64_t>(items_.size());
  if (i < -n || i >= n)
    throw IndexError(fmt::format("{}[{}]: index out of range for a ModuleList of {} modules (valid: {} to {})",
                                 path(), i, n, -n, n - 1));
  return items_[static_cast<size_t>(i < 0 ? i + n : i)];
}

Tensor ModuleListImpl::forward(const Tensor&) {
  throw ModuleError(fmt::format("{} is a ModuleList, which has no forward(); loop over it and call each module: "
                                "for (auto& m : *layers) h = m(h);",
                                path()));
}

}  // namespace tessel::nn
