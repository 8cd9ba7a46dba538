#include "dsl/indexing.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "codegen/backend.h"
#include "codegen/builders.h"
#include "runtime/errors.h"

namespace tessel {
namespace {

Device one_device(std::string_view op, const std::vector<Tensor>& xs) {
  for (size_t i = 1; i < xs.size(); ++i)
    if (!(xs[i].device() == xs[0].device()))
      throw DeviceError(fmt::format("{}: expected all tensors on the same device, but tensor 0 is on {} and tensor {} "
                                    "on {}; move them with .to({})",
                                    op, xs[0].device().str(), i, xs[i].device().str(), xs[0].device().str()));
  return xs[0].device();
}

void check_list(std::string_view op, const std::vector<Tensor>& xs) {
  if (xs.empty()) throw ValueError(fmt::format("{}: expected a non-empty list of tensors", op));
}

// [rows, cols] of the last two dims, as i64 index tensors broadcast to x's shape.
std::pair<Tensor, Tensor> row_col(std::string_view op, const Tensor& x) {
  const Shape& s = x.shape();
  if (s.rank() < 2)
    throw ShapeError(fmt::format("{}: input tensor must have at least 2 dimensions, got shape {}", op, s.str()));
  Tensor rows = Tensor::from_node(ir::iota(s, s.rank() - 2), x.device());
  Tensor cols = Tensor::from_node(ir::iota(s, s.rank() - 1), x.device());
  return {rows, cols};
}

}  // namespace

Tensor pad(const Tensor& x, const std::vector<int64_t>& widths, const Scalar& value) {
  const int64_t rank = x.shape().rank();
  if (widths.size() % 2 != 0)
    throw ValueError(fmt::format("pad: the widths ({}) must come in (before, after) pairs; got {} numbers",
                                 fmt::join(widths, ", "), widths.size()));
  if (static_cast<int64_t>(widths.size()) > 2 * rank)
    throw ValueError(fmt::format("pad: {} widths pad {} dims, but the input has shape {} ({} dims); give at most {} "
                                 "numbers, the last dim's pair first",
                                 widths.size(), widths.size() / 2, x.shape().str(), rank, 2 * rank));
  std::vector<int64_t> before(static_cast<size_t>(rank), 0), after(static_cast<size_t>(rank), 0);
  for (size_t p = 0; 2 * p < widths.size(); ++p) {
    const size_t d = static_cast<size_t>(rank) - 1 - p;  // pairs start from the last dim
    before[d] = widths[2 * p];
    after[d] = widths[2 * p + 1];
  }
  return Tensor::from_node(ir::pad(x.node(), before, after, value.v), x.device());
}

Tensor cat(const std::vector<Tensor>& xs, int64_t dim) {
  check_list("cat", xs);
  Device d = one_device("cat", xs);
  std::vector<ir::NodePtr> nodes;
  for (const Tensor& t : xs) nodes.push_back(t.node());
  return Tensor::from_node(ir::cat(std::move(nodes), dim), d);
}

Tensor stack(const std::vector<Tensor>& xs, int64_t dim) {
  check_list("stack", xs);
  for (size_t i = 1; i < xs.size(); ++i)
    if (xs[i].shape() != xs[0].shape())
      throw ShapeError(fmt::format("stack: expects each tensor to be equal size, but got {} at entry 0 and {} at entry {}",
                                   xs[0].shape().str(), xs[i].shape().str(), i));
  const int64_t r = xs[0].shape().rank() + 1;
  dim = ir::normalize_axis("stack", dim, r, Shape(std::vector<int64_t>(static_cast<size_t>(r), 1)));
  std::vector<Tensor> parts;
  for (const Tensor& t : xs) parts.push_back(t.unsqueeze(dim));
  return cat(parts, dim);
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  dim = ir::normalize_axis("split", dim, x.shape().rank(), x.shape());
  const int64_t n = x.shape()[dim];
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0) throw ValueError(fmt::format("split: sizes ({}) must be non-negative", fmt::join(sizes, ", ")));
    total += s;
  }
  if (total != n)
    throw ValueError(fmt::format("split: sizes ({}) add up to {}, but dim {} of shape {} has {} elements", fmt::join(sizes, ", "),
                                 total, dim, x.shape().str(), n));
  std::vector<Tensor> out;
  int64_t start = 0;
  for (int64_t s : sizes) {
    out.push_back(x.narrow(dim, start, s));
    start += s;
  }
  return out;
}

std::vector<Tensor> split(const Tensor& x, int64_t size, int64_t dim) {
  if (size <= 0) throw ValueError(fmt::format("split: split_size must be positive, got {}", size));
  dim = ir::normalize_axis("split", dim, x.shape().rank(), x.shape());
  const int64_t n = x.shape()[dim];
  std::vector<int64_t> sizes;
  for (int64_t start = 0; start < n; start += size) sizes.push_back(std::min(size, n - start));
  if (sizes.empty()) sizes.push_back(0);  // PyTorch: one empty piece of an empty dim
  return split(x, sizes, dim);
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  if (chunks <= 0) throw ValueError(fmt::format("chunk: number of chunks must be positive, got {}", chunks));
  dim = ir::normalize_axis("chunk", dim, x.shape().rank(), x.shape());
  const int64_t n = x.shape()[dim];
  return split(x, std::max<int64_t>((n + chunks - 1) / chunks, 1), dim);
}

