// kir::Kernel -> LLVM IR (one function), for the CPU backend. No LLVM header
// here: the types are only declared.
//
// The function is `void <symbol>(void** bufs, const int64_t* args, int64_t begin, int64_t end)`:
// bufs[p] points at param p's element 0, args are the launch arguments
// (kernel_ir.h) and [begin, end) is the range of outer rows to run, so a
// thread pool can split it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "codegen/kernel_ir.h"

namespace llvm {
class LLVMContext;
class Module;
}  // namespace llvm

namespace tessel::cpujit {

using KernelFn = void(void** bufs, const int64_t* args, int64_t begin, int64_t end);

/// Changes whenever the code emitted for a kernel changes, so cached objects
/// of an older emitter are not reused (part of the kernel cache key).
inline constexpr const char* kEmitterVersion = "emit14";
struct EmitOptions;
/// The part of the key that names an EmitOptions variant ("" for the plain one).
std::string variant_key(const EmitOptions& o);

/// Streaming stores. A memory-bound elementwise kernel that writes a large
/// output spends a sixth of its traffic reading output lines it is about to
/// overwrite (write-allocate). Non-temporal vector stores skip that read: on
/// this project's 2-core Xeon VM `relu(a*b+c)*d` over 16M f32 went from 20 to
/// 16.8 ms. Below the crossover they lose (the output leaves the cache the
/// next kernel would read it from): measured neutral at 16 MiB, 0.74x the time
/// at 32 MiB, 1.64x at 256 KiB. The streaming variant is a kernel of its own,
/// compiled only when a launch needs it (emitted into every elementwise
/// kernel, its extra loops made an MLP's first JIT call 40 -> 52 ms).
inline constexpr int64_t kStreamBytes = int64_t{16} << 20;

/// Kernels with a streaming variant: elementwise (no reduction, no row
/// program), numeric output, no transcendental calls (exp, log, tanh, pow,
/// sigmoid make a kernel compute-bound) and no half types.
bool streamable(const kir::Kernel& k);
/// Whether a launch of `k` over `rows` rows with launch arguments `args`
/// should run the streaming variant: it writes at least kStreamBytes, every
/// slot with unit stride along the innermost dim.
bool wants_streaming(const kir::Kernel& k, const int64_t* args, int64_t rows);

struct EmitOptions {
  /// Emit the streaming path: rows that write >= kStreamBytes with unit
  /// strides and an element-aligned output store whole cache lines with
  /// non-temporal stores (checked in the kernel, per call).
  bool streaming = false;
  /// A load param whose memory is the output's, read at the element being
  /// written (a matmul epilogue writing over the product it reads). Its loads
  /// use the output's pointer, index and alias scope, so the optimizer sees one
  /// address read then written and still vectorizes. Elementwise kernels only;
  /// the launch must give that param the output's offset and strides. -1: none.
  int output_alias_param = -1;
};

std::unique_ptr<llvm::Module> emit_llvm(const kir::Kernel& k, const std::string& symbol, llvm::LLVMContext& ctx,
                                       EmitOptions options = {});

/// The module's textual LLVM IR (for TESSEL_DUMP).
std::string module_text(const llvm::Module& m);

}  // namespace tessel::cpujit
