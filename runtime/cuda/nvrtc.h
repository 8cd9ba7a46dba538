// CUDA C++ → PTX / CUBIN with NVRTC.
//
// Sources are self-contained: they include no CUDA header and start with the
// tiny device prelude (runtime/cuda/prelude.h), which keeps a small kernel's
// compile around 20–30 ms.
//
//   using namespace tessel::cuda;
//   std::string src = std::string(prelude) + R"(
//     extern "C" __global__ void scale(float* x, float a, long long n) {
//       for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
//            i += (long long)gridDim.x * blockDim.x) x[i] *= a;
//     })";
//   CompiledKernel k = compile(src, "scale", {.arch = 90});   // k.ptx holds ".entry scale"
//
// A source that does not compile raises tessel::CompileError with the NVRTC log
// and the kernel name; with TESSEL_DUMP=<dir> every compiled source is written
// to <dir>/<name>.cu and the error names that file.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tessel::cuda {

struct CompileOptions {
  /// Compute capability as NVRTC spells it: 80 for 8.0, 90 for 9.0.
  int arch = 90;
  /// false: PTX for compute_<arch> (JIT-compiled by the driver, runs on <arch> and newer);
  /// true: CUBIN for sm_<arch> (runs only on that arch; no JIT at load).
  bool cubin = false;
  /// Pass --minimal when this NVRTC supports it (it drops the runtime-API
  /// declarations tessel's kernels never use, ~20% faster compiles).
  bool minimal = true;
  /// More NVRTC options, appended last (e.g. "--use_fast_math", "-lineinfo").
  std::vector<std::string> extra;
};

struct CompiledKernel {
  std::string ptx;          // when !cubin
  std::vector<char> cubin;  // when cubin
  std::string log;          // NVRTC's log; empty for a clean compile (warnings are not silenced)
  double compile_ms = 0;    // wall time of the NVRTC calls
};

/// True when this build of tessel has NVRTC (TESSEL_HAS_NVRTC).
bool nvrtc_available() noexcept;
/// "13.0"; CompileError when built without NVRTC.
std::string nvrtc_version();
/// Archs this NVRTC can target, e.g. {75, 80, 86, 89, 90, 100, 120}.
std::vector<int> nvrtc_supported_archs();
/// The exact NVRTC options compile() uses for `opts` (part of a kernel cache key).
std::vector<std::string> compile_flags(const CompileOptions& opts);

/// Compiles `source`; `name` labels the program (and the dumped file). Throws
/// tessel::CompileError with the log on failure, or when built without NVRTC.
CompiledKernel compile(std::string_view source, std::string_view name, const CompileOptions& opts = {});

}  // namespace tessel::cuda
