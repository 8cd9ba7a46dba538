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
// Shapes of the code:
//   - elementwise: a grid-stride loop over the flattened domain; each index is
//     split into a multi-index by the dims (a dim of extent 1 costs nothing, the
//     innermost one no division when it covers the domain), and each slot's
//     offset is offset + sum(index[d] * stride[d]);
//   - reduction: blockDim.y output elements per block, blockDim.x threads
//     (a multiple of 32) per output element striding its reduced elements;
//     warp shuffles (__shfl_down_sync), then one partial per warp in shared
//     memory, combined by the row's first warp, which applies the epilogue and
//     stores. All threads of a block run the same number of outer iterations,
//     so every __syncthreads is reached by all of them.
//
//   cudagen::CudaSource s = cudagen::emit_cuda(kernel);
//   auto ptx = cuda::compile(s.source, s.name, {.arch = 90});
//   auto shape = cudagen::launch_shape(kernel, lowered.args, 4 * sm_count);
//   auto bytes = cudagen::pack_args(kernel, buffer_pointers, lowered.args);
//   void* params[] = {bytes.data()};
//   cuda::launch_kernel(fn, {shape.grid}, {shape.block_x, shape.block_y}, 0, stream, params);
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
  std::string source;     // prelude + struct + kernel
  size_t num_bufs = 0;    // pointers at the front of the struct
  size_t num_args = 0;    // int64 launch arguments after them
};

/// The symbol of the kernel generated for `k`: equal for equal kernel texts.
std::string kernel_name(const kir::Kernel& k);
/// Source for `k` (prelude included: include-guarded, so many kernels may share a file).
CudaSource emit_cuda(const kir::Kernel& k);
/// Source without the prelude.
std::string emit_cuda_body(const kir::Kernel& k, const std::string& name);

/// Threads per block of an elementwise launch, and the most of a reduction's.
inline constexpr unsigned kBlockThreads = 256;

struct LaunchShape {
  unsigned grid = 1, block_x = 1, block_y = 1;
  bool empty = false;  // nothing to compute: skip the launch
};
/// Grid and block for launching `k` with these launch arguments; the loops
/// stride, so `max_blocks` only caps the grid (e.g. 32 x the SM count).
LaunchShape launch_shape(const kir::Kernel& k, const std::vector<int64_t>& args, unsigned max_blocks);

/// The bytes of the argument struct: buffer pointers then the int64 arguments.
std::vector<std::byte> pack_args(const kir::Kernel& k, const std::vector<const void*>& bufs,
                                 const std::vector<int64_t>& args);

}  // namespace tessel::cudagen
