#include "codegen/cuda/cuda_emitter.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <functional>

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

std::string unary(Op op, DType t, const std::string& x) {
  if (t == DType::b8) {
    if (op == Op::Abs || op == Op::Relu) return x;
    if (op == Op::Not) return fmt::format("(!{})", x);
  } else if (flt(t)) {
    const std::string z = lit(t, 0), one = lit(t, 1);
    switch (op) {
      case Op::Neg: return fmt::format("(-{})", x);
      case Op::Abs: return fmt::format("({0} < {1} ? -{0} : {0})", x, z);
      case Op::Exp: return fmt::format("ts::exp({})", x);
      case Op::Log: return fmt::format("ts::log({})", x);
      case Op::Sqrt: return fmt::format("ts::sqrt({})", x);
      case Op::Tanh: return fmt::format("ts::tanh({})", x);
      case Op::Sigmoid: return fmt::format("({1} / ({1} + ts::exp(-{0})))", x, one);
      case Op::Relu: return fmt::format("(({0} > {1} || {0} != {0}) ? {0} : {1})", x, z);  // NaN stays NaN
      case Op::Not: return fmt::format("({0} == {1} ? {2} : {1})", x, z, one);
      default: break;
    }
  } else if (sint(t)) {
    const char* T = value_type(t);
    switch (op) {
      case Op::Neg: return fmt::format("(({})(-{}))", T, x);
      case Op::Abs: return fmt::format("({0} < 0 ? ({1})(-{0}) : {0})", x, T);
      case Op::Relu: return fmt::format("({0} > 0 ? {0} : ({1})0)", x, T);
      case Op::Not: return fmt::format("(({})({} == 0))", T, x);
      default: break;
    }
  }
  unsupported(ir::op_name(op), t);
}

std::string binary(Op op, DType t, const std::string& a, const std::string& b) {
  if (t == DType::b8) {
    switch (op) {
      case Op::Add: case Op::Or: case Op::Maximum: return fmt::format("({} || {})", a, b);
      case Op::Mul: case Op::And: case Op::Minimum: return fmt::format("({} && {})", a, b);
      default: break;
    }
  } else if (flt(t)) {
    const std::string z = lit(t, 0), one = lit(t, 1);
    switch (op) {
      case Op::Add: return fmt::format("({} + {})", a, b);
      case Op::Sub: return fmt::format("({} - {})", a, b);
      case Op::Mul: return fmt::format("({} * {})", a, b);
      case Op::Div: return fmt::format("({} / {})", a, b);
      case Op::Pow: return fmt::format("ts::pow({}, {})", a, b);
      case Op::Maximum: return fmt::format("(({0} != {0} || {0} > {1}) ? {0} : {1})", a, b);
      case Op::Minimum: return fmt::format("(({0} != {0} || {0} < {1}) ? {0} : {1})", a, b);
      case Op::And: return fmt::format("(({0} != {2} && {1} != {2}) ? {3} : {2})", a, b, z, one);
      case Op::Or: return fmt::format("(({0} != {2} || {1} != {2}) ? {3} : {2})", a, b, z, one);
      default: break;
    }
  } else if (sint(t)) {
    const char* T = value_type(t);
    switch (op) {
      case Op::Add: return fmt::format("(({})({} + {}))", T, a, b);
      case Op::Sub: return fmt::format("(({})({} - {}))", T, a, b);
      case Op::Mul: return fmt::format("(({})({} * {}))", T, a, b);
      case Op::Maximum: return fmt::format("({0} > {1} ? {0} : {1})", a, b);
      case Op::Minimum: return fmt::format("({0} < {1} ? {0} : {1})", a, b);
      case Op::And: return fmt::format("(({})({} != 0 && {} != 0))", T, a, b);
      case Op::Or: return fmt::format("(({})({} != 0 || {} != 0))", T, a, b);
      default: break;
    }
  }
  unsupported(ir::op_name(op), t);
}

