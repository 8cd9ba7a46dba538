// Precompiled kernels: kernels compiled ahead of time (see codegen/aot/ and
// dsl/aot.h) and linked into the program, registered at start-up by the
// generated C++ source of an export. The backends consult this registry
// BEFORE they compile anything, so a program linked with an export runs its
// model with no JIT compile at all.
//
//   // in the generated <name>_kernels.cpp (a static initializer):
//   tessel::precompiled::Entry e;
//   e.text = "...kernel text...";  e.key_hex = "…";  e.cpu_fn = &tessel_aot_mlp_0123…;
//   tessel::precompiled::register_kernel(e);
//   // in the CPU backend:
//   if (const auto* k = tessel::precompiled::find(kernel_text)) use(k->cpu_fn);
//
// Entries are found by the canonical kernel IR text (codegen/kernel_ir.h),
// which is backend-neutral: one entry carries the host function and the CUDA
// images of the same kernel. `TESSEL_JIT=off` (or 0/false/no) makes every
// compile attempt of the CPU and CUDA backends throw CompileError instead, so
// a deployment can prove it needs neither LLVM nor NVRTC.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/kernel_cache.h"

namespace tessel::precompiled {

/// One CUDA image of a kernel: PTX text (NUL-terminated) or a CUBIN.
struct CudaImage {
  int arch = 0;          // 80 for compute_80 / sm_80
  bool cubin = false;    // false: PTX for compute_<arch>; true: CUBIN for sm_<arch>
  const char* data = nullptr;
  std::size_t size = 0;  // bytes (PTX: without the terminating NUL)
};

struct Entry {
  std::string_view set;        // the export's name ("mlp")
  std::string_view text;       // canonical kernel IR text
  std::string_view key_hex;    // text_key(text).to_hex(), checked at registration
  void* cpu_fn = nullptr;      // void(void** bufs, const int64_t* args, int64_t begin, int64_t end), or null
  std::string_view cpu_target; // triple;cpu the object was compiled for
  std::string_view cuda_name;  // the CUDA kernel's symbol, or empty
  std::vector<CudaImage> cuda;
};

/// The key of a kernel by its canonical text (independent of backend and compiler).
KernelKey text_key(std::string_view kernel_text);

/// Adds an entry (its strings and images must outlive the program, as the
/// generated code's literals do). An entry whose key does not match its text
/// is rejected: it is counted, its reason kept in errors(), and never found.
/// A second entry for the same key is ignored (same text, same code). Never throws.
void register_kernel(const Entry& e);

/// The entry for a kernel text, or null (always null under TESSEL_PRECOMPILED=off,
/// which makes a program with linked-in kernels compile as if it had none).
const Entry* find(std::string_view kernel_text);
const Entry* find(const KernelKey& key);
/// The CUDA image to load on a device of compute capability `arch`: the CUBIN
/// for exactly that arch, else the PTX of the highest arch <= it; null if none.
const CudaImage* best_cuda_image(const Entry& e, int arch);

std::size_t size();
std::vector<std::string> errors();

struct Stats {
  std::uint64_t registered = 0;
  std::uint64_t rejected = 0;
  std::uint64_t cpu_hits = 0;   // kernels a backend took from here instead of compiling
  std::uint64_t cuda_hits = 0;
  std::uint64_t misses = 0;     // lookups that found nothing (the JIT then compiles)
};
Stats stats();
void note_hit(bool cuda);
void note_miss();
void reset_stats();  // hits and misses only

/// Whether TESSEL_JIT is "off", "0", "false" or "no" (read on every call, so tests can flip it).
bool jit_disabled();
/// Throws CompileError saying the JIT is off and which kernel was not precompiled.
[[noreturn]] void throw_jit_disabled(std::string_view backend, std::string_view kernel_text);

}  // namespace tessel::precompiled
