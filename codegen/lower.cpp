#include "codegen/lower.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <unordered_map>

#include "runtime/errors.h"

namespace tessel::lower {

using ir::BufferView;
using ir::Category;
using ir::Node;
using ir::Op;
using kir::Stmt;
using kir::StmtKind;

namespace {

bool is_contiguous(const Shape& s, const Strides& st) {
  int64_t expect = 1;
  for (size_t i = s.dims.size(); i-- > 0;) {
    if (s.dims[i] != 1 && st[i] != expect) return false;
    expect *= s.dims[i];
  }
  return true;
}

// Domain index -> node index, per node dim: idx = o + c * domain[d] (d < 0: just o).
struct Term {
  int d = -1;
  int64_t c = 0;
  int64_t o = 0;
  bool operator==(const Term&) const = default;
};
using Map = std::vector<Term>;

int64_t const_bits(const Node& n) {
  const ir::ScalarValue& v = n.value;
  switch (n.dtype) {
    case DType::f32: case DType::f64: {
      int64_t b;
      std::memcpy(&b, &v.f, 8);
      return b;
    }
    case DType::f16: return f32_to_f16(static_cast<float>(v.f));
    case DType::bf16: return f32_to_bf16(static_cast<float>(v.f));
    case DType::i64: return v.is_int ? v.i : static_cast<int64_t>(v.f);
    case DType::i32: return static_cast<int32_t>(v.is_int ? v.i : static_cast<int64_t>(v.f));
    case DType::b8: return v.is_int ? v.i != 0 : v.f != 0;
  }
  return 0;
}

struct Builder {
  Builder(const ValueOf& v, const DenseCopy& c) : value_of(v), copy(c) {}
  const ValueOf& value_of;
  const DenseCopy& copy;
  Lowered L;
  int R = 1;
  std::unordered_map<Node*, int> param_of;
  // Small, searched linearly: a launch's lowering must not cost map nodes.
  std::vector<std::pair<int, std::vector<int64_t>>> load_of;  // slot -> (param, offset and strides)
  std::unordered_map<Node*, std::vector<std::pair<Map, int>>> memo;  // node -> (index map, stmt)
  std::vector<std::vector<int64_t>> load_args;
  std::vector<int64_t> const_args;

  BufferView resolve(Node* n) {
    if (auto v = value_of(n)) return *v;
    if (ir::op_category(n->op) != Category::Movement)
      throw InternalError(fmt::format("lower_to_kernel_ir: {} has no value", ir::op_name(n->op)));
    return movement_view(*n, resolve(n->args[0].get()), copy);
  }

  int load(Node* key, const BufferView& v, const Map& m) {
    auto [pit, fresh] = param_of.emplace(key, static_cast<int>(L.kernel.params.size()));
    if (fresh) {
      L.kernel.params.push_back({key->dtype, false});
      L.buffers.push_back(v);
    }
    std::vector<int64_t> a(static_cast<size_t>(R) + 1, 0);
    a[0] = v.offset;
    for (size_t j = 0; j < m.size(); ++j) {
      a[0] += v.strides[j] * m[j].o;
      if (m[j].d >= 0) a[1 + static_cast<size_t>(m[j].d)] += v.strides[j] * m[j].c;
    }
    int slot = -1;
    for (size_t i = 0; i < load_of.size() && slot < 0; ++i)
      if (load_of[i].first == pit->second && load_of[i].second == a) slot = static_cast<int>(i);
    if (slot < 0) {
      slot = static_cast<int>(load_args.size());
      load_of.emplace_back(pit->second, a);
      load_args.push_back(std::move(a));
      L.kernel.load_params.push_back(pit->second);
    }
    return push({StmtKind::Load, Op::Input, key->dtype, {}, slot});
  }

  int push(Stmt s) {
    L.kernel.body.push_back(std::move(s));
    return static_cast<int>(L.kernel.body.size()) - 1;
  }

