#include "codegen/cuda/cuda_emitter.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>

#include "runtime/cuda/prelude.h"
#include "runtime/errors.h"
#include "runtime/kernel_cache.h"

namespace tessel::cudagen {

using ir::Op;
using kir::Stmt;
using kir::StmtKind;

namespace {

// Storage type of a buffer element; f16/bf16 travel as their bits.
const char* storage_type(DType t) {
  switch (t) {
    case DType::f32: return "float";
    case DType::f64: return "double";
    case DType::i64: return "int64_t";
    case DType::i32: return "int32_t";
    case DType::b8: return "uint8_t";
    case DType::f16: case DType::bf16: return "uint16_t";
  }
  return "?";
}
// Type a value of dtype `t` has in the kernel.
const char* value_type(DType t) { return t == DType::b8 ? "bool" : storage_type(t); }
bool flt(DType t) { return t == DType::f32 || t == DType::f64; }
bool sint(DType t) { return t == DType::i32 || t == DType::i64; }
std::string lit(DType t, int v) {  // a small literal of a floating compute type
  return t == DType::f32 ? fmt::format("{}.0f", v) : fmt::format("{}.0", v);
}

[[noreturn]] void unsupported(std::string_view what, DType t) {
  throw InternalError(fmt::format("emit_cuda: no {} on {}", what, dtype_name(t)));
}

// `x` (dtype src) converted to dst with the ref interpreter's rules: integers
// and bool go through int64 (then double for floats), floats through double;
// halves through float.
std::string cast(const std::string& x, DType src, DType dst) {
  if (src == dst) return x;
  if (src == DType::f16) return cast(fmt::format("ts::half_to_float({})", x), DType::f32, dst);
  if (src == DType::bf16) return cast(fmt::format("ts::bf16_to_float({})", x), DType::f32, dst);
  if (dst == DType::f16) return fmt::format("ts::float_to_half({})", cast(x, src, DType::f32));
  if (dst == DType::bf16) return fmt::format("ts::float_to_bf16({})", cast(x, src, DType::f32));
  if (!flt(src)) {
    std::string i = fmt::format("((int64_t)({}))", x);
    switch (dst) {
      case DType::f32: return fmt::format("((float)(double){})", i);
      case DType::f64: return fmt::format("((double){})", i);
      case DType::i64: return i;
      case DType::i32: return fmt::format("((int32_t){})", i);
      case DType::b8: return fmt::format("({} != 0)", i);
      default: break;
    }
  } else {
    std::string d = fmt::format("((double)({}))", x);
    switch (dst) {
      case DType::f32: return fmt::format("((float){})", d);
      case DType::f64: return d;
      case DType::i64: return fmt::format("((int64_t){})", d);
      case DType::i32: return fmt::format("((int32_t)(int64_t){})", d);
      case DType::b8: return fmt::format("({} != 0.0)", d);
      default: break;
    }
  }
  throw InternalError(fmt::format("emit_cuda: no cast {} -> {}", dtype_name(src), dtype_name(dst)));
}

// One elementwise op as a C++ expression. `t` is the operands' dtype (the
// first value operand's: Where's condition is bool), `out` the result's.
std::string elementwise_expr(Op op, DType t, DType out, const std::vector<std::string>& a) {
  const bool f = flt(t), i = sint(t), u = t == DType::b8;
  const std::string& x = a[0];
  const std::string y = a.size() > 1 ? a[1] : std::string();
  const std::string z = f ? lit(t, 0) : "0", one = f ? lit(t, 1) : "1";
  const char* T = value_type(t);
  auto infix = [&](const char* sym) {  // integer results narrowed back to their type
    return i ? fmt::format("(({})({} {} {}))", T, x, sym, y) : fmt::format("({} {} {})", x, sym, y);
  };
  auto logical = [&](const char* sym) {  // 1 or 0 of the operands' type
    if (f) return fmt::format("(({0} != {2} {4} {1} != {2}) ? {3} : {2})", x, y, z, one, sym);
    return fmt::format("(({})({} != 0 {} {} != 0))", T, x, sym, y);
  };
  switch (op) {
    case Op::Neg:
      if (f) return fmt::format("(-{})", x);
      if (i) return fmt::format("(({})(-{}))", T, x);
      break;
    case Op::Abs:
      if (u) return x;
      if (f) return fmt::format("({0} < {1} ? -{0} : {0})", x, z);
      if (i) return fmt::format("({0} < 0 ? ({1})(-{0}) : {0})", x, T);
      break;
    case Op::Exp: if (f) return fmt::format("ts::exp({})", x); break;
    case Op::Log: if (f) return fmt::format("ts::log({})", x); break;
    case Op::Sqrt: if (f) return fmt::format("ts::sqrt({})", x); break;
    case Op::Tanh: if (f) return fmt::format("ts::tanh({})", x); break;
    case Op::Sigmoid: if (f) return fmt::format("({1} / ({1} + ts::exp(-{0})))", x, one); break;
    case Op::Relu:
      if (u) return x;
      if (f) return fmt::format("(({0} > {1} || {0} != {0}) ? {0} : {1})", x, z);  // NaN stays NaN
      if (i) return fmt::format("({0} > 0 ? {0} : ({1})0)", x, T);
      break;
    case Op::Sin: if (f) return fmt::format("ts::sin({})", x); break;
    case Op::Cos: if (f) return fmt::format("ts::cos({})", x); break;
    case Op::Erf: if (f) return fmt::format("ts::erf({})", x); break;
    case Op::Log1p: if (f) return fmt::format("ts::log1p({})", x); break;
    case Op::Expm1: if (f) return fmt::format("ts::expm1({})", x); break;
    case Op::Rsqrt: if (f) return fmt::format("ts::rsqrt({})", x); break;
    case Op::Reciprocal: if (f) return fmt::format("({} / {})", one, x); break;
    case Op::Sign:
      if (u) return x;
      return fmt::format("(({2})(({1} < {0}) - ({0} < {1})))", x, z, T);
    case Op::Floor:
      if (u || i) return x;
      if (f) return fmt::format("ts::floor({})", x);
      break;
    case Op::Ceil:
      if (u || i) return x;
      if (f) return fmt::format("ts::ceil({})", x);
      break;
    case Op::Round:
      if (u || i) return x;
      if (f) return fmt::format("ts::round({})", x);  // rint: half to even
      break;
    case Op::IsNan: if (f) return fmt::format("({0} != {0})", x); break;
    case Op::IsInf: if (f) return fmt::format("(ts::abs({}) == ts::inf_f64())", x); break;
    case Op::Not:
      if (u) return fmt::format("(!{})", x);
      if (f) return fmt::format("({0} == {1} ? {2} : {1})", x, z, one);
      if (i) return fmt::format("(({})({} == 0))", T, x);
      break;
    case Op::Cast: return cast(x, t, out);
    case Op::Add:
      if (u) return fmt::format("({} || {})", x, y);
      return infix("+");
    case Op::Sub: if (f || i) return infix("-"); break;
    case Op::Mul:
      if (u) return fmt::format("({} && {})", x, y);
      return infix("*");
    case Op::Div: if (f) return infix("/"); break;
    case Op::Pow: if (f) return fmt::format("ts::pow({}, {})", x, y); break;
    case Op::Maximum:
      if (u) return fmt::format("({} || {})", x, y);
      if (f) return fmt::format("(({0} != {0} || {0} > {1}) ? {0} : {1})", x, y);
      return fmt::format("({0} > {1} ? {0} : {1})", x, y);
    case Op::Minimum:
      if (u) return fmt::format("({} && {})", x, y);
      if (f) return fmt::format("(({0} != {0} || {0} < {1}) ? {0} : {1})", x, y);
      return fmt::format("({0} < {1} ? {0} : {1})", x, y);
    case Op::Eq: return fmt::format("({} == {})", x, y);
    case Op::Ne: return fmt::format("({} != {})", x, y);
    case Op::Lt: return fmt::format("({} < {})", x, y);
    case Op::Le: return fmt::format("({} <= {})", x, y);
    case Op::Gt: return fmt::format("({} > {})", x, y);
    case Op::Ge: return fmt::format("({} >= {})", x, y);
    case Op::And:
      if (u) return fmt::format("({} && {})", x, y);
      return logical("&&");
    case Op::Or:
      if (u) return fmt::format("({} || {})", x, y);
      return logical("||");
    case Op::Where: return fmt::format("({} ? {} : {})", a[0], a[1], a[2]);
    TESSEL_IR_CASES_NOT_ELEMENTWISE
      throw InternalError(fmt::format("emit_cuda: {} is not an elementwise op", ir::op_name(op)));
  }
  unsupported(ir::op_name(op), t);
}

std::string const_value(DType t, size_t arg) {
  std::string bits = fmt::format("A.a[{}]", arg);
  switch (t) {
    case DType::f64: return fmt::format("__longlong_as_double({})", bits);
    case DType::f32: return fmt::format("((float)__longlong_as_double({}))", bits);
    case DType::i64: return bits;
    case DType::i32: return fmt::format("((int32_t){})", bits);
    case DType::b8: return fmt::format("({} != 0)", bits);
    case DType::f16: case DType::bf16: return fmt::format("((uint16_t){})", bits);
  }
  return bits;
}

struct Writer {
  explicit Writer(const kir::Kernel& kernel) : k(kernel) {}
  const kir::Kernel& k;
  std::string out;
  int indent = 1;

