// PyTorch's tensor printing, so output reads the same as the book's:
//   tensor([[1., 2.],
//           [3., 4.]], grad_fn=<MulBackward0>)
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "dsl/tensor.h"

namespace tessel {
namespace {

constexpr int64_t kThreshold = 1000;  // summarize above this many elements
constexpr int64_t kEdgeItems = 3;
constexpr size_t kLineWidth = 80;

struct ElementFormat {
  enum class Mode { boolean, integer, float_int, fixed, sci } mode;
  size_t width = 1;

  std::string raw(double x) const {
    if (std::isnan(x)) return "nan";
    if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
    switch (mode) {
      case Mode::boolean: return x != 0 ? "True" : "False";
      case Mode::integer: return fmt::format("{}", static_cast<int64_t>(x));
      case Mode::float_int: return fmt::format("{:.0f}.", x);
      case Mode::fixed: return fmt::format("{:.4f}", x);
      case Mode::sci: return fmt::format("{:.4e}", x);
    }
    return "?";
  }
  std::string operator()(double x) const {
    std::string s = raw(x);
    return s.size() >= width ? s : std::string(width - s.size(), ' ') + s;
  }
};

// Mirrors torch/_tensor_str.py's _Formatter: for floating dtypes the mode and
// the width come from the finite nonzero values only (zeros, nan and inf are
// padded to that width), and integer-valued floats switch to scientific
// notation on the same range test as other floats.
ElementFormat choose_format(DType dt, const std::vector<double>& v) {
  ElementFormat f{ElementFormat::Mode::fixed};
  if (!is_floating(dt)) {
    f.mode = dt == DType::b8 ? ElementFormat::Mode::boolean : ElementFormat::Mode::integer;
    for (double x : v) f.width = std::max(f.width, f.raw(x).size());
    return f;
  }
  f.mode = ElementFormat::Mode::float_int;
  bool int_mode = true, any = false;
  double max_abs = 0, min_abs = INFINITY;
  for (double x : v) {
    if (!std::isfinite(x) || x == 0) continue;
    any = true;
    if (x != std::ceil(x)) int_mode = false;
    double a = std::fabs(x);
    max_abs = std::max(max_abs, a);
    min_abs = std::min(min_abs, a);
  }
  if (!any) return f;
  bool sci = max_abs / min_abs > 1000.0 || max_abs > 1.0e8 || (!int_mode && min_abs < 1.0e-4);
  if (sci) f.mode = ElementFormat::Mode::sci;
  else if (!int_mode) f.mode = ElementFormat::Mode::fixed;
  for (double x : v)
    if (std::isfinite(x) && x != 0) f.width = std::max(f.width, f.raw(x).size());
  return f;
}

struct Printer {
  const std::vector<double>& v;
  const Shape& shape;
  const Strides strides;
  const ElementFormat& fmt_;
  bool summarize;

  std::string block(size_t dim, int64_t offset, size_t indent) const {
    size_t rank = shape.dims.size();
    int64_t n = shape.dims[dim];
    std::vector<int64_t> idx;
    if (summarize && n > 2 * kEdgeItems) {
      for (int64_t i = 0; i < kEdgeItems; ++i) idx.push_back(i);
      idx.push_back(-1);  // the "..." marker
      for (int64_t i = n - kEdgeItems; i < n; ++i) idx.push_back(i);
    } else {
      for (int64_t i = 0; i < n; ++i) idx.push_back(i);
    }
    std::string out = "[";
    if (dim + 1 == rank) {
      size_t per_line = std::max<size_t>(1, (kLineWidth - indent) / (fmt_.width + 2));
      size_t on_line = 0;
      for (size_t k = 0; k < idx.size(); ++k) {
        if (k) {
          out += ",";
          if (++on_line >= per_line) {
            out += "\n" + std::string(indent + 1, ' ');
            on_line = 0;
          } else {
            out += " ";
          }
        }
        // PyTorch's _vector_str marks the gap with " ..." (two spaces after the comma).
        out += idx[k] < 0 ? " ..." : fmt_(v[static_cast<size_t>(offset + idx[k] * strides[dim])]);
      }
    } else {
      std::string sep = "," + std::string(rank - dim - 1, '\n') + std::string(indent + 1, ' ');
      for (size_t k = 0; k < idx.size(); ++k) {
        if (k) out += sep;
        out += idx[k] < 0 ? "..." : block(dim + 1, offset + idx[k] * strides[dim], indent + 1);
      }
    }
    return out + "]";
  }
};

bool default_dtype(DType t) { return t == DType::f32 || t == DType::i64 || t == DType::b8; }

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  if (impl_->kind == TensorImpl::Kind::uninitialized_parameter || (!impl_->node && !impl_->deferred)) return "<UninitializedParameter>";
  std::string head = impl_->kind == TensorImpl::Kind::parameter ? "Parameter containing:\ntensor(" : "tensor(";
  size_t indent = 7;  // strlen("tensor(")
  std::vector<double> vals = to_vector<double>();
  std::string body;
  std::vector<std::string> suffix;
  if (numel() == 0) {
    body = "[]";
    if (dim() != 1) {
      std::string dims;
      for (int64_t i = 0; i < dim(); ++i) dims += fmt::format("{}{}", i ? ", " : "", shape()[i]);
      suffix.push_back(fmt::format("size=({}{})", dims, dim() == 1 ? "," : ""));
    }
  } else {
    bool summarize = numel() > kThreshold;
    std::vector<double> shown;
    if (summarize) {
      // Width and mode come from the printed elements only, as in PyTorch.
      Strides st = contiguous_strides(shape());
      std::vector<int64_t> idx(static_cast<size_t>(dim()), 0);
      for (int64_t k = 0; k < numel(); ++k) {
        bool edge = true;
        for (size_t i = 0; i < idx.size(); ++i)
          edge = edge && (shape().dims[i] <= 2 * kEdgeItems || idx[i] < kEdgeItems ||
                          idx[i] >= shape().dims[i] - kEdgeItems);
        if (edge) shown.push_back(vals[static_cast<size_t>(k)]);
        for (size_t i = idx.size(); i-- > 0;) {
          if (++idx[i] < shape().dims[i]) break;
          idx[i] = 0;
        }
      }
    }
    ElementFormat f = choose_format(dtype(), summarize ? shown : vals);
    if (dim() == 0) body = f.raw(vals[0]);
    else body = Printer{vals, shape(), contiguous_strides(shape()), f, summarize}.block(0, 0, indent);
  }
  if (!device().is_cpu()) suffix.push_back(fmt::format("device='{}'", device().str()));
  if (!default_dtype(dtype()) || (numel() == 0 && dtype() != DType::f32))
    suffix.push_back(fmt::format("dtype={}", dtype_torch_name(dtype())));
  if (requires_grad() && is_leaf()) suffix.push_back("requires_grad=True");
  else if (requires_grad()) suffix.push_back(fmt::format("grad_fn=<{}>", grad_fn_name()));
  std::string out = head + body;
  for (auto& s : suffix) out += ", " + s;
  return out + ")";
}

}  // namespace tessel
