#include "codegen/lower.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <unordered_map>

#include "codegen/movement.h"
#include "runtime/errors.h"

namespace tessel::lower {

using ir::BufferView;
using ir::Category;
using ir::Node;
using ir::Op;
using kir::Stmt;
using kir::StmtKind;

namespace {

// Domain index -> node index, per node dim: idx = o + c * domain[d] (d < 0:
// just o), plus sc * (the i64 statement s) when s >= 0 -- an index read from
// memory (gather).
struct Term {
  int d = -1;
  int64_t c = 0;
  int64_t o = 0;
  int s = -1;
  int64_t sc = 0;
  bool operator==(const Term&) const = default;
};
using Map = std::vector<Term>;


struct Builder {
  Builder(const ValueOf& v, const DenseCopy& c) : value_of(v), copy(c) {}
  const ValueOf& value_of;
  const DenseCopy& copy;
  Lowered L;
  int R = 1;
  std::unordered_map<Node*, int> param_of;
  // Small, searched linearly: a launch's lowering must not cost map nodes.
  std::vector<std::pair<int, std::vector<int64_t>>> load_of;  // slot -> (param, offset and strides)
  struct Seen {
    Map map;
    int pred;  // the predicate its loads were emitted under
    int stmt;
  };
  std::unordered_map<Node*, std::vector<Seen>> memo;  // node -> statements already emitted for it
  std::vector<std::vector<int64_t>> load_args;
  std::vector<std::vector<int64_t>> coord_args;  // coordinate slot -> offset and coefficients
  // The b8 statement under which the node being visited is read (-1: always):
  // inside a pad's or a concatenation's branch, loads touch memory only there.
  int pred = -1;
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
    int extra = -1;  // the computed part of the element index
    for (size_t j = 0; j < m.size(); ++j) {
      a[0] += v.strides[j] * m[j].o;
      if (m[j].d >= 0) a[1 + static_cast<size_t>(m[j].d)] += v.strides[j] * m[j].c;
      if (m[j].s >= 0) {
        int part = op(Op::Mul, DType::i64, {m[j].s, literal(v.strides[j] * m[j].sc)});
        extra = extra < 0 ? part : op(Op::Add, DType::i64, {extra, part});
      }
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
    Stmt s{StmtKind::Load, Op::Input, key->dtype, {}, slot};
    s.pred = pred;
    s.index = extra;
    return push(std::move(s));
  }

  // An i64 value known at lowering (a stride, a step): a coordinate with no
  // dependence on the domain, so it stays a launch argument, not a constant.
  int literal(int64_t v) { return coord(Term{-1, 0, v}); }

  // The i64 value of term t at the current element (a coordinate slot, plus
  // its computed part).
  int coord(const Term& t) {
    if (t.s >= 0)
      return op(Op::Add, DType::i64, {coord({t.d, t.c, t.o}), op(Op::Mul, DType::i64, {t.s, literal(t.sc)})});
    std::vector<int64_t> a(static_cast<size_t>(R) + 1, 0);
    a[0] = t.o;
    if (t.d >= 0) a[1 + static_cast<size_t>(t.d)] = t.c;
    int slot = -1;
    for (size_t i = 0; i < coord_args.size() && slot < 0; ++i)
      if (coord_args[i] == a) slot = static_cast<int>(i);
    if (slot < 0) {
      slot = static_cast<int>(coord_args.size());
      coord_args.push_back(std::move(a));
      L.kernel.coords = static_cast<int>(coord_args.size());
    }
    return push({StmtKind::Coord, Op::Input, DType::i64, {}, slot});
  }
  int op(Op o, DType t, std::vector<int> args) { return push({StmtKind::Op, o, t, std::move(args), 0}); }
  int both(int a, int b) { return a < 0 ? b : b < 0 ? a : op(Op::And, DType::b8, {a, b}); }
  // b8: lo <= t (if has_lo) and t < hi (if has_hi), where t = o + c * domain[d].
  // Bounds are folded into coordinates compared with a zero coordinate, so a
  // kernel's constants stay the IR's and shapes stay launch arguments.
  int within(const Term& t, bool has_lo, int64_t lo, bool has_hi, int64_t hi) {
    int zero = coord(Term{});
    int r = -1;
    if (has_lo) r = both(r, op(Op::Ge, DType::b8, {coord({t.d, t.c, t.o - lo, t.s, t.sc}), zero}));
    if (has_hi) r = both(r, op(Op::Lt, DType::b8, {coord({t.d, t.c, t.o - hi, t.s, t.sc}), zero}));
    return r;
  }
  // visit(n, m) with loads under `p` as well.
  int visit_under(int p, Node* n, const Map& m) {
    int saved = pred;
    pred = both(pred, p);
    int id = visit(n, m);
    pred = saved;
    return id;
  }

