// emit_cuda: a kir::Kernel becomes self-contained CUDA C++ (the device prelude,
// then one `extern "C" __global__` kernel; no CUDA header), which NVRTC
// compiles and which the host compiles too, against the test-only emulation
// header, so tests run the exact text a GPU runs.
//
// Launch arguments travel by value in one struct, the kernel's only parameter:
//   struct <name>_args { T0* p0; const T1* p1; ...; int64_t a[num_args]; };
// p<i> points at element 0 of param i's storage (offsets are in `a`), and `a`
// is the kernel IR's int64 launch-argument array, laid out as for the CPU
// kernels (dims | store slot | load slots | constants; see kernel_ir.h). No
// device memory is needed for arguments, and a kernel's parameter block stays
// far below the 4 KiB limit (rank 8 with 16 loads is ~1.3 KiB).
//
// Shapes of the code (each source holds every variant; the launch picks one):
//   - elementwise: a grid-stride loop over the flattened domain; each index is
//     split into a multi-index by the dims (a dim of extent 1 costs nothing, the
//     innermost one no division when it covers the domain), and each slot's
//     offset is offset + sum(index[d] * stride[d]);
//   - elementwise, vectorized (<name>_vec): the same loop over groups of W
//     consecutive innermost elements (W = vector_width(k): 16-byte float4 /
//     double2-style accesses, 4 elements at most), one index split per group,
//     vector loads and stores; launched only where launch_shape finds every
//     slot aligned and contiguous along the innermost dim;
//   - reduction: blockDim.y output elements per block, blockDim.x threads
//     (a multiple of 32) per output element striding its reduced elements;
//     warp shuffles (__shfl_down_sync), then one partial per warp in shared
//     memory, combined by the row's first warp, which applies the epilogue and
//     stores. All threads of a block run the same number of outer iterations,
//     so every __syncthreads is reached by all of them;
//   - reduction split across blocks (few outputs, long reduced extent):
//     <name>_part, `splits` blocks per output, each reducing a contiguous
//     share of its elements into partials[row * splits + chunk] (accumulator
//     dtype), then <name>_fin, a block per output combining its partials in a
//     fixed order and running the epilogue (a Mean divides by the full count).
//     No atomics: the result does not depend on how blocks are scheduled.
//   - row program (kernel_ir.h): a block per row, grid-stride over rows;
//     each stage is one pass of the block's threads over the row, combined
//     as a reduction's (warp shuffles, shared memory), its result shared
//     through shared memory behind a __syncthreads; then the main pass. No
//     split or vectorized variant: a long row loops within its block.
//
//   cudagen::CudaSource s = cudagen::emit_cuda(kernel);
//   auto ptx = cuda::compile(s.source, s.name, {.arch = 90});
//   auto shape = cudagen::launch_shape(kernel, lowered.args, buffer_pointers, {.max_blocks = 32 * sm_count});
//   auto bytes = cudagen::pack_args(kernel, buffer_pointers, lowered.args);
//   void* params[] = {bytes.data()};
//   cuda::launch_kernel(fn, {shape.grid}, {shape.block_x, shape.block_y}, 0, stream, params);
//   // shape.vector > 1: launch s.name + "_vec" instead; shape.splits > 1: the
//   // two passes, with {bytes.data(), &partials, &splits} (see LaunchShape).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "codegen/kernel_ir.h"

