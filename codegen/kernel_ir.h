// The kernel IR: one fused loop nest, backend-neutral. The scheduler cuts the
// IR DAG into kernels, lowering turns each into this form, and an emitter (the
// LLVM one for the CPU, the CUDA C++ one for GPUs) turns this into code.
//
// Nothing about shapes is baked in: the iteration domain's extents, every
// load's offset and per-dimension strides, the store's strides and every
// constant's value are launch arguments, so one compiled kernel serves all
// shapes (and scalar values) of one structure. The canonical text() is the
// kernel's source for cache keys and for TESSEL_DUMP.
//
// Launch-argument layout (int64 each), with R = rank:
//   dims[R] | store: offset, strides[R] | load i: offset, strides[R] ... | const j: bits
// A float constant travels as the bits of a double, a half one as its 16-bit
// pattern, an integer/bool as its int64 value.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "codegen/ir.h"

namespace tessel::kir {

enum class StmtKind : uint8_t {
  Load,    // value of load slot `slot` at the current element
  Const,   // value of constant slot `slot`
  Op,      // ir elementwise op `op` (Cast converts args[0] to `dtype`)
  Acc,     // epilogue only: the accumulator
  Count,   // epilogue only: number of reduced elements, as `dtype`
};

struct Stmt {
  StmtKind kind = StmtKind::Op;
  ir::Op op = ir::Op::Add;
  DType dtype = DType::f32;  // result dtype
  std::vector<int> args;     // indices of earlier statements in the same list
  int slot = 0;              // Load: load slot; Const: constant slot
  bool operator==(const Stmt&) const = default;
};

enum class ReduceKind : uint8_t { None, Sum, Mean, Max, Min };

struct Param {
  DType dtype = DType::f32;  // storage dtype
  bool output = false;
  bool operator==(const Param&) const = default;
};

struct Kernel {
  std::vector<Param> params;      // params[0] is the output
  std::vector<int> load_params;   // load slot -> param index
  std::vector<DType> const_types; // constant slot -> dtype
  int rank = 1;                   // iteration domain rank (>= 1)
  int reduce_rank = 0;            // trailing domain dims that are reduced (0: elementwise)
  ReduceKind reduce = ReduceKind::None;
  DType acc_dtype = DType::f64;   // accumulator dtype of a reduction
  std::vector<Stmt> body;         // per domain element (a reduction's prologue)
  int value = -1;                 // body stmt stored (elementwise) or accumulated (reduction)
  std::vector<Stmt> epilogue;     // per output element of a reduction, from Acc
  int result = -1;                // epilogue stmt stored

  int kept_rank() const { return rank - reduce_rank; }
  /// Number of int64 launch arguments.
  size_t num_args() const {
    return static_cast<size_t>(rank) + (load_params.size() + 1) * static_cast<size_t>(rank + 1) + const_types.size();
  }
  size_t slot_base(int slot) const {  // slot 0 = store, 1 + i = load i
    return static_cast<size_t>(rank) + static_cast<size_t>(slot) * static_cast<size_t>(rank + 1);
  }
  size_t const_base() const { return slot_base(static_cast<int>(load_params.size()) + 1); }

  /// Canonical text: equal for equal structures, whatever the shapes/values.
  std::string text() const;
  /// Equal structures, i.e. equal text(); hash() is consistent with it and
  /// cheap enough for a lookup on every launch (no text is built).
  bool operator==(const Kernel&) const = default;
  uint64_t hash() const;
};

struct KernelHash {
  size_t operator()(const Kernel& k) const { return static_cast<size_t>(k.hash()); }
};

std::string_view reduce_name(ReduceKind r);

}  // namespace tessel::kir