  void line(const std::string& s) {
    out.append(static_cast<size_t>(indent) * 2, ' ');
    out += s;
    out += '\n';
  }

  // Statements reachable from `root` (dead ones would draw "declared but never referenced").
  static std::vector<bool> live(const std::vector<Stmt>& list, int root) {
    std::vector<bool> l(list.size(), false);
    if (root >= 0) l[static_cast<size_t>(root)] = true;
    for (size_t i = list.size(); i-- > 0;)
      if (l[i]) {
        for (int a : list[i].args) l[static_cast<size_t>(a)] = true;
        if (list[i].pred >= 0) l[static_cast<size_t>(list[i].pred)] = true;
        if (list[i].index >= 0) l[static_cast<size_t>(list[i].index)] = true;
      }
    return l;
  }

  // Slots a statement reads at the current element: a load's (1 + load slot)
  // or a coordinate's; -1 for none.
  int slot_of(const Stmt& s) const {
    if (s.kind == StmtKind::Load) return s.slot + 1;
    if (s.kind == StmtKind::Coord) return k.coord_slot(s.slot);
    return -1;
  }
  bool is_load_slot(int slot) const { return slot >= 1 && static_cast<size_t>(slot) <= k.load_params.size(); }

  // Moving slots the live body reads (loads and coordinates, by slot index).
  std::vector<bool> live_loads(const std::vector<bool>& lv) const {
    std::vector<bool> s(k.moving_slots(), false);
    for (size_t i = 0; i < k.body.size(); ++i)
      if (int sl = slot_of(k.body[i]); lv[i] && sl >= 0) s[static_cast<size_t>(sl)] = true;
    return s;
  }

