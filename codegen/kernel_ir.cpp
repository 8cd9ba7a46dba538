#include "codegen/kernel_ir.h"

#include <fmt/format.h>

namespace tessel::kir {

std::string_view reduce_name(ReduceKind r) {
  switch (r) {
    case ReduceKind::None: return "none";
    case ReduceKind::Sum: return "sum";
    case ReduceKind::Mean: return "mean";
    case ReduceKind::Max: return "max";
    case ReduceKind::Min: return "min";
    case ReduceKind::Prod: return "prod";
  }
  return "?";
}

namespace {
void print_stmts(std::string& s, const std::vector<Stmt>& list, const char* prefix) {
  for (size_t i = 0; i < list.size(); ++i) {
    const Stmt& st = list[i];
    s += fmt::format("  %{}{} = ", prefix, i);
    switch (st.kind) {
      case StmtKind::Load:
        s += fmt::format("load.{} l{}", dtype_name(st.dtype), st.slot);
        if (st.index >= 0) s += fmt::format(" +%{}{}", prefix, st.index);
        if (st.pred >= 0) s += fmt::format(" if %{}{}", prefix, st.pred);
        break;
      case StmtKind::Coord: s += fmt::format("coord.{} x{}", dtype_name(st.dtype), st.slot); break;
      case StmtKind::Const: s += fmt::format("const.{} c{}", dtype_name(st.dtype), st.slot); break;
      case StmtKind::Acc: s += fmt::format("acc.{}", dtype_name(st.dtype)); break;
      case StmtKind::Count: s += fmt::format("count.{}", dtype_name(st.dtype)); break;
      case StmtKind::Stage: s += fmt::format("stage.{} s{}", dtype_name(st.dtype), st.slot); break;
      case StmtKind::Op:
        s += fmt::format("{}.{}", ir::op_name(st.op), dtype_name(st.dtype));
        for (int a : st.args) s += fmt::format(" %{}{}", prefix, a);
        break;
    }
    s += "\n";
  }
}
}  // namespace

std::string Kernel::text() const {
  std::string s = fmt::format("kernel rank={} reduce={}/{}", rank, reduce_name(reduce), reduce_rank);
  if (reduce != ReduceKind::None) s += fmt::format(" acc={}", dtype_name(acc_dtype));
  s += "\n";
  for (size_t p = 0; p < params.size(); ++p)
    s += fmt::format("  param p{} {} {}\n", p, params[p].output ? "out" : "in", dtype_name(params[p].dtype));
  for (size_t l = 0; l < load_params.size(); ++l)
    s += fmt::format("  slot l{} p{}{}\n", l, load_params[l],
                     inner_invariant(l)   ? std::string(" invariant")
                     : inner_step(l) != 1 ? fmt::format(" stride{}", inner_step(l))
                                          : std::string());
  for (int c = 0; c < coords; ++c) s += fmt::format("  slot x{}\n", c);
  if (short_inner > 0) {
    s += fmt::format("  short inner {}, steps", short_inner);
    for (size_t i = 0; i + 1 < short_inner_steps.size(); i += 2)
      s += fmt::format(" ({}, {})", short_inner_steps[i], short_inner_steps[i + 1]);
    s += "\n";
  }
  for (size_t c = 0; c < const_types.size(); ++c) s += fmt::format("  slot c{} {}\n", c, dtype_name(const_types[c]));
  // Ordinary kernels print as before stages existed: their cache keys stay.
  for (size_t i = 0; i < stages.size(); ++i) {
    const Stage& g = stages[i];
    s += fmt::format("stage s{} {} acc={}", i, reduce_name(g.reduce), dtype_name(g.acc_dtype));
    if (g.store >= 0) s += fmt::format(" store p{}", g.store);
    s += "\n";
    print_stmts(s, g.body, fmt::format("s{}b", i).c_str());
    s += fmt::format("  accumulate %s{}b{}\n", i, g.value);
    print_stmts(s, g.epilogue, fmt::format("s{}e", i).c_str());
    s += fmt::format("  result %s{}e{}\n", i, g.result);
  }
  s += "body:\n";
  print_stmts(s, body, "");
  if (reduce == ReduceKind::None) {
    s += fmt::format("  store p0 %{}\n", value);
  } else {
    s += fmt::format("  accumulate %{}\nepilogue:\n", value);
    print_stmts(s, epilogue, "e");
    s += fmt::format("  store p0 %e{}\n", result);
  }
  return s;
}

namespace {
inline void mix(uint64_t& h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
}
void mix_stmts(uint64_t& h, const std::vector<Stmt>& list) {
  mix(h, list.size());
  for (const Stmt& st : list) {
    mix(h, static_cast<uint64_t>(st.kind) | static_cast<uint64_t>(st.op) << 8 | static_cast<uint64_t>(st.dtype) << 16 |
               static_cast<uint64_t>(static_cast<uint32_t>(st.slot)) << 24);
    mix(h, st.args.size());
    for (int a : st.args) mix(h, static_cast<uint64_t>(a));
    if (st.kind == StmtKind::Load) mix(h, static_cast<uint64_t>(st.pred + 1) | static_cast<uint64_t>(st.index + 1) << 32);
  }
}
}  // namespace

bool Kernel::indexed() const { return coords > 0 || indexed_loads(); }

bool Kernel::indexed_loads() const {
  auto any = [](const std::vector<Stmt>& list) {
    for (const Stmt& s : list)
      if (s.kind == StmtKind::Load && (s.pred >= 0 || s.index >= 0)) return true;
    return false;
  };
  if (any(body)) return true;
  for (const Stage& g : stages)
    if (any(g.body)) return true;
  return false;
}

uint64_t Kernel::hash() const {
  uint64_t h = 0;
  mix(h, static_cast<uint64_t>(rank) | static_cast<uint64_t>(reduce_rank) << 16 | static_cast<uint64_t>(reduce) << 32 |
             static_cast<uint64_t>(acc_dtype) << 40);
  mix(h, params.size());
  for (const Param& p : params) mix(h, static_cast<uint64_t>(p.dtype) << 1 | p.output);
  mix(h, load_params.size());
  for (int l : load_params) mix(h, static_cast<uint64_t>(l));
  for (bool v : invariant) mix(h, v);
  if (!interleave.empty()) {  // kernels without it keep their keys
    mix(h, 0x696e746c76ull);
    for (uint8_t v : interleave) mix(h, v);
  }
  if (short_inner > 0) {
    mix(h, 0x73686f7274ull | static_cast<uint64_t>(short_inner) << 40);
    for (uint8_t v : short_inner_steps) mix(h, v);
  }
  mix(h, static_cast<uint64_t>(coords));
  mix(h, const_types.size());
  for (DType t : const_types) mix(h, static_cast<uint64_t>(t));
  mix_stmts(h, body);
  mix(h, static_cast<uint64_t>(value));
  mix_stmts(h, epilogue);
  mix(h, static_cast<uint64_t>(result));
  for (const Stage& g : stages) {
    mix(h, static_cast<uint64_t>(g.reduce) | static_cast<uint64_t>(g.acc_dtype) << 8 |
               static_cast<uint64_t>(static_cast<uint32_t>(g.store)) << 16);
    mix_stmts(h, g.body);
    mix(h, static_cast<uint64_t>(g.value));
    mix_stmts(h, g.epilogue);
    mix(h, static_cast<uint64_t>(g.result));
  }
  return h;
}

}  // namespace tessel::kir