  int push(Stmt s) {
    cur->push_back(std::move(s));
    return static_cast<int>(cur->size()) - 1;
  }

  // Row programs: the statement list being built (a stage's body or the main
  // body), and the stages visible from it.
  std::vector<Stmt>* cur = &L.kernel.body;
  std::vector<Node*> stages;  // stage i's reduction node
  size_t visible = 0;         // stages [0, visible) may be read
  Map row_map;                // the reduced input's domain map
  std::vector<int64_t> red_axes;

  // Starts a new statement list: memoized statements belong to the old one.
  void begin(std::vector<Stmt>* list, size_t stages_visible) {
    cur = list;
    visible = stages_visible;
    memo.clear();
  }

  // A keepdim stage read through broadcasts: every kept axis at the row's
  // index, every reduced axis at 0 -- anything else is not "the row's value".
  int stage_ref(Node* n, const Map& m, size_t i) {
    bool ok = i < visible && n->reduce().keepdim && m.size() == row_map.size();
    for (size_t j = 0; ok && j < m.size(); ++j) {
      bool red = std::find(red_axes.begin(), red_axes.end(), static_cast<int64_t>(j)) != red_axes.end();
      bool at_zero = m[j].d < 0 && m[j].o == 0;
      bool along = m[j] == row_map[j];  // over a row of one element, read without a broadcast
      ok = red ? at_zero || (along && n->shape.dims[j] == 1) : (along || (n->shape.dims[j] == 1 && at_zero));
    }
    if (!ok)
      throw InternalError(fmt::format("lower_to_kernel_ir: stage {} ({}) is not read along its row", i,
                                      ir::op_name(n->op)));
    return push({StmtKind::Stage, Op::Input, n->dtype, {}, static_cast<int>(i)});
  }

  int visit(Node* n, const Map& m, bool root = false) {
    auto& seen = memo[n];
    for (const Seen& x : seen)
      if (x.map == m && x.pred == pred) return x.stmt;
    int id;
    std::optional<BufferView> v = root ? std::nullopt : value_of(n);
    auto stage = std::find(stages.begin(), stages.end(), n);
    if (!root && stage != stages.end()) {
      id = stage_ref(n, m, static_cast<size_t>(stage - stages.begin()));
    } else if (v && (n->op != Op::Constant || n->realized())) {
      // A realized node is memory, whatever op made it: a filled tensor
      // (`v.fill_(0)`) may since have been written element by element.
      id = load(n, *v, m);
    } else if (n->op == Op::Constant) {
      int slot = static_cast<int>(L.kernel.const_types.size());
      L.kernel.const_types.push_back(n->dtype);
      const_args.push_back(constant_bits(*n));
      id = push({StmtKind::Const, Op::Constant, n->dtype, {}, slot});
    } else if (ir::is_elementwise(n->op)) {
      std::vector<int> args;
      for (auto& a : n->args) args.push_back(visit(a.get(), m));
      id = push({StmtKind::Op, n->op, n->dtype, std::move(args), 0});
    } else if (ir::op_category(n->op) == Category::Indexed) {
      id = visit_indexed(n, m);
    } else if (ir::op_category(n->op) == Category::Movement) {
      Node* x = n->args[0].get();
      Map in(x->shape.dims.size());
      switch (n->op) {
        case Op::Permute: {
          const std::vector<int64_t>& order = n->order().order;
          for (size_t i = 0; i < order.size(); ++i) in[static_cast<size_t>(order[i])] = m[i];
          break;
        }
        case Op::Expand: {
          size_t lead = n->shape.dims.size() - x->shape.dims.size();
          for (size_t i = 0; i < in.size(); ++i) in[i] = x->shape.dims[i] == 1 ? Term{} : m[lead + i];
          break;
        }
        case Op::Slice:
          for (size_t i = 0; i < in.size(); ++i) {
            const auto [start, step] = n->window().dims[i];
            in[i] = {m[i].d, m[i].c * step, start + step * m[i].o, m[i].s, m[i].sc * step};
          }
          break;
        case Op::Reshape: {
          id = load(n, resolve(n), m);
          memo[n].push_back({m, pred, id});
          return id;
        }
        TESSEL_IR_CASES_NOT_MOVEMENT throw InternalError("lower_to_kernel_ir: unknown movement op");
      }
      id = visit(x, in);
    } else {
      throw InternalError(fmt::format("lower_to_kernel_ir: {} cannot be fused (the scheduler must materialize it)",
                                      ir::op_name(n->op)));
    }
    memo[n].push_back({m, pred, id});
    return id;
  }