  // Emits the statements as SSA values named <prefix><i>; `load(slot)` is the
  // stored value of a load slot at the current element.
  void stmts(const std::vector<Stmt>& list, const std::vector<bool>& lv, const char* prefix,
             const std::function<std::string(int)>& load) {
    for (size_t i = 0; i < list.size(); ++i) {
      if (!lv[i]) continue;
      const Stmt& s = list[i];
      auto a = [&](size_t j) { return fmt::format("{}{}", prefix, s.args[j]); };
      auto at = [&](size_t j) { return list[static_cast<size_t>(s.args[j])].dtype; };
      std::string e;
      switch (s.kind) {
        case StmtKind::Load: {
          if (s.pred < 0 && s.index < 0) {
            e = load(s.slot);
          } else {
            // Predicated or indexed loads run in the plain variants only, where
            // the element's offset in slot l is o<l + 1>.
            e = fmt::format("p{}[o{}{}]", k.load_params[static_cast<size_t>(s.slot)], s.slot + 1,
                            s.index >= 0 ? fmt::format(" + {}{}", prefix, s.index) : "");
            if (s.pred >= 0)
              e = fmt::format("({}{} ? {} : ({})0)", prefix, s.pred, e, storage_type(k.params[static_cast<size_t>(
                                                                            k.load_params[static_cast<size_t>(s.slot)])].dtype));
          }
          if (s.dtype == DType::b8) e = fmt::format("({} != 0)", e);
          break;
        }
        case StmtKind::Coord: e = fmt::format("o{}", k.coord_slot(s.slot)); break;
        case StmtKind::Const: e = const_value(s.dtype, k.const_base() + static_cast<size_t>(s.slot)); break;
        case StmtKind::Acc: e = "acc"; break;
        case StmtKind::Count: e = cast("count", DType::i64, s.dtype); break;
        case StmtKind::Stage: e = fmt::format("g{}", s.slot); break;
        case StmtKind::Op: {
          std::vector<std::string> args;
          for (size_t j = 0; j < s.args.size(); ++j) args.push_back(a(j));
          // The operands' dtype: Where's value operands', every other op's first.
          e = elementwise_expr(s.op, at(s.op == Op::Where ? 1 : 0), s.dtype, args);
          break;
        }
      }
      line(fmt::format("const {} {}{} = {};", value_type(s.dtype), prefix, i, e));
    }
  }

  std::string store(const std::string& v, DType t) { return t == DType::b8 ? fmt::format("(uint8_t)({})", v) : v; }

  // Splits `var` over dims [lo, hi) (innermost first), adding index * stride
  // to each listed slot's offset <prefix><slot> (o: the element's, r: the row's).
  void split(const std::string& var, int lo, int hi, const std::vector<int>& slots, const char* prefix = "o") {
    for (int d = hi - 1; d >= lo; --d) {
      line(fmt::format("{{  // dim {}", d));
      ++indent;
      if (d == lo) {
        line(fmt::format("const int64_t x = {};", var));
      } else {
        // Extent 1 costs nothing; an index inside the extent no division.
        line(fmt::format("const int64_t n = d{};", d));
        line(fmt::format("int64_t x = {};", var));
        line(fmt::format("if (n == 1) {{ x = 0; }} else if ({0} < n) {{ {0} = 0; }} else {{ x = {0} % n; {0} /= n; }}", var));
      }
      for (int s : slots) line(fmt::format("{0}{1} += x * s{1}_{2};", prefix, s, d));
      --indent;
      line("}");
    }
  }

  // --- what every kernel of this source shares ---
  int R = 1, K = 1;                       // rank; kept dims (all, for elementwise)
  bool red = false;
  std::vector<bool> lv;                    // live body statements
  std::vector<int> all_slots, load_slots;  // live slots: 0 the store, 1 + l load l
  std::string args_type;
  DType vt = DType::f32;                   // the body value's dtype
  // Reductions:
  DType at = DType::f64;
  const char* AT = "double";
  std::string init, combine;
  std::string partial = "partial";  // the shared array block_combine goes through

  void analyse(const std::string& name) {
    R = k.rank;
    red = k.reduce != kir::ReduceKind::None;
    K = red || k.row_program() ? R - k.reduce_rank : R;
    args_type = name + "_args";
    lv = live(k.body, k.value);
    std::vector<bool> ll = live_loads(lv);
    all_slots = {0};
    for (size_t l = 1; l < ll.size(); ++l)
      if (ll[l]) {
        all_slots.push_back(static_cast<int>(l));
        load_slots.push_back(static_cast<int>(l));
      }
    vt = k.body[static_cast<size_t>(k.value)].dtype;
    if (red) set_reduce(k.reduce, k.acc_dtype);
  }

  // The accumulator type, initial value and combine step of one reduction.
  void set_reduce(kir::ReduceKind r, DType acc_dtype) {
    at = acc_dtype;
    AT = value_type(at);
    const bool f = at == DType::f64;
    switch (r) {
      case kir::ReduceKind::Max: init = f ? "(-ts::inf_f64())" : "(-9223372036854775807LL - 1)"; break;
      case kir::ReduceKind::Min: init = f ? "ts::inf_f64()" : "9223372036854775807LL"; break;
      case kir::ReduceKind::Prod: init = f ? "1.0" : "1"; break;
      case kir::ReduceKind::Sum: case kir::ReduceKind::Mean: init = f ? "0.0" : "0"; break;
      case kir::ReduceKind::None: throw InternalError("emit_cuda: no accumulator for an elementwise kernel");
    }
    // combine(acc, v): NaN-propagating max/min, as the ref interpreter.
    switch (r) {
      case kir::ReduceKind::Sum: case kir::ReduceKind::Mean: combine = "{0} = {0} + {1};"; break;
      // An i64 product wraps on overflow, as torch.prod's.
      case kir::ReduceKind::Prod:
        combine = f ? "{0} = {0} * {1};" : "{0} = (int64_t)((uint64_t){0} * (uint64_t){1});";
        break;
      case kir::ReduceKind::Max:
        combine = f ? "{0} = ({0} != {0}) ? {0} : (({1} > {0} || {1} != {1}) ? {1} : {0});" : "{0} = {1} > {0} ? {1} : {0};";
        break;
      case kir::ReduceKind::Min:
        combine = f ? "{0} = ({0} != {0}) ? {0} : (({1} < {0} || {1} != {1}) ? {1} : {0});" : "{0} = {1} < {0} ? {1} : {0};";
        break;
      case kir::ReduceKind::None: throw InternalError("emit_cuda: unknown reduction");
    }
  }
  std::string comb(const std::string& acc, const std::string& v) const { return fmt::format(fmt::runtime(combine), acc, v); }