std::string compare(Op op, const std::string& a, const std::string& b) {
  const char* sym = nullptr;
  switch (op) {
    case Op::Eq: sym = "=="; break;
    case Op::Ne: sym = "!="; break;
    case Op::Lt: sym = "<"; break;
    case Op::Le: sym = "<="; break;
    case Op::Gt: sym = ">"; break;
    case Op::Ge: sym = ">="; break;
    default: throw InternalError("emit_cuda: unknown comparison");
  }
  return fmt::format("({} {} {})", a, sym, b);
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
      if (l[i])
        for (int a : list[i].args) l[static_cast<size_t>(a)] = true;
    return l;
  }

  // Load slots the live body reads (slot index is the load slot, not +1).
  std::vector<bool> live_loads(const std::vector<bool>& lv) const {
    std::vector<bool> s(k.load_params.size(), false);
    for (size_t i = 0; i < k.body.size(); ++i)
      if (lv[i] && k.body[i].kind == StmtKind::Load) s[static_cast<size_t>(k.body[i].slot)] = true;
    return s;
  }

  // Emits the statements as SSA values named <prefix><i>; `index(slot)` is a
  // load slot's element offset expression.
  void stmts(const std::vector<Stmt>& list, const std::vector<bool>& lv, const char* prefix,
             const std::function<std::string(int)>& index) {
    for (size_t i = 0; i < list.size(); ++i) {
      if (!lv[i]) continue;
      const Stmt& s = list[i];
      auto a = [&](size_t j) { return fmt::format("{}{}", prefix, s.args[j]); };
      auto at = [&](size_t j) { return list[static_cast<size_t>(s.args[j])].dtype; };
      std::string e;
      switch (s.kind) {
        case StmtKind::Load: {
          int p = k.load_params[static_cast<size_t>(s.slot)];
          e = fmt::format("p{}[{}]", p, index(s.slot));
          if (s.dtype == DType::b8) e = fmt::format("({} != 0)", e);
          break;
        }
        case StmtKind::Const: e = const_value(s.dtype, k.const_base() + static_cast<size_t>(s.slot)); break;
        case StmtKind::Acc: e = "acc"; break;
        case StmtKind::Count: e = cast("count", DType::i64, s.dtype); break;
        case StmtKind::Op:
          switch (ir::op_category(s.op)) {
            case ir::Category::Unary: e = s.op == Op::Cast ? cast(a(0), at(0), s.dtype) : unary(s.op, s.dtype, a(0)); break;
            case ir::Category::Binary: e = binary(s.op, s.dtype, a(0), a(1)); break;
            case ir::Category::Compare: e = compare(s.op, a(0), a(1)); break;
            case ir::Category::Ternary: e = fmt::format("({} ? {} : {})", a(0), a(1), a(2)); break;
            default: throw InternalError("emit_cuda: not an elementwise op");
          }
          break;
      }
      line(fmt::format("const {} {}{} = {};", value_type(s.dtype), prefix, i, e));
    }
  }

  std::string store(const std::string& v, DType t) { return t == DType::b8 ? fmt::format("(uint8_t)({})", v) : v; }

  // Splits `var` over dims [lo, hi) (innermost first), adding index * stride
  // to each listed slot's offset o<slot>.
  void split(const std::string& var, int lo, int hi, const std::vector<int>& slots) {
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
      for (int s : slots) line(fmt::format("o{0} += x * s{0}_{1};", s, d));
      --indent;
      line("}");
    }
  }

  void emit(const std::string& name) {
    const int R = k.rank;
    const bool red = k.reduce != kir::ReduceKind::None;
    const int K = red ? R - k.reduce_rank : R;  // kept dims (all, for elementwise)
    const std::string args_type = name + "_args";
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
      out += fmt::format("  {}{}* p{};\n", p == 0 ? "" : "const ", storage_type(k.params[p].dtype), p);
    out += fmt::format("  int64_t a[{}];\n}};\n", k.num_args());
    out += fmt::format("extern \"C\" __global__ void __launch_bounds__({}) {}(const {} A) {{\n", kBlockThreads, name,
                       args_type);

    std::vector<bool> lv = live(k.body, k.value);
    std::vector<bool> ll = live_loads(lv);
    std::vector<bool> pl(k.params.size(), false);  // params read
    pl[0] = true;
    for (size_t l = 0; l < ll.size(); ++l)
      if (ll[l]) pl[static_cast<size_t>(k.load_params[l])] = true;
    for (size_t p = 0; p < k.params.size(); ++p)
      if (pl[p])
        line(fmt::format("{}{}* __restrict__ p{} = A.p{};", p == 0 ? "" : "const ", storage_type(k.params[p].dtype), p, p));
    for (int d = 0; d < R; ++d) line(fmt::format("const int64_t d{} = A.a[{}];", d, d));
    // Slots: 0 the store, 1 + l load l; only live ones.
    std::vector<int> all_slots{0}, load_slots;
    for (size_t l = 0; l < ll.size(); ++l)
      if (ll[l]) {
        all_slots.push_back(static_cast<int>(l) + 1);
        load_slots.push_back(static_cast<int>(l) + 1);
      }
    for (int s : all_slots) {
      size_t base = k.slot_base(s);
      for (int d = 0; d < R; ++d) {
        if (s == 0 && d >= K) continue;  // the store does not move along reduced dims
        line(fmt::format("const int64_t s{}_{} = A.a[{}];", s, d, base + 1 + static_cast<size_t>(d)));
      }
    }
    auto index = [](int slot) { return fmt::format("o{}", slot + 1); };
    const DType vt = k.body[static_cast<size_t>(k.value)].dtype;

    if (!red) {
      std::string total = "d0";
      for (int d = 1; d < R; ++d) total += fmt::format(" * d{}", d);
      line(fmt::format("const int64_t total = {};", total));
      line("for (int64_t i = ts::thread_index(); i < total; i += ts::grid_stride()) {");
      ++indent;
      for (int s : all_slots) line(fmt::format("int64_t o{} = A.a[{}];", s, k.slot_base(s)));
      line("int64_t t = i;");
      split("t", 0, R, all_slots);
      stmts(k.body, lv, "v", index);
      line(fmt::format("p0[o0] = {};", store(fmt::format("v{}", k.value), vt)));
      --indent;
      line("}");
      out += "}\n";
      return;
    }

    const DType at = k.acc_dtype;
    const char* AT = value_type(at);
    const bool f = at == DType::f64;
    std::string init;
    switch (k.reduce) {
      case kir::ReduceKind::Max: init = f ? "(-ts::inf_f64())" : "(-9223372036854775807LL - 1)"; break;
      case kir::ReduceKind::Min: init = f ? "ts::inf_f64()" : "9223372036854775807LL"; break;
      default: init = f ? "0.0" : "0"; break;
    }
    // combine(acc, v): NaN-propagating max/min, as the ref interpreter.
    std::string combine;
    switch (k.reduce) {
      case kir::ReduceKind::Sum: case kir::ReduceKind::Mean: combine = "{0} = {0} + {1};"; break;
      case kir::ReduceKind::Max:
        combine = f ? "{0} = ({0} != {0}) ? {0} : (({1} > {0} || {1} != {1}) ? {1} : {0});" : "{0} = {1} > {0} ? {1} : {0};";
        break;
      case kir::ReduceKind::Min:
        combine = f ? "{0} = ({0} != {0}) ? {0} : (({1} < {0} || {1} != {1}) ? {1} : {0});" : "{0} = {1} < {0} ? {1} : {0};";
        break;
      default: throw InternalError("emit_cuda: unknown reduction");
    }
    auto comb = [&](const std::string& acc, const std::string& v) { return fmt::format(fmt::runtime(combine), acc, v); };

    std::string rows = "d0", count = fmt::format("d{}", K);
    for (int d = 1; d < K; ++d) rows += fmt::format(" * d{}", d);
    for (int d = K + 1; d < R; ++d) count += fmt::format(" * d{}", d);
    line(fmt::format("const int64_t rows = {};", rows));
    line(fmt::format("const int64_t count = {};", count));
    line(fmt::format("__shared__ {} partial[32];", AT));
    line("const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;");
    line("for (int64_t first = (int64_t)blockIdx.x * blockDim.y; first < rows; first += (int64_t)gridDim.x * blockDim.y) {");
    ++indent;
    line("const int64_t row = first + threadIdx.y;");
    line(fmt::format("{} acc = {};", AT, init));
    line("int64_t o0 = A.a[" + std::to_string(k.slot_base(0)) + "];");
    line("if (row < rows) {");
    ++indent;
    for (int s : load_slots) line(fmt::format("int64_t r{} = A.a[{}];", s, k.slot_base(s)));
    line("int64_t t = row;");
    {
      // Split the row over the kept dims into o0 and r<slot>.
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
    }
    line("for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {");
    ++indent;
    for (int s : load_slots) line(fmt::format("int64_t o{0} = r{0};", s));
    if (!load_slots.empty()) {
      line("int64_t u = j;");
      split("u", K, R, load_slots);
    }
    stmts(k.body, lv, "v", index);
    line(comb("acc", cast(fmt::format("v{}", k.value), vt, at)));
    --indent;
    line("}");
    --indent;
    line("}");
    // Warp, then block: lane 0 of each warp leaves a partial; the row's first warp combines them.
    line("for (int o = 16; o > 0; o >>= 1) {");
    ++indent;
    line(fmt::format("const {} other = __shfl_down_sync(0xffffffffu, acc, o);", AT));
    line(comb("acc", "other"));
    --indent;
    line("}");
    line("if (lane == 0) partial[threadIdx.y * nwarps + warp] = acc;");
    line("__syncthreads();");
    line("if (warp == 0) {");
    ++indent;
    line(fmt::format("acc = lane < nwarps ? partial[threadIdx.y * nwarps + lane] : {};", init));
    line("for (int o = 16; o > 0; o >>= 1) {");
    ++indent;
    line(fmt::format("const {} other = __shfl_down_sync(0xffffffffu, acc, o);", AT));
    line(comb("acc", "other"));
    --indent;
    line("}");
    line("if (lane == 0 && row < rows) {");
    ++indent;
    std::vector<bool> le = live(k.epilogue, k.result);
    stmts(k.epilogue, le, "e", [](int) -> std::string { throw InternalError("emit_cuda: a load in an epilogue"); });
    line(fmt::format("p0[o0] = {};", store(fmt::format("e{}", k.result), k.epilogue[static_cast<size_t>(k.result)].dtype)));
    --indent;
    line("}");
    --indent;
    line("}");
    line("__syncthreads();  // partial[] is reused by the next rows");
    --indent;
    line("}");
    out += "}\n";
  }
};

}  // namespace

