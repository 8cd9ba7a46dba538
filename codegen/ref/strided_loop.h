// N-d iteration over K operands that share one shape but not strides.
// Adjacent axes that are contiguous for every operand are merged first, so a
// dense elementwise op becomes one flat loop that the compiler vectorizes.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "runtime/shape.h"

namespace tessel::ref {

template <size_t K>
struct StridedLoop {
  std::vector<int64_t> dims;                  // merged extents
  std::array<std::vector<int64_t>, K> strides;  // per operand, in elements

  StridedLoop(const Shape& shape, const std::array<const Strides*, K>& in) {
    // Drop size-1 axes, then merge axis i into i+1 when every operand steps
    // over axis i exactly as far as axis i+1 spans.
    for (size_t d = 0; d < shape.dims.size(); ++d) {
      if (shape.dims[d] == 1) continue;
      bool merge = !dims.empty();
      for (size_t k = 0; k < K && merge; ++k)
        merge = strides[k].back() == (*in[k])[d] * shape.dims[d];
      if (merge) {
        dims.back() *= shape.dims[d];
        for (size_t k = 0; k < K; ++k) strides[k].back() = (*in[k])[d];
      } else {
        dims.push_back(shape.dims[d]);
        for (size_t k = 0; k < K; ++k) strides[k].push_back((*in[k])[d]);
      }
    }
    if (dims.empty()) {
      dims.push_back(shape.numel() == 0 ? 0 : 1);
      for (size_t k = 0; k < K; ++k) strides[k].push_back(1);
    }
  }

  /// Calls row(offsets, inner_strides, n) for each innermost row.
  template <class F>
  void run(F&& row) const {
    const size_t r = dims.size();
    int64_t n = dims[r - 1];
    if (n == 0) return;
    for (size_t d = 0; d + 1 < r; ++d)
      if (dims[d] == 0) return;
    std::array<int64_t, K> inner{}, off{};
    for (size_t k = 0; k < K; ++k) inner[k] = strides[k][r - 1];
    std::vector<int64_t> idx(r, 0);
    while (true) {
      row(off, inner, n);
      int64_t d = static_cast<int64_t>(r) - 2;
      for (; d >= 0; --d) {
        size_t u = static_cast<size_t>(d);
        ++idx[u];
        for (size_t k = 0; k < K; ++k) off[k] += strides[k][u];
        if (idx[u] < dims[u]) break;
        for (size_t k = 0; k < K; ++k) off[k] -= strides[k][u] * dims[u];
        idx[u] = 0;
      }
      if (d < 0) return;
    }
  }
};

}  // namespace tessel::ref