  // The kernel's opening: its signature (`extra` parameters after the
  // argument struct), the params it reads or writes, the dims, and the
  // strides of the store (kept dims) and of the live loads.
  void open(const std::string& name, const std::string& extra, bool store, bool loads, bool reduced_dims = true) {
    out += fmt::format("extern \"C\" __global__ void __launch_bounds__({}) {}(const {} A{}) {{\n", kBlockThreads, name,
                       args_type, extra);
    std::vector<bool> pl(k.params.size(), false);
    pl[0] = store;
    if (loads)
      for (int s : load_slots)
        if (is_load_slot(s)) pl[static_cast<size_t>(k.load_params[static_cast<size_t>(s - 1)])] = true;
    for (size_t p = 0; p < k.params.size(); ++p)
      if (pl[p])
        line(fmt::format("{}{}* __restrict__ p{} = A.p{};", p == 0 ? "" : "const ", storage_type(k.params[p].dtype), p, p));
    for (int d = 0; d < (reduced_dims ? R : K); ++d) line(fmt::format("const int64_t d{} = A.a[{}];", d, d));
    for (int s : all_slots) {
      if ((s == 0 && !store) || (s != 0 && !loads)) continue;
      size_t base = k.slot_base(s);
      for (int d = 0; d < R; ++d) {
        if (s == 0 && d >= K) continue;  // the store does not move along reduced dims
        line(fmt::format("const int64_t s{}_{} = A.a[{}];", s, d, base + 1 + static_cast<size_t>(d)));
      }
    }
  }
  void close() {
    indent = 1;
    out += "}\n";
  }

  std::string total() const {
    std::string t = "d0";
    for (int d = 1; d < R; ++d) t += fmt::format(" * d{}", d);
    return t;
  }

  // Elementwise, one element per thread and iteration.
  void elementwise(const std::string& name) {
    open(name, "", true, true);
    line(fmt::format("const int64_t total = {};", total()));
    line("for (int64_t i = ts::thread_index(); i < total; i += ts::grid_stride()) {");
    ++indent;
    for (int s : all_slots) line(fmt::format("int64_t o{} = A.a[{}];", s, k.slot_base(s)));
    line("int64_t t = i;");
    split("t", 0, R, all_slots);
    stmts(k.body, lv, "v", [&](int slot) { return fmt::format("p{}[o{}]", k.load_params[static_cast<size_t>(slot)], slot + 1); });
    line(fmt::format("p0[o0] = {};", store(fmt::format("v{}", k.value), vt)));
    --indent;
    line("}");
    close();
  }

  // Elementwise, W consecutive elements of the innermost dim per thread and
  // iteration, through vector loads and stores. Launched only when the launch
  // rule (vector_launch_ok) holds: the innermost extent is a multiple of W,
  // the store and every load walk it with stride 1 from a W-element-aligned
  // address, or (a load) with stride 0.
  void elementwise_vector(const std::string& name, unsigned W) {
    open(name, "", true, true);
    line(fmt::format("const int64_t total = ({}) / {};", total(), W));
    line("for (int64_t i = ts::thread_index(); i < total; i += ts::grid_stride()) {");
    ++indent;
    for (int s : all_slots) line(fmt::format("int64_t o{} = A.a[{}];", s, k.slot_base(s)));
    line(fmt::format("int64_t t = i * {};", W));
    split("t", 0, R, all_slots);
    for (int s : load_slots) {
      int p = k.load_params[static_cast<size_t>(s - 1)];
      line(fmt::format("{} l{}[{}];", storage_type(k.params[static_cast<size_t>(p)].dtype), s, W));
      line(fmt::format("if (s{0}_{1} == 0) {{ for (int w = 0; w < {2}; ++w) l{0}[w] = p{3}[o{0}]; }} "
                       "else {{ ts::load_vec(l{0}, p{3} + o{0}); }}",
                       s, R - 1, W, p));
    }
    line(fmt::format("{} r[{}];", storage_type(k.params[0].dtype), W));
    line(fmt::format("for (int w = 0; w < {}; ++w) {{", W));
    ++indent;
    stmts(k.body, lv, "v", [&](int slot) { return fmt::format("l{}[w]", slot + 1); });
    line(fmt::format("r[w] = {};", store(fmt::format("v{}", k.value), vt)));
    --indent;
    line("}");
    line("ts::store_vec(p0 + o0, r);");
    --indent;
    line("}");
    close();
  }

  // Offsets of a row (an index over the kept dims) for the listed slots,
  // into the declared <prefix><slot> variables.
  void row_offsets(const std::string& var, const std::vector<int>& slots, const char* prefix) {
    line(fmt::format("int64_t t = {};", var));
    split("t", 0, K, slots, prefix);
  }

  // acc += the body over reduced elements j = first, first + step, ... < end
  // of the row whose load offsets are r<slot>.
  void accumulate(const std::string& first, const std::string& end, const std::string& step) {
    line(fmt::format("for (int64_t j = {}; j < {}; j += {}) {{", first, end, step));
    ++indent;
    for (int s : load_slots) line(fmt::format("int64_t o{0} = r{0};", s));
    if (!load_slots.empty()) {
      line("int64_t u = j;");
      split("u", K, R, load_slots);
    }
    stmts(k.body, lv, "v", [&](int slot) { return fmt::format("p{}[o{}]", k.load_params[static_cast<size_t>(slot)], slot + 1); });
    line(comb("acc", cast(fmt::format("v{}", k.value), vt, at)));
    --indent;
    line("}");
  }

