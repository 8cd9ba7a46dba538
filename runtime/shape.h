// Shapes and strides: small vectors of extents, printed as [2, 10].
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace tessel {

/// Extents of a tensor, outermost first. A 0-d (scalar) tensor has rank 0.
struct Shape {
  std::vector<int64_t> dims;

  Shape() = default;
  Shape(std::initializer_list<int64_t> d) : dims(d) {}
  explicit Shape(std::vector<int64_t> d) : dims(std::move(d)) {}

  int64_t rank() const { return static_cast<int64_t>(dims.size()); }
  int64_t operator[](int64_t i) const { return dims[static_cast<size_t>(i)]; }
  int64_t& operator[](int64_t i) { return dims[static_cast<size_t>(i)]; }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return n;
  }
  auto begin() const { return dims.begin(); }
  auto end() const { return dims.end(); }
  /// "[2, 10]"
  std::string str() const;
  friend bool operator==(const Shape&, const Shape&) = default;
};

using Strides = std::vector<int64_t>;

/// s.numel(), checked: a ShapeError naming `what` and the shape when a
/// dimension is negative or the element count or its size in bytes (at
/// `elem_size` bytes each) does not fit in an int64.
///
///   checked_numel("zeros", Shape{3, int64_t{1} << 62}, 4);   // ShapeError
int64_t checked_numel(const char* what, const Shape& s, int64_t elem_size = 8);

/// Row-major strides for `s`, in elements.
Strides contiguous_strides(const Shape& s);

}  // namespace tessel
