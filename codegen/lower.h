// lower_to_kernel_ir: one scheduled step (a materialized node whose inputs
// all have values) becomes a kir::Kernel plus its launch arguments. Movement
// nodes inside the kernel become index remaps folded into each load's
// offset and strides; a reduction's domain is its kept axes then its reduced
// axes. Backend-neutral: the CPU and CUDA backends launch the same thing.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "codegen/ir.h"
#include "codegen/kernel_ir.h"

namespace tessel::lower {

/// A node's value if it has one (realized, or materialized by an earlier step).
using ValueOf = std::function<std::optional<ir::BufferView>(ir::Node*)>;
/// Makes a dense copy of a strided view (a reshape of a non-contiguous view needs one).
using DenseCopy = std::function<ir::BufferView(DType, const Shape&, const ir::BufferView&)>;

struct Lowered {
  kir::Kernel kernel;
  std::vector<ir::BufferView> buffers;  // per param; [0] is the output
  std::vector<int64_t> args;            // launch arguments (see kernel_ir.h)
  int64_t rows = 0;                     // outer iterations: product of the kept dims but the last (elementwise) or of all kept dims
};

/// `out` is a dense buffer of root's shape and dtype.
Lowered lower_to_kernel_ir(ir::Node& root, const ValueOf& value_of, const DenseCopy& copy, const ir::BufferView& out);

/// A row program: `stages` (reductions over one input shape and one set of
/// axes, keepdim, in dependency order) run per row, then `root` -- an
/// elementwise node of that input shape or one more such reduction -- reads
/// them. Stage i is stored to stage_out[i] when it has storage (a dense
/// buffer of its shape). The scheduler guarantees every stage is read only
/// through broadcasts along its row.
Lowered lower_row_program(ir::Node& root, const std::vector<ir::Node*>& stages,
                          const std::vector<ir::BufferView>& stage_out, const ValueOf& value_of,
                          const DenseCopy& copy, const ir::BufferView& out);

/// The int64 launch argument a constant node travels as (kernel_ir.h): a
/// float's double bits, a half's 16-bit pattern, an integer or bool as is.
int64_t constant_bits(const ir::Node& n);

/// A kernel copying a strided view into dense `out`.
Lowered lower_copy(DType t, const Shape& s, const ir::BufferView& in, const ir::BufferView& out);

/// The view a movement node gives over its argument's view (ir::movement_view;
/// a reshape no strides can express is a dense copy made by `copy`).
ir::BufferView movement_view(const ir::Node& n, const ir::BufferView& in, const DenseCopy& copy);

/// Whether every load of param `p` reads with the store's offset and strides,
/// so the kernel may write its result over p's memory element for element
/// (a matmul epilogue over its product, an in-place update over its tensor).
bool reads_in_store_layout(const Lowered& l, size_t p);

/// Marks the load slots whose stride along the innermost domain dim is 0 in
/// l.args (kir::Kernel::invariant), and in an elementwise kernel with a
/// contiguous store those at stride 2, 3 or 4 (kir::Kernel::interleave) or
/// a short contiguous innermost dim (kir::Kernel::short_inner); coalesce()
/// ends with it.
void mark_inner_strides(Lowered& l);

/// Merges adjacent domain dims every slot walks contiguously (within the kept
/// and the reduced group), keeping the rank by padding with size-1 dims, and
/// recomputes `rows`.
void coalesce(Lowered& l);

}  // namespace tessel::lower
