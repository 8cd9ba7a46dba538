// Ahead-of-time kernels: the files of an export and how to read them back.
// The user-facing entry point is tessel::aot::export_kernels (dsl/aot.h),
// which traces a model (codegen/aot/trace.h) and calls write_artifacts.
//
// An export folder holds
//   manifest.json           every kernel (name, key, params/dtypes, launch rule,
//                           hashes, files) and the hash of every file
//   kir/<kernel>.kir        canonical kernel IR text (what the backends look up)
//   cuda/<kernel>.cu        CUDA C++; .sm80.ptx / .sm90.ptx / .sm90.cubin via NVRTC
//   <name>.o                every CPU kernel in one host object file
//   <name>_kernels.{h,cpp}  C++ that registers all of them at start-up with
//                           runtime/precompiled_kernels.h (a static initializer)
//
//   aot::Manifest m = aot::read_manifest("out/mlp");   // throws ArtifactError if anything was edited
//   for (auto& k : m.kernels) fmt::print("{} {}\n", k.name, k.key);
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "codegen/aot/trace.h"
#include "runtime/errors.h"

namespace tessel::aot {

/// A missing, edited or corrupted export file.
struct ArtifactError : Error { using Error::Error; };

/// Which optimizer's steps an export traces: dsl/aot.h defines it (aot::sgd,
/// aot::adam, aot::adamw, aot::optimizer); here it is only carried along.
struct OptimizerSpec;

struct ExportOptions {
  std::string name = "kernels";      // C identifier: file names and symbol prefix
  bool backward = false;             // also trace backward (dsl/aot.h)
  std::shared_ptr<const OptimizerSpec> optimizer;  // with backward: also trace optimizer steps
  bool cpu = true;                   // write the host object
  std::string cpu_target = "host";   // or an LLVM CPU name ("x86-64-v3") for portable code
  bool cuda = true;                  // write .cu (and PTX/CUBIN when NVRTC is there)
  std::vector<int> ptx_archs = {80, 90};
  std::vector<int> cubin_archs = {90};
  bool generate_cpp = true;          // <name>_kernels.{h,cpp}
};

struct ManifestParam {
  std::string dtype;
  bool output = false;
};

struct ManifestKernel {
  std::string name;       // symbol of the CPU function and the CUDA kernel's file stem
  std::string key;        // precompiled::text_key(text) in hex
  std::string role;       // elementwise / reduce / copy
  std::string node;       // the op it materializes
  std::vector<ManifestParam> params;
  int rank = 0, reduce_rank = 0;
  std::string reduce;
  int64_t num_args = 0;
  std::string text_hash, source_hash;  // of the .kir and the .cu
  std::string cuda_name;               // the CUDA kernel symbol
  std::map<std::string, std::string> files;  // "kir", "cu", "ptx_80", "cubin_90" -> relative path
};

struct Manifest {
  int version = 1;
  std::string tessel_version, name;
  std::string cpu_object, cpu_target, cpu_compiler;  // empty when no CPU object
  std::string nvrtc_version;                         // empty without NVRTC
  std::vector<int> ptx_archs, cubin_archs;
  std::vector<ManifestKernel> kernels;
  std::map<std::string, std::string> files;          // relative path -> content hash
  std::vector<std::string> generated;                // the generated C++ (relative paths)
};

/// Writes every file of the export of `kernels` into `out_dir` (created) and returns its manifest.
Manifest write_artifacts(const std::vector<TracedKernel>& kernels, const std::filesystem::path& out_dir,
                         const ExportOptions& options);

/// Reads `<dir>/manifest.json` and checks it against the files: every listed
/// file exists with its hash, every kernel key matches its .kir text. Throws
/// ArtifactError naming the file and what is wrong.
Manifest read_manifest(const std::filesystem::path& dir);
/// Same without the file checks (only the JSON).
Manifest parse_manifest(const std::filesystem::path& manifest_json);

/// The hash written for file contents (32 hex digits).
std::string content_hash(std::string_view bytes);

}  // namespace tessel::aot