namespace tessel::cudagen {

struct CudaSource {
  std::string name;       // the kernel's symbol: "tessel_cu_<32 hex digits of the kernel text's hash>"
  std::string args_type;  // the argument struct: "<name>_args"
  std::string source;     // prelude + struct + kernels (every variant)
  size_t num_bufs = 0;    // pointers at the front of the struct
  size_t num_args = 0;    // int64 launch arguments after them
};

/// The kernels one source defines besides <name>: the vectorized elementwise
/// one, and the two passes of a reduction split across blocks.
enum class Variant : uint8_t { plain, vector, partial, finish };
/// "<name>", "<name>_vec", "<name>_part", "<name>_fin".
std::string variant_name(const std::string& name, Variant v);
/// The kernels the source for `k` defines, <name> first: elementwise kernels
/// have the vectorized one, reductions the two split passes, row programs
/// only <name>.
std::vector<Variant> variants(const kir::Kernel& k);

/// The symbol of the kernel generated for `k`: equal for equal kernel texts.
std::string kernel_name(const kir::Kernel& k);
/// Source for `k` (prelude included: include-guarded, so many kernels may share a file).
CudaSource emit_cuda(const kir::Kernel& k);
/// Source without the prelude.
std::string emit_cuda_body(const kir::Kernel& k, const std::string& name);

/// Elements per thread of the vectorized variant of an elementwise kernel:
/// 16 bytes of its widest dtype, at most 4 (f32: 4, f64/i64: 2, f16: 4); 1 for a reduction.
unsigned vector_width(const kir::Kernel& k);

/// Threads per block of an elementwise launch, and the most of a reduction's.
inline constexpr unsigned kBlockThreads = 256;
/// A reduction is split across blocks only if each block gets at least this
/// many reduced elements (16 per thread): fewer would not pay for the second pass.
inline constexpr int64_t kSplitMinElements = 4096;
/// The most blocks one output is split across (the second pass combines them in one block).
inline constexpr unsigned kMaxSplits = 1024;

struct LaunchLimits {
  /// Caps the grid (e.g. 32 x the SM count); the loops stride.
  unsigned max_blocks = 1;
  /// See kSplitMinElements (tests lower it to split small reductions).
  int64_t split_min_elements = kSplitMinElements;
  /// false: never the vectorized variant.
  bool vectorize = true;
};

struct LaunchShape {
  unsigned grid = 1, block_x = 1, block_y = 1;
  bool empty = false;  // nothing to compute: skip the launch
  /// Elementwise: > 1 launches <name>_vec (`vector` elements per thread) with grid/block.
  unsigned vector = 1;
  /// Reduction: > 1 splits each output across `splits` blocks: <name>_part with
  /// grid/block and the extra parameters (accumulator* partials, int64 splits),
  /// where partials holds `partials` accumulator-dtype elements, then <name>_fin
  /// with finish_grid/finish_block (block_y 1) and the same parameters.
  unsigned splits = 1;
  int64_t partials = 0;
  unsigned finish_grid = 0, finish_block = 0;
};

/// Grid, block and variant for launching `k` with these launch arguments over
/// buffers at `bufs` (element 0 of each param's storage, as pack_args takes
/// them): a pure function of its inputs. Vectorized when vector_launch_ok;
/// split when there are few outputs (at least two blocks each within
/// max_blocks) and each block of a split still gets split_min_elements.
LaunchShape launch_shape(const kir::Kernel& k, const std::vector<int64_t>& args, const std::vector<const void*>& bufs,
                         const LaunchLimits& limits);
/// The launch of the plain kernel alone (never vectorized, never split): for
/// a module that lacks the variants, e.g. an ahead-of-time image older than them.
LaunchShape launch_shape(const kir::Kernel& k, const std::vector<int64_t>& args, unsigned max_blocks);

/// Whether the vectorized variant (width vector_width(k)) may run these
/// arguments: the innermost extent is a multiple of the width, and the store
/// and every load either walk the innermost dim with stride 1 -- from an
/// address aligned to width x element size, with every outer stride a
/// multiple of the width -- or (loads only) with stride 0.
bool vector_launch_ok(const kir::Kernel& k, const std::vector<int64_t>& args, const std::vector<const void*>& bufs);

/// The bytes of the argument struct: buffer pointers then the int64 arguments.
std::vector<std::byte> pack_args(const kir::Kernel& k, const std::vector<const void*>& bufs,
                                 const std::vector<int64_t>& args);

}  // namespace tessel::cudagen