  // Combines the accumulators of a group's threads (warp shuffles, then one
  // partial per warp in shared memory); `finish` then runs in the group's
  // first warp, where lane 0 holds the total. `first` + warp indexes the
  // group's entries in partial[] (a group is a block row). Every thread of
  // the block reaches both barriers.
  void block_combine(const std::string& first, const std::function<void()>& finish) {
    line("for (int o = 16; o > 0; o >>= 1) {");
    ++indent;
    line(fmt::format("const {} other = __shfl_down_sync(0xffffffffu, acc, o);", AT));
    line(comb("acc", "other"));
    --indent;
    line("}");
    line(fmt::format("if (lane == 0) {}[{}warp] = acc;", partial, first));
    line("__syncthreads();");
    line("if (warp == 0) {");
    ++indent;
    line(fmt::format("acc = lane < nwarps ? {}[{}lane] : {};", partial, first, init));
    line("for (int o = 16; o > 0; o >>= 1) {");
    ++indent;
    line(fmt::format("const {} other = __shfl_down_sync(0xffffffffu, acc, o);", AT));
    line(comb("acc", "other"));
    --indent;
    line("}");
    finish();
    --indent;
    line("}");
    line("__syncthreads();  // partial[] is reused by the next iteration");
  }

  // The epilogue of row `row` (lane 0 of the finishing warp), stored at o0.
  void epilogue_and_store() {
    std::vector<bool> le = live(k.epilogue, k.result);
    stmts(k.epilogue, le, "e", [](int) -> std::string { throw InternalError("emit_cuda: a load in an epilogue"); });
    line(fmt::format("p0[o0] = {};", store(fmt::format("e{}", k.result), k.epilogue[static_cast<size_t>(k.result)].dtype)));
  }

  bool epilogue_counts() const {
    std::vector<bool> le = live(k.epilogue, k.result);
    for (size_t i = 0; i < k.epilogue.size(); ++i)
      if (le[i] && k.epilogue[i].kind == StmtKind::Count) return true;
    return false;
  }

  void reduce_locals(bool with_count) {
    std::string rows = "d0", count = fmt::format("d{}", K);
    for (int d = 1; d < K; ++d) rows += fmt::format(" * d{}", d);
    for (int d = K + 1; d < R; ++d) count += fmt::format(" * d{}", d);
    line(fmt::format("const int64_t rows = {};", rows));
    if (with_count) line(fmt::format("const int64_t count = {};", count));
    line(fmt::format("__shared__ {} partial[32];", AT));
    line("const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;");
  }

  // One pass: blockDim.y rows per block, blockDim.x threads per row.
  void reduce_single(const std::string& name) {
    open(name, "", true, true);
    reduce_locals(true);
    line("for (int64_t first = (int64_t)blockIdx.x * blockDim.y; first < rows; first += (int64_t)gridDim.x * blockDim.y) {");
    ++indent;
    line("const int64_t row = first + threadIdx.y;");
    line(fmt::format("{} acc = {};", AT, init));
    line("int64_t o0 = A.a[" + std::to_string(k.slot_base(0)) + "];");
    line("if (row < rows) {");
    ++indent;
    for (int s : load_slots) line(fmt::format("int64_t r{} = A.a[{}];", s, k.slot_base(s)));
    std::vector<int> row_slots{0};
    row_slots.insert(row_slots.end(), load_slots.begin(), load_slots.end());
    // o0 and the r<slot> both move with the row: split once into both.
    line("int64_t t = row;");
    for (int d = K - 1; d >= 0; --d) {
      line(fmt::format("{{  // kept dim {}", d));
      ++indent;
      if (d == 0) {
        line("const int64_t x = t;");
      } else {
        line(fmt::format("const int64_t n = d{};", d));
        line("int64_t x = t;");
        line("if (n == 1) { x = 0; } else if (t < n) { t = 0; } else { x = t % n; t /= n; }");
      }
      line(fmt::format("o0 += x * s0_{};", d));
      for (int s : load_slots) line(fmt::format("r{0} += x * s{0}_{1};", s, d));
      --indent;
      line("}");
    }
    accumulate("threadIdx.x", "count", "blockDim.x");
    --indent;
    line("}");
    block_combine("threadIdx.y * nwarps + ", [&] {
      line("if (lane == 0 && row < rows) {");
      ++indent;
      epilogue_and_store();
      --indent;
      line("}");
    });
    --indent;
    line("}");
    close();
  }

  // Split pass 1: block b (of rows * splits) reduces chunk b % splits of row
  // b / splits -- a contiguous 1/splits of its elements, read coalesced --
  // into partials[b]. One row per block.
  void reduce_partial(const std::string& name) {
    open(name, fmt::format(", {}* __restrict__ partials, const int64_t splits", AT), false, true);
    reduce_locals(true);
    line("for (int64_t b = blockIdx.x; b < rows * splits; b += gridDim.x) {");
    ++indent;
    line("const int64_t row = b / splits, chunk = b - row * splits;");
    line(fmt::format("{} acc = {};", AT, init));
    line("{");
    ++indent;
    for (int s : load_slots) line(fmt::format("int64_t r{} = A.a[{}];", s, k.slot_base(s)));
    if (!load_slots.empty()) row_offsets("row", load_slots, "r");
    line("const int64_t per = (count + splits - 1) / splits, end = per * (chunk + 1) < count ? per * (chunk + 1) : count;");
    accumulate("per * chunk + threadIdx.x", "end", "blockDim.x");
    --indent;
    line("}");
    block_combine("", [&] { line("if (lane == 0) partials[b] = acc;"); });
    --indent;
    line("}");
    close();
  }

  // Split pass 2: block per row; its threads combine the row's `splits`
  // partials in a fixed order, lane 0 runs the epilogue (a Mean divides by
  // the full count) and stores.
  void reduce_finish(const std::string& name) {
    const bool counts = epilogue_counts();
    open(name, fmt::format(", const {}* __restrict__ partials, const int64_t splits", AT), true, false, counts);
    reduce_locals(counts);
    line("for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {");
    ++indent;
    line(fmt::format("{} acc = {};", AT, init));
    line("for (int64_t j = threadIdx.x; j < splits; j += blockDim.x) {");
    ++indent;
    line(comb("acc", "partials[row * splits + j]"));
    --indent;
    line("}");
    block_combine("", [&] {
      line("if (lane == 0) {");
      ++indent;
      line("int64_t o0 = A.a[" + std::to_string(k.slot_base(0)) + "];");
      row_offsets("row", {0}, "o");
      epilogue_and_store();
      --indent;
      line("}");
    });
    --indent;
    line("}");
    close();
  }