Tensor tril(const Tensor& x, int64_t diagonal) {
  auto [rows, cols] = row_col("tril", x);
  Tensor keep = binary_op(ir::Op::Le, binary_op(ir::Op::Sub, cols, rows), Scalar(diagonal));
  return where(keep, x, zeros({}, x.dtype(), x.device()));
}

Tensor triu(const Tensor& x, int64_t diagonal) {
  auto [rows, cols] = row_col("triu", x);
  Tensor keep = binary_op(ir::Op::Ge, binary_op(ir::Op::Sub, cols, rows), Scalar(diagonal));
  return where(keep, x, zeros({}, x.dtype(), x.device()));
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, const Scalar& value) {
  if (mask.dtype() != DType::b8)
    throw DTypeError(fmt::format("masked_fill: the mask must be a bool tensor, got {}; compare to make one, e.g. m != 0",
                                 dtype_name(mask.dtype())));
  Shape b = ir::broadcast_shapes("masked_fill", x.shape(), mask.shape());
  if (b != x.shape())
    throw ShapeError(fmt::format("masked_fill: the mask's shape {} must broadcast to the input's shape {}",
                                 mask.shape().str(), x.shape().str()));
  return where(mask, full({}, value, x.dtype(), x.device()), x);
}

namespace {
// IndexError naming the first kind of bad value: as PyTorch, an index outside
// [0, size) is an error, never a silent read.
void check_indices(std::string_view op, const Tensor& idx, int64_t size, int64_t dim) {
  if (!is_integral(idx.dtype()))
    throw DTypeError(fmt::format("{}: indices must be an integer tensor, got {}; convert them with .to(DType::i64)", op,
                                 dtype_name(idx.dtype())));
  if (idx.numel() == 0) return;
  auto out_of_range = [&](int64_t bad_value) {
    return IndexError(fmt::format("{}: index {} is out of range for dim {} of size {} (indices must be in [0, {}))", op,
                                  bad_value, dim, size, size));
  };
  // Indices already in host memory (token ids, labels) are scanned in place:
  // no kernel, no sync, so an embedding's forward launches only its gather.
  if (idx.device().is_cpu() && idx.is_realized() && idx.is_contiguous() &&
      (idx.dtype() == DType::i64 || idx.dtype() == DType::i32)) {
    auto scan = [&](const auto* p) {
      int64_t lo = 0, hi = 0;
      for (int64_t i = 0, n = idx.numel(); i < n; ++i) {
        lo = std::min<int64_t>(lo, p[i]);
        hi = std::max<int64_t>(hi, p[i]);
      }
      if (lo < 0) throw out_of_range(lo);
      if (hi >= size) throw out_of_range(hi);
    };
    if (idx.dtype() == DType::i64) scan(idx.buffer().ptr<int64_t>());
    else scan(idx.buffer().ptr<int32_t>());
    return;
  }
  // One fused reduction and one value read; the offending value only on failure.
  Tensor bad = binary_op(ir::Op::Or, binary_op(ir::Op::Lt, idx, Scalar(int64_t{0})),
                         binary_op(ir::Op::Ge, idx, Scalar(size)))
                   .any();
  // A trace computes nothing: its "values" are whatever the allocator handed
  // out, so reading the check there would fail or pass at random. It still
  // realizes the check, so the exported program holds the kernel the real
  // run (which checks) launches.
  if (!backend_for(idx.device()).computes_values()) {
    bad.eval();
    return;
  }
  if (!bad.item<bool>()) return;
  const int64_t lo = idx.min().item<int64_t>(), hi = idx.max().item<int64_t>();
  throw out_of_range(lo < 0 ? lo : hi);
}
}  // namespace

namespace {
// A gather whose errors name `op` (the function the user called).
void check_same_device(std::string_view op, const Tensor& x, const Tensor& idx) {
  if (!(x.device() == idx.device()))
    throw DeviceError(fmt::format("{}: the input is on {} and the index on {}; move the index with .to({})", op,
                                  x.device().str(), idx.device().str(), x.device().str()));
}

Tensor gather_as(std::string_view op, const Tensor& x, int64_t dim, const Tensor& idx) {
  check_same_device(op, x, idx);
  check_indices(op, idx, x.shape()[dim], dim);
  return Tensor::from_node(ir::gather(x.node(), idx.node(), dim), x.device());
}

Tensor index_select_as(std::string_view op, const Tensor& x, int64_t dim, const Tensor& idx) {
  if (idx.shape().rank() != 1)
    throw ShapeError(fmt::format("{}: the index must be 1-D, got shape {}", op, idx.shape().str()));
  dim = ir::normalize_axis(op, dim, x.shape().rank(), x.shape());
  // idx along `dim`, broadcast over x's other dims: a gather with stride-0 reads of idx.
  std::vector<int64_t> view(static_cast<size_t>(x.shape().rank()), 1), full(x.shape().dims);
  view[static_cast<size_t>(dim)] = idx.shape()[0];
  full[static_cast<size_t>(dim)] = idx.shape()[0];
  // Checked before the broadcast, so a host-resident 1-D index is scanned in place once.
  check_same_device(op, x, idx);
  check_indices(op, idx, x.shape()[dim], dim);
  return Tensor::from_node(ir::gather(x.node(), idx.reshape(view).expand(full).node(), dim), x.device());
}
}  // namespace