  int visit(Node* n, const Map& m, bool root = false) {
    auto& seen = memo[n];
    for (auto& [mm, sid] : seen)
      if (mm == m) return sid;
    int id;
    std::optional<BufferView> v = root ? std::nullopt : value_of(n);
    if (v && n->op != Op::Constant) {
      id = load(n, *v, m);
    } else if (n->op == Op::Constant) {
      int slot = static_cast<int>(L.kernel.const_types.size());
      L.kernel.const_types.push_back(n->dtype);
      const_args.push_back(const_bits(*n));
      id = push({StmtKind::Const, Op::Constant, n->dtype, {}, slot});
    } else if (ir::is_elementwise(n->op)) {
      std::vector<int> args;
      for (auto& a : n->args) args.push_back(visit(a.get(), m));
      id = push({StmtKind::Op, n->op, n->dtype, std::move(args), 0});
    } else if (ir::op_category(n->op) == Category::Movement) {
      Node* x = n->args[0].get();
      Map in(x->shape.dims.size());
      switch (n->op) {
        case Op::Permute:
          for (size_t i = 0; i < n->axes.size(); ++i) in[static_cast<size_t>(n->axes[i])] = m[i];
          break;
        case Op::Expand: {
          size_t lead = n->shape.dims.size() - x->shape.dims.size();
          for (size_t i = 0; i < in.size(); ++i) in[i] = x->shape.dims[i] == 1 ? Term{} : m[lead + i];
          break;
        }
        case Op::Slice:
          for (size_t i = 0; i < in.size(); ++i) {
            int64_t start = n->axes[2 * i], step = n->axes[2 * i + 1];
            in[i] = {m[i].d, m[i].c * step, start + step * m[i].o};
          }
          break;
        case Op::Reshape: {
          id = load(n, resolve(n), m);
          memo[n].emplace_back(m, id);
          return id;
        }
        default: throw InternalError("lower_to_kernel_ir: unknown movement op");
      }
      id = visit(x, in);
    } else {
      throw InternalError(fmt::format("lower_to_kernel_ir: {} cannot be fused (the scheduler must materialize it)",
                                      ir::op_name(n->op)));
    }
    memo[n].emplace_back(m, id);
    return id;
  }

