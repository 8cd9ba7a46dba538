#include "dsl/nn/module_dict.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace tessel::nn {

ModulePtr ModuleDictImpl::at(const std::string& name) const {
  auto kids = named_children();
  if (const auto* m = kids.find(name)) return *m;
  throw IndexError(fmt::format("{}: no module named '{}' in this ModuleDict; its keys are [{}]", path(), name,
                               fmt::join(keys_, ", ")));
}

bool ModuleDictImpl::contains(const std::string& name) const { return named_children().contains(name); }

std::vector<std::pair<std::string, ModulePtr>> ModuleDictImpl::items() const {
  std::vector<std::pair<std::string, ModulePtr>> out;
  auto kids = named_children();
  for (auto& k : keys_) out.emplace_back(k, *kids.find(k));
  return out;
}

Tensor ModuleDictImpl::forward(const Tensor&) {
  throw ModuleError(fmt::format("{} is a ModuleDict, which has no forward(); pick a module by name and call it: "
                                "dict->at(\"name\")(x)",
                                path()));
}

}  // namespace tessel::nn
