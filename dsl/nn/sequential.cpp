#include "dsl/nn/sequential.h"

#include <fmt/format.h>

namespace tessel::nn {

ModulePtr SequentialImpl::operator[](int64_t i) const {
  auto kids = children();
  auto n = static_cast<int64_t>(kids.size());
  if (i < -n || i >= n)
    throw IndexError(fmt::format("{}[{}]: index out of range for a Sequential of {} modules", path(), i, n));
  return kids[static_cast<size_t>(i < 0 ? i + n : i)];
}

Tensor SequentialImpl::forward(const Tensor& x) {
  Tensor h = x;
  for (auto& m : children()) h = m->forward(h);
  return h;
}

}  // namespace tessel::nn