  void finish(const std::vector<int64_t>& dims, const std::vector<int64_t>& store) {
    auto& k = L.kernel;
    k.rank = R;
    L.args = dims;
    L.args.insert(L.args.end(), store.begin(), store.end());
    for (auto& a : load_args) L.args.insert(L.args.end(), a.begin(), a.end());
    L.args.insert(L.args.end(), const_args.begin(), const_args.end());
    int kept = k.reduce == kir::ReduceKind::None ? R - 1 : R - k.reduce_rank;
    L.rows = 1;
    for (int d = 0; d < kept; ++d) L.rows *= dims[static_cast<size_t>(d)];
  }
};

}  // namespace

BufferView movement_view(const Node& n, const BufferView& in, const DenseCopy& copy) {
  const Node& x = *n.args[0];
  BufferView v = in;
  switch (n.op) {
    case Op::Reshape:
      if (!is_contiguous(x.shape, in.strides)) v = copy(x.dtype, x.shape, in);
      v.strides = contiguous_strides(n.shape);
      return v;
    case Op::Permute:
      for (size_t i = 0; i < n.axes.size(); ++i) v.strides[i] = in.strides[static_cast<size_t>(n.axes[i])];
      return v;
    case Op::Expand: {
      size_t lead = n.shape.dims.size() - x.shape.dims.size();
      v.strides.assign(n.shape.dims.size(), 0);
      for (size_t i = 0; i < x.shape.dims.size(); ++i) v.strides[lead + i] = x.shape.dims[i] == 1 ? 0 : in.strides[i];
      return v;
    }
    case Op::Slice:
      for (size_t i = 0; i < v.strides.size(); ++i) {
        v.offset += n.axes[2 * i] * in.strides[i];
        v.strides[i] = in.strides[i] * n.axes[2 * i + 1];
      }
      return v;
    default: break;
  }
  throw InternalError("movement_view: not a movement op");
}

Lowered lower_to_kernel_ir(Node& root, const ValueOf& value_of, const DenseCopy& copy, const BufferView& out) {
  Builder B(value_of, copy);
  auto& k = B.L.kernel;
  k.params.push_back({root.dtype, true});
  B.L.buffers.push_back(out);
  if (ir::is_reduction(root.op)) {
    Node* x = root.args[0].get();
    std::vector<int64_t> kept, red;
    std::vector<int> pos(x->shape.dims.size());
    for (size_t d = 0; d < x->shape.dims.size(); ++d) {
      bool r = std::find(root.axes.begin(), root.axes.end(), static_cast<int64_t>(d)) != root.axes.end();
      (r ? red : kept).push_back(x->shape.dims[d]);
    }
    size_t K = std::max<size_t>(kept.size(), 1), Rd = std::max<size_t>(red.size(), 1);
    B.R = static_cast<int>(K + Rd);
    std::vector<int64_t> dims(K + Rd, 1);
    std::copy(kept.begin(), kept.end(), dims.begin() + static_cast<long>(K - kept.size()));
    std::copy(red.begin(), red.end(), dims.begin() + static_cast<long>(K + Rd - red.size()));
    Map m(x->shape.dims.size());
    size_t ki = K - kept.size(), ri = K + Rd - red.size();
    for (size_t d = 0; d < x->shape.dims.size(); ++d) {
      bool r = std::find(root.axes.begin(), root.axes.end(), static_cast<int64_t>(d)) != root.axes.end();
      m[d] = {static_cast<int>(r ? ri++ : ki++), 1, 0};
    }
    k.reduce_rank = static_cast<int>(Rd);
    k.reduce = root.op == Op::Sum ? kir::ReduceKind::Sum : root.op == Op::Mean ? kir::ReduceKind::Mean
             : root.op == Op::Max ? kir::ReduceKind::Max : kir::ReduceKind::Min;
    k.acc_dtype = is_floating(x->dtype) ? DType::f64 : DType::i64;
    k.value = B.visit(x, m);
    auto& e = k.epilogue;
    e.push_back({StmtKind::Acc, Op::Input, k.acc_dtype, {}, 0});
    if (k.reduce == kir::ReduceKind::Mean) {
      e.push_back({StmtKind::Count, Op::Input, k.acc_dtype, {}, 0});
      e.push_back({StmtKind::Op, Op::Div, k.acc_dtype, {0, 1}, 0});
    }
    if (root.dtype != k.acc_dtype)
      e.push_back({StmtKind::Op, Op::Cast, root.dtype, {static_cast<int>(e.size()) - 1}, 0});
    k.result = static_cast<int>(e.size()) - 1;
    Strides cs = contiguous_strides(Shape(kept));
    std::vector<int64_t> store(1 + K + Rd, 0);
    store[0] = out.offset;
    for (size_t i = 0; i < kept.size(); ++i) store[1 + K - kept.size() + i] = cs[i];
    B.finish(dims, store);
  } else {
    size_t r = root.shape.dims.size();
    B.R = static_cast<int>(std::max<size_t>(r, 1));
    Map m(r);
    for (size_t d = 0; d < r; ++d) m[d] = {static_cast<int>(d), 1, 0};
    k.value = B.visit(&root, m, /*root=*/true);
    std::vector<int64_t> dims = r ? root.shape.dims : std::vector<int64_t>{1};
    std::vector<int64_t> store{out.offset};
    if (r) store.insert(store.end(), out.strides.begin(), out.strides.end());
    else store.push_back(0);
    B.finish(dims, store);
  }
  return std::move(B.L);
}

Lowered lower_copy(DType t, const Shape& s, const BufferView& in, const BufferView& out) {
  auto in_node = std::make_shared<Node>();
  in_node->op = Op::Input;
  in_node->dtype = t;
  in_node->shape = s;
  in_node->buffer = in;
  // The copy is the identity over a leaf: a load stored as is.
  auto id = std::make_shared<Node>();
  id->op = Op::Slice;  // an identity window, so the root is not itself a value
  id->dtype = t;
  id->shape = s;
  id->args = {in_node};
  for (size_t i = 0; i < s.dims.size(); ++i) id->axes.insert(id->axes.end(), {0, 1});
  ValueOf vo = [](Node* n) -> std::optional<BufferView> {
    if (n->realized()) return *n->buffer;
    return std::nullopt;
  };
  DenseCopy no_copy = [](DType, const Shape&, const BufferView&) -> BufferView {
    throw InternalError("lower_copy: nested copy");
  };
  return lower_to_kernel_ir(*id, vo, no_copy, out);
}

void coalesce(Lowered& l) {
  auto& k = l.kernel;
  const int R = k.rank;
  const size_t slots = k.load_params.size() + 1;
  std::vector<int64_t>& a = l.args;
  auto stride = [&](size_t s, int d) -> int64_t& { return a[k.slot_base(static_cast<int>(s)) + 1 + static_cast<size_t>(d)]; };
  auto group = [&](int lo, int hi) {
    std::vector<int64_t> dims;
    std::vector<std::vector<int64_t>> st(slots);
    for (int d = lo; d < hi; ++d) {
      int64_t n = a[static_cast<size_t>(d)];
      if (n == 1) continue;
      bool merge = !dims.empty();
      for (size_t s = 0; s < slots && merge; ++s) merge = st[s].back() == stride(s, d) * n;
      if (merge) {
        dims.back() *= n;
        for (size_t s = 0; s < slots; ++s) st[s].back() = stride(s, d);
      } else {
        dims.push_back(n);
        for (size_t s = 0; s < slots; ++s) st[s].push_back(stride(s, d));
      }
    }
    size_t pad = static_cast<size_t>(hi - lo) - dims.size();
    for (int d = lo; d < hi; ++d) {
      size_t i = static_cast<size_t>(d - lo);
      bool padded = i < pad;
      a[static_cast<size_t>(d)] = padded ? 1 : dims[i - pad];
      for (size_t s = 0; s < slots; ++s) stride(s, d) = padded ? 0 : st[s][i - pad];
    }
  };
  int K = k.reduce == kir::ReduceKind::None ? R : R - k.reduce_rank;
  group(0, K);
  if (K < R) group(K, R);
  int kept = k.reduce == kir::ReduceKind::None ? R - 1 : K;
  l.rows = 1;
  for (int d = 0; d < kept; ++d) l.rows *= a[static_cast<size_t>(d)];
}

}  // namespace tessel::lower
