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
//   dims[R] | store: offset, strides[R] | load i: offset, strides[R] ...
//   | coord c: offset, coefficients[R] | stage store j: offset, strides[R]
//   (row programs: one per stored stage) | const j: bits
// A coordinate is an affine function of the domain index, o + sum c_d * i_d,
// as an i64 value: where a pad, a concatenation or a mask asks "which source
// element is this, and is it inside?". It moves along the domain exactly as a
// load slot's element index does, so coalescing and splitting treat it alike.
// A float constant travels as the bits of a double, a half one as its 16-bit
// pattern, an integer/bool as its int64 value.
//
// A row program (stages non-empty) runs, per row (one index of the kept
// dims), its reduction stages in order over the row's reduced dims, then the
// main part: an elementwise body over the whole row (reduce None, storing
// every element of the full domain) or one more reduction. A later stage's
// body and the main body read an earlier stage's result (broadcast along the
// reduced dims) with a Stage statement. Softmax is max, sum(exp(x - max)),
// then exp(x - max) / sum: one pass over memory per stage, one kernel.
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
  Stage,   // row programs: the result of stage `slot` for the current row, as `dtype`
  Coord,   // coordinate `slot` (an affine function of the domain index) at the current element, i64
};

struct Stmt {
  StmtKind kind = StmtKind::Op;
  ir::Op op = ir::Op::Add;
  DType dtype = DType::f32;  // result dtype
  std::vector<int> args;     // indices of earlier statements in the same list
  int slot = 0;              // Load: load slot; Const: constant slot; Coord: coordinate
  // Load only: an earlier b8 statement; where false the load does not touch
  // memory and gives 0 (pads, concatenations and borders read only inside).
  int pred = -1;
  // Load only: an earlier i64 statement added to the slot's element index
  // (an index computed per element, e.g. a strided slice's gradient).
  int index = -1;
  bool operator==(const Stmt&) const = default;
};

// Each kind starts its accumulator at its identity: 0 (Sum, Mean), 1 (Prod),
// -inf / +inf or the integer extremes (Max, Min).
enum class ReduceKind : uint8_t { None, Sum, Mean, Max, Min, Prod };

struct Param {
  DType dtype = DType::f32;  // storage dtype
  bool output = false;
  bool operator==(const Param&) const = default;
};

/// One reduction of a row program, over the same domain as the main part.
struct Stage {
  ReduceKind reduce = ReduceKind::Sum;
  DType acc_dtype = DType::f64;  // as a reduction kernel's
  std::vector<Stmt> body;        // per row element; may read earlier stages
  int value = -1;                // body stmt accumulated
  std::vector<Stmt> epilogue;    // from Acc/Count; its result is what Stage statements read
  int result = -1;
  int store = -1;                // param its result is stored to per row (-1: kept in registers only)
  bool operator==(const Stage&) const = default;
};

struct Kernel {
  std::vector<Param> params;      // params[0] is the output
  std::vector<int> load_params;   // load slot -> param index
  // Per load slot: its stride along the innermost domain dim was 0 when the
  // kernel was lowered (a per-channel scale, a bias broadcast over a row), so
  // the emitter reads it once per row and the row still vectorizes. A launch
  // whose stride there is not 0 takes the general loop. Empty: none.
  std::vector<bool> invariant;
  // Per load slot: its stride along the innermost domain dim was 2, 3 or 4
  // when the kernel was lowered, along a row of 4 or more (a pool's window
  // views, every other element),
  // so the emitter's fast loop reads it at that constant stride, which LLVM
  // vectorizes as interleaved loads; 0: not such a slot. Only elementwise
  // kernels whose store is contiguous; a launch with other strides takes the
  // general loop. Empty: none.
  std::vector<uint8_t> interleave;
  // An elementwise kernel whose innermost dim had 2, 3 or 4 elements when it
  // was lowered, stored contiguously (the columns of a pool's windows): the
  // emitter computes a whole run of the dim above at once with the innermost
  // dim unrolled, so neighbouring stores are one vector (interleaved) instead
  // of a row of 2 per outer step. short_inner_steps: per store and load slot
  // (slot s at 2s), its strides along the dim above and the innermost dim at
  // lowering, which the fast loop reads at as constants; a launch with other
  // strides or another innermost extent computes row by row. 0: not such a kernel.
  int short_inner = 0;
  std::vector<uint8_t> short_inner_steps;
  int coords = 0;                 // coordinate slots
  std::vector<DType> const_types; // constant slot -> dtype
  int rank = 1;                   // iteration domain rank (>= 1)
  int reduce_rank = 0;            // trailing domain dims that are reduced (0: elementwise)
  ReduceKind reduce = ReduceKind::None;
  DType acc_dtype = DType::f64;   // accumulator dtype of a reduction
  std::vector<Stmt> body;         // per domain element (a reduction's prologue)
  int value = -1;                 // body stmt stored (elementwise) or accumulated (reduction)
  std::vector<Stmt> epilogue;     // per output element of a reduction, from Acc
  int result = -1;                // epilogue stmt stored
  std::vector<Stage> stages;      // row programs only (then reduce_rank > 0 even when reduce is None)

  int kept_rank() const { return rank - reduce_rank; }
  bool inner_invariant(size_t load_slot) const { return load_slot < invariant.size() && invariant[load_slot]; }
  /// The constant inner stride the fast loop reads load slot `load_slot` at: 0, 1 or interleave's.
  int64_t inner_step(size_t load_slot) const {
    if (inner_invariant(load_slot)) return 0;
    return load_slot < interleave.size() && interleave[load_slot] ? interleave[load_slot] : 1;
  }
  bool row_program() const { return !stages.empty(); }
  /// Stages whose result is stored (each has a store slot, in stage order).
  int stored_stages() const {
    int n = 0;
    for (const Stage& s : stages) n += s.store >= 0;
    return n;
  }
  /// Slots: 0 = the main store, 1 + i = load i, then the coordinates, then
  /// the stage stores. Slots [0, moving_slots()) move along reduced dims too.
  size_t num_slots() const { return moving_slots() + static_cast<size_t>(stored_stages()); }
  size_t moving_slots() const { return load_params.size() + 1 + static_cast<size_t>(coords); }
  int coord_slot(int c) const { return static_cast<int>(load_params.size()) + 1 + c; }
  /// Coordinates, predicated or indexed loads: element indices that are not
  /// one stride walk per slot (no vector-group or streaming variants).
  bool indexed() const;
  /// Predicated or indexed loads, in the body or a stage (indexed() without the coordinates).
  bool indexed_loads() const;
  /// Number of int64 launch arguments.
  size_t num_args() const { return const_base() + const_types.size(); }
  size_t slot_base(int slot) const {
    return static_cast<size_t>(rank) + static_cast<size_t>(slot) * static_cast<size_t>(rank + 1);
  }
  /// Slot of stage `s`'s store (its store must be >= 0).
  int stage_store_slot(size_t s) const {
    int j = 0;
    for (size_t i = 0; i < s; ++i) j += stages[i].store >= 0;
    return static_cast<int>(moving_slots()) + j;
  }
  size_t const_base() const { return slot_base(static_cast<int>(num_slots())); }

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
