#include "runtime/cuda/nvrtc.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <system_error>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "runtime/errors.h"
#include "tessel/config.h"

#if TESSEL_HAS_NVRTC
#include <nvrtc.h>
#endif

namespace tessel::cuda {
namespace {

// TESSEL_DUMP=<dir>: every source handed to NVRTC lands in <dir>/<name>.cu, so a
// failing kernel can be compiled by hand. Returns the path, or "" when not dumping.
std::string dump_source(std::string_view source, std::string_view name) {
  const char* dir = std::getenv("TESSEL_DUMP");
  if (!dir || !*dir) return "";
  std::string file;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
              c == '-' || c == '.';
    file += ok ? c : '_';
  }
  if (file.empty()) file = "kernel";
  std::filesystem::path path = std::filesystem::path(dir) / (file + ".cu");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(source.data(), static_cast<std::streamsize>(source.size()));
  out.close();
  if (!out) return "";
  return path.string();
}

}  // namespace

bool nvrtc_available() noexcept { return TESSEL_HAS_NVRTC != 0; }

#if TESSEL_HAS_NVRTC

namespace {

// Cleared the first time this NVRTC rejects --minimal (added in CUDA 12.4).
std::atomic<bool> g_minimal_supported{true};

[[noreturn]] void nvrtc_fail(nvrtcResult r, const char* call, std::string_view name) {
  throw CompileError(fmt::format("NVRTC call {} failed for kernel '{}': {}", call, name, nvrtcGetErrorString(r)));
}

struct Program {
  nvrtcProgram p = nullptr;
  ~Program() {
    if (p) nvrtcDestroyProgram(&p);
  }
};

}  // namespace

std::string nvrtc_version() {
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return "unknown";
  return fmt::format("{}.{}", major, minor);
}

std::vector<int> nvrtc_supported_archs() {
  int n = 0;
  if (nvrtcGetNumSupportedArchs(&n) != NVRTC_SUCCESS || n <= 0) return {};
  std::vector<int> archs(static_cast<size_t>(n));
  if (nvrtcGetSupportedArchs(archs.data()) != NVRTC_SUCCESS) return {};
  return archs;
}

std::vector<std::string> compile_flags(const CompileOptions& opts) {
  std::vector<std::string> f;
  f.push_back(fmt::format("--gpu-architecture={}_{}", opts.cubin ? "sm" : "compute", opts.arch));
  f.push_back("-std=c++17");
  f.push_back("-default-device");
  if (opts.minimal && g_minimal_supported.load(std::memory_order_relaxed)) f.push_back("--minimal");
  for (const std::string& e : opts.extra) f.push_back(e);
  return f;
}

// The source rides along in the PTX as comments (`//@` + line, between
// begin/end markers), which every PTX assembler ignores: a driver that is not
// NVIDIA's -- tessel's emulated device, which runs kernels on the host -- can
// then compile exactly what NVRTC compiled. CUBIN images carry none.
namespace {
void append_source_comment(std::string& ptx, std::string_view source) {
  ptx += "\n//@tessel-cuda-source-begin\n";
  size_t at = 0;
  while (at < source.size()) {
    size_t nl = source.find('\n', at);
    if (nl == std::string_view::npos) nl = source.size();
    ptx += "//@";
    ptx += source.substr(at, nl - at);
    ptx += '\n';
    at = nl + 1;
  }
  ptx += "//@tessel-cuda-source-end\n";
}
}  // namespace