  // A stack of windows of one buffer -- parts one element thick along the
  // axis, each memory (or a view of it), in one storage with one set of
  // strides, at offsets in arithmetic progression: the sliding windows of an
  // unfold (convolution, pooling). Such a concatenation is one load whose
  // stride along the axis is the offsets' step, instead of a chain of
  // predicated parts (a 5x5 window would test 25 predicates per element).
  // -1 when the parts are anything else.
  int strided_stack(Node* n, const Map& m) {
    const size_t ax = static_cast<size_t>(n->axis());
    if (n->args.size() < 2) return -1;
    std::vector<BufferView> views;
    views.reserve(n->args.size());
    for (auto& a : n->args) {
      Node* x = a.get();
      if (x->shape.dims[ax] != 1) return -1;
      if (auto v = value_of(x)) views.push_back(*v);
      else if (x->op == Op::Reshape) views.push_back(resolve(x));
      else return -1;
      const BufferView& v = views.back();
      const BufferView& v0 = views.front();
      if (v.storage != v0.storage || v.strides.size() != v0.strides.size()) return -1;
      for (size_t j = 0; j < v.strides.size(); ++j)
        if (j != ax && v.strides[j] != v0.strides[j] && x->shape.dims[j] != 1) return -1;
    }
    const int64_t step = views[1].offset - views[0].offset;
    for (size_t i = 2; i < views.size(); ++i)
      if (views[i].offset - views[i - 1].offset != step) return -1;
    BufferView stacked = views[0];
    stacked.strides[ax] = step;
    return load(n, stacked, m);
  }

  // Iota, Pad, Cat at the element `m` maps the domain to.
  int visit_indexed(Node* n, const Map& m) {
    switch (n->op) {
      case Op::Iota: return coord(m[static_cast<size_t>(n->axis())]);
      case Op::Pad: {
        Node* x = n->args[0].get();
        Map in(m.size());
        int inside = -1;
        for (size_t j = 0; j < m.size(); ++j) {
          const auto [before, after] = n->widths().dims[j];
          in[j] = {m[j].d, m[j].c, m[j].o - before, m[j].s, m[j].sc};
          if (before > 0 || after > 0)  // (a crop only narrows what is read)
            inside = both(inside, within(in[j], before > 0, 0, after > 0, x->shape.dims[j]));
        }
        if (inside < 0) return visit(x, in);
        int v = visit_under(inside, x, in);
        int fill = visit(n->args[1].get(), m);
        return op(Op::Where, n->dtype, {inside, v, fill});
      }
      case Op::Cat: {
        if (int id = strided_stack(n, m); id >= 0) return id;
        const size_t ax = static_cast<size_t>(n->axis());
        const size_t parts = n->args.size();
        // Where(in part 0, v0, Where(in part 1, v1, ... v_last)), each part read only inside.
        std::vector<int> in_part(parts, -1), value(parts, -1);
        int64_t start = 0;
        for (size_t i = 0; i < parts; ++i) {
          Node* x = n->args[i].get();
          const int64_t len = x->shape.dims[ax];
          Map in = m;
          in[ax].o -= start;
          in_part[i] = within(in[ax], i > 0, 0, i + 1 < parts, len);
          value[i] = visit_under(in_part[i], x, in);
          start += len;
        }
        int r = value[parts - 1];
        for (size_t i = parts - 1; i-- > 0;) r = op(Op::Where, n->dtype, {in_part[i], value[i], r});
        return r;
      }
      case Op::Gather: {
        // The index at this element, then the input there along the axis,
        // read only where the index is in range (the DSL checks the values;
        // this keeps a kernel inside its buffer whatever it is given).
        Node* x = n->args[0].get();
        const size_t ax = static_cast<size_t>(n->axis());
        int at = visit(n->args[1].get(), m);
        Map in = m;
        in[ax] = Term{-1, 0, 0, at, 1};
        int ok = within(in[ax], true, 0, true, x->shape.dims[ax]);
        return visit_under(ok, x, in);
      }
      TESSEL_IR_CASES_NOT_INDEXED break;
    }
    throw InternalError(fmt::format("lower_to_kernel_ir: {} is not an indexed op", ir::op_name(n->op)));
  }

