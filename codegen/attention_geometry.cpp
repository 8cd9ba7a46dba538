#include "codegen/attention_geometry.h"

#include <fmt/format.h>

#include "runtime/errors.h"

namespace tessel::ir {
namespace {

// The mask is the last arg when the attributes say there is one.
bool has_mask(const Node& n) { return n.attention().mask != AttentionMask::None; }

// Whether dims [b, e) of a view collapse into one stride; sets it.
bool collapses(const Shape& s, const Strides& st, int64_t b, int64_t e, int64_t* stride) {
  int64_t st_out = 0, extent = 1;
  bool first = true;
  for (int64_t d = e - 1; d >= b; --d) {
    const int64_t n = s[d];
    if (n == 1) continue;
    if (first) {
      st_out = st[static_cast<size_t>(d)];
      extent = n;
      first = false;
    } else if (st[static_cast<size_t>(d)] != st_out * extent) {
      return false;
    } else {
      extent *= n;
    }
  }
  *stride = st_out;
  return true;
}

}  // namespace

AttentionGeometry attention_geometry(const Node& n) {
  if (n.op != Op::Attention && n.op != Op::AttentionGrad)
    throw InternalError(fmt::format("attention_geometry: a {} node is no attention", op_name(n.op)));
  const AttentionAttrs& a = n.attention();
  const Shape &q = n.args[0]->shape, &k = n.args[1]->shape, &v = n.args[2]->shape;
  const int64_t r = q.rank();
  AttentionGeometry g;
  for (int64_t d = 0; d < r - 2; ++d) g.batch *= q[d];
  g.tq = q[r - 2];
  g.d = q[r - 1];
  g.tk = k[r - 2];
  g.dv = v[r - 1];
  g.scale = a.scale;
  g.causal = a.causal;
  g.mask = a.mask;
  g.dropout_p = a.dropout_p;
  g.seed = a.seed;
  return g;
}

bool AttentionLayouts::any_copy() const {
  for (bool c : dense_copy)
    if (c) return true;
  return false;
}

AttentionLayouts attention_layouts(const Node& n, const std::vector<Strides>& arg_strides) {
  const int64_t r = n.args[0]->shape.rank(), nb = r - 2;
  const size_t nargs = n.args.size();
  if (arg_strides.size() != nargs) throw InternalError("attention_layouts: one stride list per arg expected");
  // The forward value an AttentionGrad reads is the engine's own dense output.
  auto fixed_dense = [&](size_t i) { return n.op == Op::AttentionGrad && i == 3; };
  auto is_mask = [&](size_t i) { return has_mask(n) && i + 1 == nargs; };
  // Try each split of the batch dims into [0, c) and [c, nb); keep the one
  // that reads the most operands in place.
  AttentionLayouts best;
  int best_copies = 1 << 30;
  for (int64_t c = 0; c <= nb; ++c) {
    AttentionLayouts L;
    L.inner = 1;
    for (int64_t d = c; d < nb; ++d) L.inner *= n.args[0]->shape[d];
    int copies = 0;
    for (size_t i = 0; i < nargs; ++i) {
      const Shape& s = n.args[i]->shape;
      const Strides& st = arg_strides[i];
      OperandLayout o;
      bool ok = true;
      if (fixed_dense(i)) {
        o.row = s[r - 1];
        o.inner = s[r - 2] * s[r - 1];
        o.outer = o.inner * L.inner;
      } else {
        ok = collapses(s, st, 0, c, &o.outer) && collapses(s, st, c, nb, &o.inner);
        o.row = s[r - 2] == 1 ? 0 : st[static_cast<size_t>(r - 2)];
        o.col = s[r - 1] == 1 ? 1 : st[static_cast<size_t>(r - 1)];
        // Engines hand rows to BLAS: a contiguous last dim, rows at least a row apart.
        if (!is_mask(i) && (o.col != 1 || (s[r - 2] > 1 && o.row < s[r - 1]))) ok = false;
        if (c == 0) o.outer = 0;  // a single group: only the inner stride moves
        if (c == nb) o.inner = 0;
      }
      if (!ok) {
        ++copies;
        // A dense copy: row-major [batch, rows, cols].
        o.col = 1;
        o.row = s[r - 1];
        o.inner = s[r - 2] * s[r - 1];
        o.outer = o.inner * L.inner;
      }
      L.operands.push_back(o);
      L.dense_copy.push_back(!ok);
    }
    if (copies < best_copies) {
      best_copies = copies;
      best = std::move(L);
    }
  }
  return best;
}

}  // namespace tessel::ir

namespace tessel::ir {

PreparedAttention prepare_attention(const Node& n, std::vector<BufferView> args,
                                    const std::function<BufferView(size_t)>& copy) {
  PreparedAttention p;
  p.geometry = attention_geometry(n);
  auto strides = [&] {
    std::vector<Strides> st;
    for (const BufferView& v : args) st.push_back(v.strides);
    return st;
  };
  p.layouts = attention_layouts(n, strides());
  if (p.layouts.any_copy()) {
    for (size_t i = 0; i < args.size(); ++i)
      if (p.layouts.dense_copy[i]) args[i] = copy(i);
    p.layouts = attention_layouts(n, strides());
    TESSEL_ASSERT("attention layouts", !p.layouts.any_copy());
  }
  p.views = std::move(args);
  return p;
}

}  // namespace tessel::ir