CompiledKernel compile(std::string_view source, std::string_view name, const CompileOptions& opts) {
  std::vector<int> archs = nvrtc_supported_archs();
  bool known = false;
  for (int a : archs) known |= a == opts.arch;
  if (!known) {
    throw CompileError(fmt::format("NVRTC {} cannot compile kernel '{}' for arch {}; it supports {}",
                                   nvrtc_version(), name, opts.arch, fmt::join(archs, ", ")));
  }
  const std::string dumped = dump_source(source, name);
  const std::string src(source);
  const std::string program_name = std::string(name) + ".cu";

  auto start = std::chrono::steady_clock::now();
  for (;;) {
    std::vector<std::string> flags = compile_flags(opts);
    std::vector<const char*> argv;
    for (const std::string& f : flags) argv.push_back(f.c_str());

    Program prog;
    if (nvrtcResult r = nvrtcCreateProgram(&prog.p, src.c_str(), program_name.c_str(), 0, nullptr, nullptr);
        r != NVRTC_SUCCESS)
      nvrtc_fail(r, "nvrtcCreateProgram", name);
    nvrtcResult result = nvrtcCompileProgram(prog.p, static_cast<int>(argv.size()), argv.data());

    if (result == NVRTC_ERROR_INVALID_OPTION && opts.minimal && g_minimal_supported.load()) {
      // An NVRTC older than --minimal: remember and compile again without it.
      g_minimal_supported.store(false);
      continue;
    }

    size_t log_size = 0;
    std::string log;
    if (nvrtcGetProgramLogSize(prog.p, &log_size) == NVRTC_SUCCESS && log_size > 1) {
      log.resize(log_size);
      if (nvrtcGetProgramLog(prog.p, log.data()) != NVRTC_SUCCESS) log.clear();
      while (!log.empty() && (log.back() == '\0' || log.back() == '\n' || log.back() == ' ')) log.pop_back();
    }

    if (result != NVRTC_SUCCESS) {
      std::string msg = fmt::format("NVRTC failed to compile kernel '{}' ({}; options: {}):\n{}", name,
                                    nvrtcGetErrorString(result), fmt::join(flags, " "),
                                    log.empty() ? std::string("(empty log)") : log);
      if (!dumped.empty())
        msg += fmt::format("\nsource dumped to {}", dumped);
      else
        msg += "\nset TESSEL_DUMP=<dir> to write the source to <dir>/" + program_name;
      throw CompileError(msg);
    }

    CompiledKernel out;
    out.log = std::move(log);
    if (opts.cubin) {
      size_t n = 0;
      if (nvrtcResult r = nvrtcGetCUBINSize(prog.p, &n); r != NVRTC_SUCCESS) nvrtc_fail(r, "nvrtcGetCUBINSize", name);
      out.cubin.resize(n);
      if (nvrtcResult r = nvrtcGetCUBIN(prog.p, out.cubin.data()); r != NVRTC_SUCCESS)
        nvrtc_fail(r, "nvrtcGetCUBIN", name);
    } else {
      size_t n = 0;
      if (nvrtcResult r = nvrtcGetPTXSize(prog.p, &n); r != NVRTC_SUCCESS) nvrtc_fail(r, "nvrtcGetPTXSize", name);
      out.ptx.resize(n);
      if (nvrtcResult r = nvrtcGetPTX(prog.p, out.ptx.data()); r != NVRTC_SUCCESS) nvrtc_fail(r, "nvrtcGetPTX", name);
      while (!out.ptx.empty() && out.ptx.back() == '\0') out.ptx.pop_back();
      append_source_comment(out.ptx, src);
    }
    out.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    return out;
  }
}

#else  // !TESSEL_HAS_NVRTC

namespace {
[[noreturn]] void no_nvrtc(std::string_view what) {
  throw CompileError(fmt::format("{}: tessel was built without NVRTC (no CUDA toolkit found at configure "
                                 "time); install the toolkit and reconfigure to compile CUDA kernels",
                                 what));
}
}  // namespace

std::string nvrtc_version() { no_nvrtc("nvrtc_version"); }
std::vector<int> nvrtc_supported_archs() { return {}; }
std::vector<std::string> compile_flags(const CompileOptions& opts) {
  std::vector<std::string> f{fmt::format("--gpu-architecture={}_{}", opts.cubin ? "sm" : "compute", opts.arch),
                             "-std=c++17", "-default-device"};
  if (opts.minimal) f.push_back("--minimal");
  for (const std::string& e : opts.extra) f.push_back(e);
  return f;
}
CompiledKernel compile(std::string_view source, std::string_view name, const CompileOptions&) {
  dump_source(source, name);
  no_nvrtc(fmt::format("compiling kernel '{}'", name));
}

#endif

}  // namespace tessel::cuda