Tensor gather(const Tensor& x, int64_t dim, const Tensor& idx) {
  if (x.shape().rank() == 0 || idx.shape().rank() != x.shape().rank())
    throw ShapeError(fmt::format("gather: the index (shape {}) must have the input's number of dims (shape {}), at least 1",
                                 idx.shape().str(), x.shape().str()));
  dim = ir::normalize_axis("gather", dim, x.shape().rank(), x.shape());
  return gather_as("gather", x, dim, idx);
}

Tensor take_along_dim(const Tensor& x, const Tensor& idx, std::optional<int64_t> dim) {
  if (is_floating(idx.dtype()) || idx.dtype() == DType::b8)
    throw DTypeError(fmt::format("take_along_dim: the index must be an integer tensor, got {}", dtype_name(idx.dtype())));
  if (!dim) return gather_as("take_along_dim", x.reshape({-1}), 0, idx.reshape({-1}));
  if (x.shape().rank() == 0 || idx.shape().rank() != x.shape().rank())
    throw ShapeError(fmt::format("take_along_dim: the index (shape {}) must have the input's number of dims (shape {}), "
                                 "at least 1", idx.shape().str(), x.shape().str()));
  const int64_t d = ir::normalize_axis("take_along_dim", *dim, x.shape().rank(), x.shape());
  // Broadcast every dim but `d`, as torch does: x keeps its length along d, idx its own.
  std::vector<int64_t> xs(x.shape().dims), is(idx.shape().dims);
  xs[static_cast<size_t>(d)] = 1;
  is[static_cast<size_t>(d)] = 1;
  Shape both = ir::broadcast_shapes("take_along_dim", Shape{xs}, Shape{is});
  std::vector<int64_t> x_to(both.dims), i_to(both.dims);
  x_to[static_cast<size_t>(d)] = x.shape()[d];
  i_to[static_cast<size_t>(d)] = idx.shape()[d];
  return gather_as("take_along_dim", x.expand(x_to), d, idx.expand(i_to));
}

// flip reads x at n-1-i along each flipped dim: a gather by an in-kernel
// descending iota (no host index buffer).
Tensor flip(const Tensor& x, const std::vector<int64_t>& dims) {
  std::vector<bool> seen(static_cast<size_t>(x.shape().rank()), false);
  Tensor y = x;
  for (int64_t raw : dims) {
    int64_t d = ir::normalize_axis("flip", raw, x.shape().rank(), x.shape());
    if (seen[static_cast<size_t>(d)])
      throw ValueError(fmt::format("flip: dim {} appears more than once in the dims", d));
    seen[static_cast<size_t>(d)] = true;
    const int64_t n = x.shape()[d];
    if (n <= 1) continue;
    // n-1-i along d, computed in the kernel and in range by construction (no bounds check to sync on).
    ir::NodePtr rev = ir::binary(ir::Op::Sub, ir::constant(Scalar(n - 1).v, DType::i64), ir::iota(y.shape(), d));
    y = Tensor::from_node(ir::gather(y.node(), rev, d), y.device());
  }
  return y;
}

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& idx) { return index_select_as("index_select", x, dim, idx); }

Tensor embedding(const Tensor& ids, const Tensor& weight) {
  if (weight.shape().rank() != 2)
    throw ShapeError(fmt::format("embedding: the weight must be [num_embeddings, embedding_dim], got shape {}",
                                 weight.shape().str()));
  const int64_t D = weight.shape()[1];
  std::vector<int64_t> out(ids.shape().dims);
  out.push_back(D);
  Tensor flat = ids.reshape({-1});
  return index_select_as("embedding", weight, 0, flat).reshape(out);
}

Tensor eye(int64_t n, int64_t m, DType t, Device d) {
  if (n < 0 || m < 0) throw ValueError(fmt::format("eye: n and m must be non-negative, got {} and {}", n, m));
  Shape s{n, m};
  Tensor rows = Tensor::from_node(ir::iota(s, 0), d), cols = Tensor::from_node(ir::iota(s, 1), d);
  return binary_op(ir::Op::Eq, rows, cols).to(t);
}

Tensor eye(int64_t n, DType t, Device d) { return eye(n, n, t, d); }

}  // namespace tessel