  void finish(const std::vector<int64_t>& dims, const std::vector<int64_t>& store,
              const std::vector<int64_t>& stage_stores = {}) {
    auto& k = L.kernel;
    k.rank = R;
    L.args = dims;
    L.args.insert(L.args.end(), store.begin(), store.end());
    for (auto& a : load_args) L.args.insert(L.args.end(), a.begin(), a.end());
    for (auto& a : coord_args) L.args.insert(L.args.end(), a.begin(), a.end());
    L.args.insert(L.args.end(), stage_stores.begin(), stage_stores.end());
    L.args.insert(L.args.end(), const_args.begin(), const_args.end());
    int kept = k.reduce == kir::ReduceKind::None && !k.row_program() ? R - 1 : R - k.reduce_rank;
    L.rows = 1;
    for (int d = 0; d < kept; ++d) L.rows *= dims[static_cast<size_t>(d)];
  }
};

}  // namespace

int64_t constant_bits(const Node& n) {
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

BufferView movement_view(const Node& n, const BufferView& in, const DenseCopy& copy) {
  if (auto v = ir::movement_view(n, in)) return *v;
  // A reshape no strides express: a dense copy of the argument, viewed anew.
  const Node& x = *n.args[0];
  BufferView v = copy(x.dtype, x.shape, in);
  v.strides = contiguous_strides(n.shape);
  return v;
}

namespace {

kir::ReduceKind reduce_kind(Op op) {
  switch (op) {
    case Op::Sum: return kir::ReduceKind::Sum;
    case Op::Mean: return kir::ReduceKind::Mean;
    case Op::Max: return kir::ReduceKind::Max;
    case Op::Min: return kir::ReduceKind::Min;
    case Op::Prod: return kir::ReduceKind::Prod;
    TESSEL_IR_CASES_NOT_REDUCE break;
  }
  throw InternalError(fmt::format("lower_to_kernel_ir: {} has no kernel reduction", ir::op_name(op)));
}

// A reduction's epilogue: the accumulator (over the count for a mean) in the node's dtype.
std::vector<Stmt> reduce_epilogue(kir::ReduceKind r, DType acc, DType out, int& result) {
  std::vector<Stmt> e;
  e.push_back({StmtKind::Acc, Op::Input, acc, {}, 0});
  if (r == kir::ReduceKind::Mean) {
    e.push_back({StmtKind::Count, Op::Input, acc, {}, 0});
    e.push_back({StmtKind::Op, Op::Div, acc, {0, 1}, 0});
  }
  if (out != acc) e.push_back({StmtKind::Op, Op::Cast, out, {static_cast<int>(e.size()) - 1}, 0});
  result = static_cast<int>(e.size()) - 1;
  return e;
}

// The domain of a reduction over x's `axes`: kept dims then reduced dims,
// each group at least one dim (padded with size-1 dims in front).
struct RowDomain {
  std::vector<int64_t> kept, red, dims;
  size_t K = 1, Rd = 1;
  Map map;              // x's dims -> domain
  std::vector<int> pos; // x's dim -> domain dim
  RowDomain(const Node& x, const std::vector<int64_t>& axes) {
    auto reduced = [&](size_t d) { return std::find(axes.begin(), axes.end(), static_cast<int64_t>(d)) != axes.end(); };
    for (size_t d = 0; d < x.shape.dims.size(); ++d) (reduced(d) ? red : kept).push_back(x.shape.dims[d]);
    K = std::max<size_t>(kept.size(), 1);
    Rd = std::max<size_t>(red.size(), 1);
    dims.assign(K + Rd, 1);
    std::copy(kept.begin(), kept.end(), dims.begin() + static_cast<long>(K - kept.size()));
    std::copy(red.begin(), red.end(), dims.begin() + static_cast<long>(K + Rd - red.size()));
    map.resize(x.shape.dims.size());
    pos.resize(x.shape.dims.size());
    size_t ki = K - kept.size(), ri = K + Rd - red.size();
    for (size_t d = 0; d < x.shape.dims.size(); ++d) {
      pos[d] = static_cast<int>(reduced(d) ? ri++ : ki++);
      map[d] = {pos[d], 1, 0};
    }
  }
  int rank() const { return static_cast<int>(K + Rd); }
  // Store arguments of a dense per-row value (kept strides, 0 along the row).
  std::vector<int64_t> row_store(int64_t offset) const {
    Strides cs = contiguous_strides(Shape(kept));
    std::vector<int64_t> st(1 + K + Rd, 0);
    st[0] = offset;
    for (size_t i = 0; i < kept.size(); ++i) st[1 + K - kept.size() + i] = cs[i];
    return st;
  }
};

}  // namespace

Lowered lower_to_kernel_ir(Node& root, const ValueOf& value_of, const DenseCopy& copy, const BufferView& out) {
  Builder B(value_of, copy);
  auto& k = B.L.kernel;
  k.params.push_back({root.dtype, true});
  B.L.buffers.push_back(out);
  if (ir::is_reduction(root.op)) {
    Node* x = root.args[0].get();
    RowDomain dom(*x, root.reduce().axes);
    B.R = dom.rank();
    k.reduce_rank = static_cast<int>(dom.Rd);
    k.reduce = reduce_kind(root.op);
    k.acc_dtype = is_floating(x->dtype) ? DType::f64 : DType::i64;
    k.value = B.visit(x, dom.map);
    k.epilogue = reduce_epilogue(k.reduce, k.acc_dtype, root.dtype, k.result);
    B.finish(dom.dims, dom.row_store(out.offset));
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

Lowered lower_row_program(Node& root, const std::vector<Node*>& stages, const std::vector<BufferView>& stage_out,
                          const ValueOf& value_of, const DenseCopy& copy, const BufferView& out) {
  TESSEL_ASSERT("lower_row_program", !stages.empty() && stage_out.size() == stages.size());
  Builder B(value_of, copy);
  auto& k = B.L.kernel;
  k.params.push_back({root.dtype, true});
  B.L.buffers.push_back(out);
  Node* x0 = stages[0]->args[0].get();
  RowDomain dom(*x0, stages[0]->reduce().axes);
  B.R = dom.rank();
  B.stages = stages;
  B.row_map = dom.map;
  B.red_axes = stages[0]->reduce().axes;
  k.reduce_rank = static_cast<int>(dom.Rd);
  std::vector<int64_t> stage_stores;
  k.stages.resize(stages.size());
  for (size_t i = 0; i < stages.size(); ++i) {
    Node* r = stages[i];
    kir::Stage& g = k.stages[i];
    if (stage_out[i].storage) {
      g.store = static_cast<int>(k.params.size());
      k.params.push_back({r->dtype, true});
      B.L.buffers.push_back(stage_out[i]);
      auto st = dom.row_store(stage_out[i].offset);
      stage_stores.insert(stage_stores.end(), st.begin(), st.end());
    }
  }
  for (size_t i = 0; i < stages.size(); ++i) {
    Node* r = stages[i];
    Node* x = r->args[0].get();
    TESSEL_ASSERT("lower_row_program", x->shape == x0->shape && r->reduce().axes == stages[0]->reduce().axes);  // one row domain
    kir::Stage& g = k.stages[i];
    g.reduce = reduce_kind(r->op);
    g.acc_dtype = is_floating(x->dtype) ? DType::f64 : DType::i64;
    B.begin(&g.body, i);
    g.value = B.visit(x, dom.map);
    g.epilogue = reduce_epilogue(g.reduce, g.acc_dtype, r->dtype, g.result);
  }
  B.begin(&k.body, stages.size());
  if (ir::is_reduction(root.op)) {
    Node* x = root.args[0].get();
    TESSEL_ASSERT("lower_row_program", x->shape == x0->shape && root.reduce().axes == stages[0]->reduce().axes);
    k.reduce = reduce_kind(root.op);
    k.acc_dtype = is_floating(x->dtype) ? DType::f64 : DType::i64;
    k.value = B.visit(x, dom.map);
    k.epilogue = reduce_epilogue(k.reduce, k.acc_dtype, root.dtype, k.result);
    B.finish(dom.dims, dom.row_store(out.offset), stage_stores);
  } else {
    TESSEL_ASSERT("lower_row_program", root.shape == x0->shape);  // the main body covers the row domain
    k.value = B.visit(&root, dom.map, /*root=*/true);
    std::vector<int64_t> store(1 + dom.dims.size(), 0);
    store[0] = out.offset;
    for (size_t d = 0; d < dom.pos.size(); ++d) store[1 + static_cast<size_t>(dom.pos[d])] = out.strides[d];
    B.finish(dom.dims, store, stage_stores);
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
  id->attrs = ir::WindowAttrs{std::vector<ir::SliceDim>(s.dims.size())};
  ValueOf vo = [](Node* n) -> std::optional<BufferView> {
    if (n->realized()) return *n->buffer;
    return std::nullopt;
  };
  DenseCopy no_copy = [](DType, const Shape&, const BufferView&) -> BufferView {
    throw InternalError("lower_copy: nested copy");
  };
  return lower_to_kernel_ir(*id, vo, no_copy, out);
}

bool reads_in_store_layout(const Lowered& l, size_t p) {
  const kir::Kernel& k = l.kernel;
  const size_t R = static_cast<size_t>(k.rank);
  const size_t store = k.slot_base(0);
  for (size_t s = 0; s < k.load_params.size(); ++s) {
    if (static_cast<size_t>(k.load_params[s]) != p) continue;
    const size_t load = k.slot_base(static_cast<int>(s + 1));
    for (size_t i = 0; i <= R; ++i)
      if (l.args[load + i] != l.args[store + i]) return false;
  }
  return true;
}

void coalesce(Lowered& l) {
  auto& k = l.kernel;
  const int R = k.rank;
  const size_t slots = k.num_slots();
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
  const bool flat = k.reduce == kir::ReduceKind::None && !k.row_program();  // no row split
  int K = flat ? R : R - k.reduce_rank;
  group(0, K);
  if (K < R) group(K, R);
  int kept = flat ? R - 1 : K;
  l.rows = 1;
  for (int d = 0; d < kept; ++d) l.rows *= a[static_cast<size_t>(d)];
  mark_inner_strides(l);
}

void mark_inner_strides(Lowered& l) {
  auto& k = l.kernel;
  k.invariant.assign(k.load_params.size(), false);
  bool any = false;
  // Only along a real row: an innermost dim of one element has nothing to hoist.
  if (l.args[static_cast<size_t>(k.rank - 1)] > 1)
    for (size_t i = 0; i < k.load_params.size(); ++i)
      any |= k.invariant[i] = l.args[k.slot_base(static_cast<int>(i) + 1) + 1 + static_cast<size_t>(k.rank - 1)] == 0;
  if (!any) k.invariant.clear();  // the common case keeps the plain text
  // Interleaved loads: only where a vector loop can use them (a row of at
  // least one 4-lane vector, a contiguous store, plain strided loads).
  k.interleave.clear();
  k.short_inner = 0;
  k.short_inner_steps.clear();
  const size_t inner = static_cast<size_t>(k.rank - 1);
  const bool flat = k.reduce == kir::ReduceKind::None && !k.row_program();
  // A short innermost dim stored contiguously under a run of at least 4.
  if (flat && k.rank >= 2 && l.args[inner] >= 2 && l.args[inner] <= 4 && l.args[inner - 1] >= 4 &&
      l.args[k.slot_base(0) + 1 + inner] == 1 && l.args[k.slot_base(0) + inner] == l.args[inner] && !k.indexed_loads()) {
    std::vector<uint8_t> steps;
    bool small = true;
    for (size_t s = 0; s <= k.load_params.size(); ++s)
      for (size_t d : {inner - 1, inner}) {
        const int64_t v = l.args[k.slot_base(static_cast<int>(s)) + 1 + d];
        small &= v >= 0 && v <= 16;
        steps.push_back(static_cast<uint8_t>(v));  // kept only when every one is small
      }
    if (small) {
      k.short_inner = static_cast<int>(l.args[inner]);
      k.short_inner_steps = std::move(steps);
    }
    return;
  }
  if (k.reduce != kir::ReduceKind::None || k.row_program() || k.indexed() || l.args[inner] < 4 ||
      l.args[k.slot_base(0) + 1 + inner] != 1)
    return;
  std::vector<uint8_t> il(k.load_params.size(), 0);
  bool interleaved = false;
  for (size_t i = 0; i < k.load_params.size(); ++i) {
    const int64_t s = l.args[k.slot_base(static_cast<int>(i) + 1) + 1 + inner];
    if (s >= 2 && s <= 4) il[i] = static_cast<uint8_t>(s), interleaved = true;
  }
  if (interleaved) k.interleave = std::move(il);
}

}  // namespace tessel::lower