std::string kernel_name(const kir::Kernel& k) {
  return "tessel_cu_" + make_key(k.text(), "cuda-emitter-1", "", "").to_hex();
}

std::string emit_cuda_body(const kir::Kernel& k, const std::string& name) {
  if (k.params.empty() || k.value < 0 || k.rank < 1) throw InternalError("emit_cuda: malformed kernel\n" + k.text());
  Writer w{k, {}};
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

LaunchShape launch_shape(const kir::Kernel& k, const std::vector<int64_t>& args, unsigned max_blocks) {
  LaunchShape L;
  max_blocks = std::max(max_blocks, 1u);
  const int R = k.rank;
  if (k.reduce == kir::ReduceKind::None) {
    int64_t total = 1;
    for (int d = 0; d < R; ++d) total *= args[static_cast<size_t>(d)];
    if (total <= 0) {
      L.empty = true;
      return L;
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
  // Threads per output: enough for its elements, a whole number of warps.
  L.block_x = std::clamp(pow2_at_least(count), 32u, kBlockThreads);
  L.block_y = std::min(kBlockThreads / L.block_x, pow2_at_least(rows));
  L.grid = static_cast<unsigned>(std::min<int64_t>((rows + L.block_y - 1) / L.block_y, max_blocks));
  return L;
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
