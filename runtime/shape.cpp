#include "runtime/shape.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace tessel {

std::string Shape::str() const { return fmt::format("[{}]", fmt::join(dims, ", ")); }

Strides contiguous_strides(const Shape& s) {
  Strides st(s.dims.size());
  int64_t acc = 1;
  for (size_t i = s.dims.size(); i-- > 0;) {
    st[i] = acc;
    acc *= s.dims[i];
  }
  return st;
}

}  // namespace tessel
