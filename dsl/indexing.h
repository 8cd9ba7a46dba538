// Assembling and masking tensors: pad, cat, stack, split, chunk, tril,
// triu, masked_fill, eye. Each is lazy and fuses with its neighbours: a pad
// or a concatenation reads its inputs at computed positions inside the
// kernel that consumes it (codegen/kernel_ir.h: coordinates and predicated
// loads), and masks compare element indices computed in the kernel, so
// `relu(cat({a, b}, 1)) * 2` is one kernel and `tril(x)` reads no index buffer.
#pragma once

#include <vector>

#include "dsl/tensor.h"

namespace tessel {

/// torch.nn.functional.pad with mode "constant": `widths` holds (before,
/// after) pairs starting from the LAST dim; negative widths remove elements.
///
///   Tensor y = pad(x, {1, 1}, 0.0);    // last dim: one zero on each side
///   Tensor z = pad(img, {1, 1, 2, 2}); // last dim 1 | 1, the one before it 2 | 2
Tensor pad(const Tensor& x, const std::vector<int64_t>& widths, const Scalar& value = 0);

/// torch.cat: the tensors side by side along `dim` (one dtype, one device,
/// every other dim equal).
///
///   Tensor ab = cat({a, b}, 1);   // [2, 3] and [2, 4] -> [2, 7]
Tensor cat(const std::vector<Tensor>& xs, int64_t dim = 0);

/// torch.stack: the tensors (one shape) along a new dim `dim`.
///
///   Tensor s = stack({a, b});     // two [3] -> [2, 3]
Tensor stack(const std::vector<Tensor>& xs, int64_t dim = 0);

/// torch.split: views of `size` elements along `dim` (the last one shorter),
/// or of the given sizes, which must add up to the dim.
///
///   auto [q, k, v] = ... split(qkv, 64, -1) ...   // three [B, T, 64] views
std::vector<Tensor> split(const Tensor& x, int64_t size, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim = 0);

/// torch.chunk: at most `chunks` views of ceil(size / chunks) elements along `dim`.
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);

/// torch.tril / torch.triu over the last two dims: elements with
/// col - row <= diagonal (tril) or >= diagonal (triu) kept, the rest zero.
///
///   Tensor causal = tril(ones({T, T}));
Tensor tril(const Tensor& x, int64_t diagonal = 0);
Tensor triu(const Tensor& x, int64_t diagonal = 0);

/// torch.masked_fill: `value` where the bool `mask` (broadcast to x) is true.
///
///   Tensor s = masked_fill(scores, triu(ones({T, T}, DType::b8), 1), -INFINITY);
Tensor masked_fill(const Tensor& x, const Tensor& mask, const Scalar& value);

/// torch.gather: out[i][j] = x[i][idx[i][j]] for dim 1 (and likewise for
/// any dim); idx is an integer tensor of x's rank. Index values outside the
/// dim are an IndexError naming the value.
///
///   Tensor picked = gather(logits, 1, labels.unsqueeze(1));   // [N, 1]
Tensor gather(const Tensor& x, int64_t dim, const Tensor& idx);

/// torch.index_select: the slices of x at positions `idx` (1-D, integer) along `dim`.
///
///   Tensor rows = index_select(table, 0, tensor({3, 0, 3}));
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& idx);

/// torch.take_along_dim: gather along `dim` after broadcasting x and idx over
/// every other dim; without a dim, both are flattened first.
///
///   Tensor top = take_along_dim(scores, scores.argmax(1, true), 1);   // [N, 1]
Tensor take_along_dim(const Tensor& x, const Tensor& idx, std::optional<int64_t> dim = std::nullopt);

/// torch.flip: the elements in reverse order along each of `dims` (a copy,
/// read through an in-kernel index; its gradient is the flip of the gradient).
///
///   Tensor r = flip(x, {0});
Tensor flip(const Tensor& x, const std::vector<int64_t>& dims);

/// torch.nn.functional.embedding: the rows of `weight` [V, D] at `ids`
/// (any shape of integers in [0, V)), shape ids.shape + [D]. One gather
/// kernel forward; its gradient is a scatter-add into weight's rows.
///
///   Tensor e = embedding(tokens, wte);   // [B, T] -> [B, T, D]
Tensor embedding(const Tensor& ids, const Tensor& weight);

/// torch.eye: ones on the diagonal of an [n, m] matrix (m = n when omitted).
Tensor eye(int64_t n, DType t = DType::f32, Device d = cpu());
Tensor eye(int64_t n, int64_t m, DType t = DType::f32, Device d = cpu());

}  // namespace tessel
