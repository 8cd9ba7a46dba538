// The CUDA engine of the two attention nodes (codegen/attention_geometry.h):
// CUDA C++ generated per (dtype, head dims D and Dv, mask kind, causal,
// dropout), compiled by NVRTC like every generated kernel (kernel cache,
// flags, precompiled registry, TESSEL_JIT=off), launched on the legacy
// default stream. Sizes, strides, scale, dropout probability and seed are
// kernel arguments, so one compiled source serves every shape and seed.
//
// Flash-attention style: the [Tq, Tk] scores are never stored.
//   forward (<name>_fwd): grid (ceil(Tq / fwd_rows), batch), one thread per
//     query row; tiles of fwd_keys keys of K and V staged in __shared__
//     memory, the row's running max and sum (online softmax) and its output
//     in registers (arrays sized by D, Dv); writes out and the row's lse.
//   backward, two kernels on the same stream:
//     <name>_dq:  same grid as the forward, one thread per query row:
//       delta_i = g_i . o_i (written to a scratch buffer for the next kernel),
//       then dq_i over the key tiles in shared memory;
//     <name>_dkv: grid (ceil(Tk / kv_rows), batch), one thread per key row,
//       over tiles of kv_queries queries (q, g, lse, delta in shared memory):
//       dk_j and dv_j.
// A fully masked row (lse -inf) has output 0 and zero gradients. Causal
// blocks skip the tiles the triangle masks out entirely. Dropout draws the
// same Philox4x32 numbers as runtime/philox.h (ir::attention_keep), so the
// keep pattern is bit-identical to the ref loops'.
//
//   AttentionSource s = emit_attention(attention_spec(DType::f32, geometry));
//   cuda::compile(s.source, s.name, {.arch = 90});   // s.forward, s.grad_q, s.grad_kv
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "codegen/attention_geometry.h"
#include "codegen/executor.h"
#include "codegen/ir.h"

namespace tessel::cudagen {

/// The largest head dim (D or Dv) the kernels take: each thread keeps a row
/// of that many elements in registers (spilled to local memory when large).
inline constexpr int64_t kAttentionMaxHeadDim = 256;

/// What one generated source is specialized for (compile-time constants).
struct AttentionSpec {
  DType dtype = DType::f32;  // f32 or f64
  int64_t d = 0, dv = 0;     // head dims of q/k and of v
  ir::AttentionMask mask = ir::AttentionMask::None;
  bool causal = false;
  bool dropout = false;      // dropout_p > 0
  bool operator==(const AttentionSpec&) const = default;
};
/// The spec of an attention node's kernels. CompileError for a dtype other
/// than f32/f64 or a head dim over kAttentionMaxHeadDim (the limit named).
AttentionSpec attention_spec(DType t, const ir::AttentionGeometry& g);

/// Tile sizes of a spec: at most 32 KiB of static shared memory per block.
struct AttentionTiles {
  int fwd_rows = 64;    // query rows (threads) per block of _fwd and _dq
  int fwd_keys = 32;    // keys per shared tile there (K and V rows)
  int kv_rows = 64;     // key rows (threads) per block of _dkv
  int kv_queries = 32;  // queries per shared tile there (q, g rows, lse, delta)
};
AttentionTiles attention_tiles(const AttentionSpec& s);

struct AttentionSource {
  std::string text;    // canonical description (the module's key; the precompiled registry's too)
  std::string name;    // "tessel_attn_f32_d64_v64_<mask><causal><dropout>": the kernels' common prefix
  std::string forward, grad_q, grad_kv;  // the three kernels' symbols
  std::string source;  // prelude + device code + the three kernels
};
AttentionSource emit_attention(const AttentionSpec& s);

/// The kernels' only parameter, as the host packs it (mirrors ts_attn::Args in
/// the source; every field 8 bytes). Pointers are device addresses of each
/// view's first element; strides in elements.
struct AttentionArgs {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const void* mask = nullptr;
  const void* g = nullptr;    // backward: the output's gradient
  const void* fwd = nullptr;  // backward: the forward's value (dense [batch, tq, dv + 1])
  void* out = nullptr;        // the node's value (dense)
  void* delta = nullptr;      // backward: scratch [batch, tq]
  int64_t batch = 0, inner = 1, tq = 0, tk = 0;
  int64_t q_outer = 0, q_inner = 0, q_row = 0;
  int64_t k_outer = 0, k_inner = 0, k_row = 0;
  int64_t v_outer = 0, v_inner = 0, v_row = 0;
  int64_t g_outer = 0, g_inner = 0, g_row = 0;
  int64_t m_outer = 0, m_inner = 0, m_row = 0, m_col = 0;
  double scale = 1.0, keep_scale = 1.0, p_drop = 0.0;
  uint64_t seed = 0;
};

/// The value of Attention or AttentionGrad node `n` on GPU `ordinal` from its
/// args' values there (any strides; operands that cannot be read in place are
/// copied dense by kernels launched on `ex`). f32/f64 only.
ir::BufferView attention_on_device(exec::StepExecutor& ex, int ordinal, const ir::Node& n,
                                   const std::vector<ir::BufferView>& args);

}  // namespace tessel::cudagen
