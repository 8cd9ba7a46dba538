// CPU kernels ahead of time: many kernel IRs -> ONE relocatable object file
// for the host, through the same LLVM emitter and O3 pipeline the CPU JIT
// uses (no vector math library, no fast math: the results equal the JIT's and
// the ref interpreter's), but position-independent with the small code model,
// so it links into ordinary (PIE) executables and shared libraries.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "codegen/kernel_ir.h"

namespace tessel::aot {

struct CpuObject {
  std::vector<char> bytes;  // an ELF (or the host's) relocatable object
  std::string target;       // "x86_64-pc-linux-gnu;sapphirerapids"
  std::string compiler;     // "LLVM 15.0.7"
};

/// Whether this build can write CPU objects (built with LLVM).
bool cpu_objects_available();

/// One function per (kernel, symbol), with the signature of codegen/cpu/llvm_emitter.h.
/// `cpu` is "host" (this machine's CPU and features) or an LLVM CPU name
/// ("x86-64-v3") for a portable object. Throws CompileError.
CpuObject compile_cpu_object(const std::vector<std::pair<const kir::Kernel*, std::string>>& kernels,
                             const std::string& cpu = "host");

}  // namespace tessel::aot