  // --- row programs: a block per row ---
  // Load slots the live statements of `list` read (as slot + 1), into `used`.
  void note_loads(const std::vector<Stmt>& list, const std::vector<bool>& l, std::vector<bool>& used) const {
    for (size_t i = 0; i < list.size(); ++i)
      if (int sl = slot_of(list[i]); l[i] && sl >= 0) used[static_cast<size_t>(sl)] = true;
  }
  void note_stages(const std::vector<Stmt>& list, const std::vector<bool>& l, std::vector<bool>& read) const {
    for (size_t i = 0; i < list.size(); ++i)
      if (l[i] && list[i].kind == StmtKind::Stage) read[static_cast<size_t>(list[i].slot)] = true;
  }

  // A block per row (grid-stride over rows), blockDim.x threads striding
  // its elements. Each stage: every thread accumulates its share, the block
  // combines (warp shuffles, then shared memory), lane 0 runs the epilogue,
  // stores it if the stage is stored and publishes it in shared memory; after
  // the barrier every thread holds it in a register for the later passes.
  // The main part is one more such reduction or an elementwise pass over the
  // row. Every thread runs every loop and reaches every barrier.
  void row_program(const std::string& name) {
    const size_t S = k.stages.size();
    const bool main_red = k.reduce != kir::ReduceKind::None;
    std::vector<std::vector<bool>> slv(S);
    std::vector<std::vector<bool>> sle(S);
    std::vector<bool> used(k.moving_slots(), false), read(S, false);
    for (size_t i = 0; i < S; ++i) {
      slv[i] = live(k.stages[i].body, k.stages[i].value);
      sle[i] = live(k.stages[i].epilogue, k.stages[i].result);
      note_loads(k.stages[i].body, slv[i], used);
      note_stages(k.stages[i].body, slv[i], read);
    }
    note_loads(k.body, lv, used);
    note_stages(k.body, lv, read);
    std::vector<bool> le = main_red ? live(k.epilogue, k.result) : std::vector<bool>{};
    std::vector<int> loads;
    for (size_t l = 1; l < used.size(); ++l)
      if (used[l]) loads.push_back(static_cast<int>(l));

    out += fmt::format("extern \"C\" __global__ void __launch_bounds__({}) {}(const {} A) {{\n", kBlockThreads, name,
                       args_type);
    std::vector<bool> pl(k.params.size(), false);
    pl[0] = true;
    for (int s : loads)
      if (is_load_slot(s)) pl[static_cast<size_t>(k.load_params[static_cast<size_t>(s - 1)])] = true;
    for (const kir::Stage& g : k.stages)
      if (g.store >= 0) pl[static_cast<size_t>(g.store)] = true;
    for (size_t p = 0; p < k.params.size(); ++p)
      if (pl[p]) {
        bool written = k.params[p].output;
        line(fmt::format("{}{}* __restrict__ p{} = A.p{};", written ? "" : "const ", storage_type(k.params[p].dtype), p,
                         p));
      }
    for (int d = 0; d < R; ++d) line(fmt::format("const int64_t d{} = A.a[{}];", d, d));
    // Strides: loads move along every dim, the main store too when it is
    // elementwise, stage stores (and a reduction's store) along the kept dims only.
    std::vector<int> kept_slots{0}, inner_slots(loads);
    if (!main_red) inner_slots.insert(inner_slots.begin(), 0);
    for (size_t i = 0; i < S; ++i)
      if (k.stages[i].store >= 0) kept_slots.push_back(k.stage_store_slot(i));
    for (int s : inner_slots)
      for (int d = 0; d < R; ++d) line(fmt::format("const int64_t s{0}_{1} = A.a[{2}];", s, d, k.slot_base(s) + 1 + static_cast<size_t>(d)));
    for (int s : kept_slots) {
      if (s == 0 && !main_red) continue;
      for (int d = 0; d < K; ++d) line(fmt::format("const int64_t s{0}_{1} = A.a[{2}];", s, d, k.slot_base(s) + 1 + static_cast<size_t>(d)));
    }
    std::string rows = "d0", count = fmt::format("d{}", K);
    for (int d = 1; d < K; ++d) rows += fmt::format(" * d{}", d);
    for (int d = K + 1; d < R; ++d) count += fmt::format(" * d{}", d);
    line(fmt::format("const int64_t rows = {};", rows));
    line(fmt::format("const int64_t count = {};", count));
    line("const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;");
    std::vector<int> row_slots(kept_slots);
    row_slots.insert(row_slots.end(), loads.begin(), loads.end());
    for (size_t i = 0; i < S; ++i) {
      const kir::Stage& g = k.stages[i];
      line(fmt::format("__shared__ {} partial_s{}[32];", value_type(g.acc_dtype), i));
      if (read[i]) line(fmt::format("__shared__ {} stage_s{};", value_type(g.epilogue[static_cast<size_t>(g.result)].dtype), i));
    }
    if (main_red) line(fmt::format("__shared__ {} partial[32];", value_type(k.acc_dtype)));
    line("for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {");
    ++indent;
    for (int s : row_slots) line(fmt::format("int64_t r{} = A.a[{}];", s, k.slot_base(s)));
    line("{");
    ++indent;
    row_offsets("row", row_slots, "r");
    --indent;
    line("}");
    // acc += the list over the row's elements, as accumulate() does for a reduction kernel.
    // `stores`: the main store moves along the row too (the elementwise pass).
    auto pass = [&](const std::vector<Stmt>& body, const std::vector<bool>& l, const char* prefix, bool stores,
                    const std::function<void()>& use) {
      line("for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {");
      ++indent;
      std::vector<bool> reads(k.moving_slots(), false);
      note_loads(body, l, reads);
      std::vector<int> mv;
      if (stores) mv.push_back(0);
      for (int s : loads)
        if (reads[static_cast<size_t>(s)]) mv.push_back(s);
      for (int s : mv) line(fmt::format("int64_t o{0} = r{0};", s));
      if (!mv.empty()) {
        line("int64_t u = j;");
        split("u", K, R, mv);
      }
      stmts(body, l, prefix, [&](int slot) { return fmt::format("p{}[o{}]", k.load_params[static_cast<size_t>(slot)], slot + 1); });
      use();
      --indent;
      line("}");
    };
    for (size_t i = 0; i < S; ++i) {
      const kir::Stage& g = k.stages[i];
      set_reduce(g.reduce, g.acc_dtype);
      partial = fmt::format("partial_s{}", i);
      const DType gvt = g.body[static_cast<size_t>(g.value)].dtype, rt = g.epilogue[static_cast<size_t>(g.result)].dtype;
      line(fmt::format("{{  // stage {}: {}", i, kir::reduce_name(g.reduce)));
      ++indent;
      line(fmt::format("{} acc = {};", AT, init));
      std::string prefix = fmt::format("s{}v", i);
      pass(g.body, slv[i], prefix.c_str(), false, [&] { line(comb("acc", cast(fmt::format("{}{}", prefix, g.value), gvt, at))); });
      block_combine("", [&] {
        line("if (lane == 0) {");
        ++indent;
        std::string ep = fmt::format("s{}e", i);
        stmts(g.epilogue, sle[i], ep.c_str(), [](int) -> std::string { throw InternalError("emit_cuda: a load in an epilogue"); });
        if (g.store >= 0)
          line(fmt::format("p{}[r{}] = {};", g.store, k.stage_store_slot(i), store(fmt::format("{}{}", ep, g.result), rt)));
        if (read[i]) line(fmt::format("stage_s{} = {}{};", i, ep, g.result));
        --indent;
        line("}");
      });
      --indent;
      line("}");
      if (read[i]) line(fmt::format("const {} g{} = stage_s{};", value_type(rt), i, i));
    }
    if (main_red) {
      set_reduce(k.reduce, k.acc_dtype);
      partial = "partial";
      line(fmt::format("{} acc = {};", AT, init));
      pass(k.body, lv, "mv", false, [&] { line(comb("acc", cast(fmt::format("mv{}", k.value), vt, at))); });
      block_combine("", [&] {
        line("if (lane == 0) {");
        ++indent;
        stmts(k.epilogue, le, "e", [](int) -> std::string { throw InternalError("emit_cuda: a load in an epilogue"); });
        line(fmt::format("p0[r0] = {};", store(fmt::format("e{}", k.result), k.epilogue[static_cast<size_t>(k.result)].dtype)));
        --indent;
        line("}");
      });
    } else {
      pass(k.body, lv, "v", true, [&] { line(fmt::format("p0[o0] = {};", store(fmt::format("v{}", k.value), vt))); });
    }
    --indent;
    line("}");
    close();
  }

