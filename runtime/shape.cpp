#include "runtime/shape.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "runtime/errors.h"

namespace tessel {

std::string Shape::str() const { return fmt::format("[{}]", fmt::join(dims, ", ")); }

int64_t checked_numel(const char* what, const Shape& s, int64_t elem_size) {
  int64_t n = 1;
  bool overflow = false, empty = false;
  for (int64_t d : s.dims) {
    if (d < 0) throw ShapeError(fmt::format("{}: negative dimension {} in shape {}", what, d, s.str()));
    empty = empty || d == 0;
    overflow = overflow || __builtin_mul_overflow(n, d, &n);
  }
  if (empty) return 0;  // a zero dimension makes the count 0 however large the others are
  int64_t bytes = 0;
  if (overflow || __builtin_mul_overflow(n, elem_size, &bytes))
    throw ShapeError(fmt::format("{}: shape {} has more elements than fit in memory (its element count or byte size "
                                 "overflows a 64-bit integer)",
                                 what, s.str()));
  return n;
}

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
