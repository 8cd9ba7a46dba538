#include "codegen/movement.h"

#include <fmt/format.h>

#include "runtime/errors.h"

namespace tessel::ir {

bool is_contiguous(const Shape& s, const Strides& st) {
  int64_t expect = 1;
  for (size_t i = s.dims.size(); i-- > 0;) {
    if (s.dims[i] != 1 && st[i] != expect) return s.numel() == 0;
    expect *= s.dims[i];
  }
  return true;
}

std::optional<Strides> reshape_strides(const Shape& shape, const Strides& strides, const Shape& target) {
  const auto& od = shape.dims;
  const auto& nd = target.dims;
  if (od.empty()) return Strides(nd.size(), 1);
  if (shape.numel() == 0) return contiguous_strides(target);
  Strides out(nd.size(), 0);
  int64_t view_d = static_cast<int64_t>(nd.size()) - 1;
  int64_t chunk_base = strides.back(), tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(od.size()) - 1; d >= 0; --d) {
    size_t u = static_cast<size_t>(d);
    tensor_numel *= od[u];
    if (d == 0 || (od[u - 1] != 1 && strides[u - 1] != tensor_numel * chunk_base)) {
      while (view_d >= 0 && (view_numel < tensor_numel || nd[static_cast<size_t>(view_d)] == 1)) {
        out[static_cast<size_t>(view_d)] = view_numel * chunk_base;
        view_numel *= nd[static_cast<size_t>(view_d)];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base = strides[u - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

std::optional<BufferView> movement_view(const Node& n, const BufferView& in) {
  const Node& x = *n.args[0];
  BufferView v = in;
  switch (n.op) {
    case Op::Reshape: {
      auto st = reshape_strides(x.shape, in.strides, n.shape);
      if (!st) return std::nullopt;
      v.strides = std::move(*st);
      return v;
    }
    case Op::Permute: {
      const std::vector<int64_t>& order = n.order().order;
      for (size_t i = 0; i < order.size(); ++i) v.strides[i] = in.strides[static_cast<size_t>(order[i])];
      return v;
    }
    case Op::Expand: {
      size_t lead = n.shape.dims.size() - x.shape.dims.size();
      v.strides.assign(n.shape.dims.size(), 0);
      for (size_t i = 0; i < x.shape.dims.size(); ++i) v.strides[lead + i] = x.shape.dims[i] == 1 ? 0 : in.strides[i];
      return v;
    }
    case Op::Slice: {
      const std::vector<SliceDim>& w = n.window().dims;
      for (size_t i = 0; i < v.strides.size(); ++i) {
        v.offset += w[i].start * in.strides[i];
        v.strides[i] = in.strides[i] * w[i].step;
      }
      return v;
    }
    TESSEL_IR_CASES_NOT_MOVEMENT break;
  }
  throw InternalError(fmt::format("movement_view: {} is not a movement op", op_name(n.op)));
}

}  // namespace tessel::ir