  void emit(const std::string& name) {
    analyse(name);
    // The kernel IR's text as a comment: a dumped source says what it computes.
    out += "// tessel kernel\n";
    {
      std::string t = k.text();
      size_t pos = 0;
      while (pos < t.size()) {
        size_t e = t.find('\n', pos);
        if (e == std::string::npos) e = t.size();
        out += "//   " + t.substr(pos, e - pos) + "\n";
        pos = e + 1;
      }
    }
    out += fmt::format("struct {} {{\n", args_type);
    for (size_t p = 0; p < k.params.size(); ++p)
      out += fmt::format("  {}{}* p{};\n", k.params[p].output ? "" : "const ", storage_type(k.params[p].dtype), p);
    out += fmt::format("  int64_t a[{}];\n}};\n", k.num_args());
    if (k.row_program()) {
      row_program(name);
    } else if (!red) {
      elementwise(name);
      if (!k.indexed()) elementwise_vector(variant_name(name, Variant::vector), vector_width(k));
    } else {
      reduce_single(name);
      reduce_partial(variant_name(name, Variant::partial));
      reduce_finish(variant_name(name, Variant::finish));
    }
  }
};

}  // namespace

std::string variant_name(const std::string& name, Variant v) {
  switch (v) {
    case Variant::plain: return name;
    case Variant::vector: return name + "_vec";
    case Variant::partial: return name + "_part";
    case Variant::finish: return name + "_fin";
  }
  return name;
}

std::vector<Variant> variants(const kir::Kernel& k) {
  if (k.row_program()) return {Variant::plain};
  if (k.reduce == kir::ReduceKind::None) {
    if (k.indexed()) return {Variant::plain};
    return {Variant::plain, Variant::vector};
  }
  return {Variant::plain, Variant::partial, Variant::finish};
}

std::string kernel_name(const kir::Kernel& k) {
  return "tessel_cu_" + make_key(k.text(), "cuda-emitter-1", "", "").to_hex();
}

unsigned vector_width(const kir::Kernel& k) {
  if (k.reduce != kir::ReduceKind::None || k.row_program() || k.indexed()) return 1;
  size_t widest = 1;
  for (const kir::Param& p : k.params) widest = std::max(widest, dtype_size(p.dtype));
  return static_cast<unsigned>(std::min<size_t>(4, 16 / widest));
}

std::string emit_cuda_body(const kir::Kernel& k, const std::string& name) {
  if (k.params.empty() || k.value < 0 || k.rank < 1) throw InternalError("emit_cuda: malformed kernel\n" + k.text());
  Writer w(k);
  w.emit(name);
  return std::move(w.out);
}

CudaSource emit_cuda(const kir::Kernel& k) {
  CudaSource s;
  s.name = kernel_name(k);
  s.args_type = s.name + "_args";
  s.source = std::string(cuda::prelude) + emit_cuda_body(k, s.name);
  s.num_bufs = k.params.size();
  s.num_args = k.num_args();
  return s;
}

namespace {
unsigned pow2_at_least(int64_t n) {
  unsigned p = 1;
  while (static_cast<int64_t>(p) < n && p < (1u << 30)) p <<= 1;
  return p;
}
}  // namespace

bool vector_launch_ok(const kir::Kernel& k, const std::vector<int64_t>& args, const std::vector<const void*>& bufs) {
  const unsigned W = vector_width(k);
  const int R = k.rank;
  if (W < 2 || bufs.size() != k.params.size() || args.size() != k.num_args()) return false;
  if (args[static_cast<size_t>(R - 1)] % W != 0) return false;
  for (size_t slot = 0; slot <= k.load_params.size(); ++slot) {
    const size_t p = slot == 0 ? 0 : static_cast<size_t>(k.load_params[slot - 1]);
    const size_t base = k.slot_base(static_cast<int>(slot));
    const int64_t inner = args[base + static_cast<size_t>(R)];
    if (inner == 0 && slot > 0) continue;  // one value per row, loaded once per group
    if (inner != 1) return false;
    // Every group starts at a multiple of W along the innermost dim, so its
    // first element is aligned when the slot's element 0 is and every outer
    // step keeps it so.
    const uint64_t bytes = uint64_t{W} * dtype_size(k.params[p].dtype);
    const auto addr = reinterpret_cast<uintptr_t>(bufs[p]) + static_cast<uint64_t>(args[base]) * dtype_size(k.params[p].dtype);
    if (addr % bytes != 0) return false;
    for (int d = 0; d < R - 1; ++d)
      if (args[static_cast<size_t>(d)] > 1 && args[base + 1 + static_cast<size_t>(d)] % W != 0) return false;
  }
  return true;
}

LaunchShape launch_shape(const kir::Kernel& k, const std::vector<int64_t>& args, const std::vector<const void*>& bufs,
                         const LaunchLimits& limits) {
  LaunchShape L;
  const unsigned max_blocks = std::max(limits.max_blocks, 1u);
  const int R = k.rank;
  if (args.size() != k.num_args())
    throw InternalError(fmt::format("launch_shape: {} arguments for a kernel of {}", args.size(), k.num_args()));
  if (k.row_program()) {
    // A block per row, threads enough for its elements (a whole number of
    // warps); long rows loop, so one block serves any length.
    const int K = R - k.reduce_rank;
    int64_t rows = 1, count = 1;
    for (int d = 0; d < K; ++d) rows *= args[static_cast<size_t>(d)];
    for (int d = K; d < R; ++d) count *= args[static_cast<size_t>(d)];
    if (rows <= 0) {
      L.empty = true;
      return L;
    }
    L.block_x = std::clamp(pow2_at_least(count), 32u, kBlockThreads);
    L.grid = static_cast<unsigned>(std::min<int64_t>(rows, max_blocks));
    return L;
  }
  if (k.reduce == kir::ReduceKind::None) {
    int64_t total = 1;
    for (int d = 0; d < R; ++d) total *= args[static_cast<size_t>(d)];
    if (total <= 0) {
      L.empty = true;
      return L;
    }
    if (limits.vectorize && vector_launch_ok(k, args, bufs)) {
      L.vector = vector_width(k);
      total /= L.vector;
    }
    L.block_x = kBlockThreads;
    L.grid = static_cast<unsigned>(std::min<int64_t>((total + kBlockThreads - 1) / kBlockThreads, max_blocks));
    return L;
  }
  const int K = R - k.reduce_rank;
  int64_t rows = 1, count = 1;
  for (int d = 0; d < K; ++d) rows *= args[static_cast<size_t>(d)];
  for (int d = K; d < R; ++d) count *= args[static_cast<size_t>(d)];
  if (rows <= 0) {
    L.empty = true;
    return L;
  }
  // Few outputs and many elements each: split each output across blocks, as
  // many as keep a block busy (split_min_elements), fit the grid beside the
  // other outputs, and one finishing block can combine.
  const int64_t per_block = std::max<int64_t>(limits.split_min_elements, 1);
  const int64_t splits = std::min<int64_t>({(count + per_block - 1) / per_block, max_blocks / rows, kMaxSplits});
  if (splits >= 2) {
    L.splits = static_cast<unsigned>(splits);
    L.block_x = kBlockThreads;
    L.block_y = 1;
    L.grid = static_cast<unsigned>(rows * splits);
    L.partials = rows * splits;
    L.finish_block = std::clamp(pow2_at_least(splits), 32u, kBlockThreads);
    L.finish_grid = static_cast<unsigned>(std::min<int64_t>(rows, max_blocks));
    return L;
  }
  // Threads per output: enough for its elements, a whole number of warps.
  L.block_x = std::clamp(pow2_at_least(count), 32u, kBlockThreads);
  L.block_y = std::min(kBlockThreads / L.block_x, pow2_at_least(rows));
  L.grid = static_cast<unsigned>(std::min<int64_t>((rows + L.block_y - 1) / L.block_y, max_blocks));
  return L;
}

LaunchShape launch_shape(const kir::Kernel& k, const std::vector<int64_t>& args, unsigned max_blocks) {
  return launch_shape(k, args, {},
                      {.max_blocks = max_blocks, .split_min_elements = std::numeric_limits<int64_t>::max(), .vectorize = false});
}

std::vector<std::byte> pack_args(const kir::Kernel& k, const std::vector<const void*>& bufs,
                                 const std::vector<int64_t>& args) {
  if (bufs.size() != k.params.size() || args.size() != k.num_args())
    throw InternalError(fmt::format("pack_args: {} buffers and {} arguments for a kernel of {} and {}", bufs.size(),
                                    args.size(), k.params.size(), k.num_args()));
  std::vector<std::byte> b((bufs.size() + args.size()) * 8);
  for (size_t i = 0; i < bufs.size(); ++i) std::memcpy(b.data() + 8 * i, &bufs[i], 8);
  if (!args.empty()) std::memcpy(b.data() + 8 * bufs.size(), args.data(), 8 * args.size());
  return b;
}

}  // namespace tessel::cudagen
