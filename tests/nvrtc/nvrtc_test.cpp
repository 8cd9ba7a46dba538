// NVRTC compiles the same kernel text the emulation tests run (tests/cuda_kernels),
// for every arch tessel targets, without a warning; errors carry the log.
#include "runtime/cuda/nvrtc.h"

#include <catch2/catch.hpp>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cuda_test_kernels.h"
#include "runtime/cuda/prelude.h"
#include "runtime/errors.h"

using namespace tessel::cuda;

namespace {

std::string with_prelude(std::string_view body) { return std::string(prelude) + std::string(body); }

// Names of the extern "C" __global__ kernels a source defines.
std::vector<std::string> kernel_names(std::string_view text) {
  std::vector<std::string> names;
  const std::string_view marker = "extern \"C\" __global__ void ";
  for (size_t at = text.find(marker); at != std::string_view::npos; at = text.find(marker, at + 1)) {
    size_t begin = at + marker.size(), end = text.find('(', begin);
    names.emplace_back(text.substr(begin, end - begin));
  }
  return names;
}

struct Target {
  int arch;
  bool cubin;
};
const Target kTargets[] = {{80, false}, {90, false}, {90, true}};

// Sets an environment variable for one scope.
struct ScopedEnv {
  std::string name;
  ScopedEnv(const char* n, const std::string& value) : name(n) { setenv(n, value.c_str(), 1); }
  ~ScopedEnv() { unsetenv(name.c_str()); }
};

const char* kSmallKernel = R"(
extern "C" __global__ void small_relu_scale(const float* __restrict__ x, float* __restrict__ y, float a, int64_t n) {
  for (int64_t i = ts::thread_index(); i < n; i += ts::grid_stride()) y[i] = a * ts::relu(x[i]);
}
)";

}  // namespace

TEST_CASE("NVRTC is there when the build found it", "[nvrtc]") {
  if (!nvrtc_available()) {
    REQUIRE_THROWS_WITH(compile(kSmallKernel, "small", {}), Catch::Contains("built without NVRTC"));
    WARN("built without NVRTC: nothing else to check");
    return;
  }
  const std::string v = nvrtc_version();
  INFO("NVRTC " << v);
  REQUIRE(v.find('.') != std::string::npos);
  const std::vector<int> archs = nvrtc_supported_archs();
  REQUIRE(std::count(archs.begin(), archs.end(), 80) == 1);
  REQUIRE(std::count(archs.begin(), archs.end(), 90) == 1);
}

TEST_CASE("the flags are the documented ones", "[nvrtc]") {
  CompileOptions ptx;
  ptx.arch = 80;
  std::vector<std::string> f = compile_flags(ptx);
  REQUIRE(f.at(0) == "--gpu-architecture=compute_80");
  REQUIRE(std::count(f.begin(), f.end(), "-std=c++17") == 1);
  REQUIRE(std::count(f.begin(), f.end(), "-default-device") == 1);
  REQUIRE(std::count(f.begin(), f.end(), "-w") == 0);
  CompileOptions cubin;
  cubin.cubin = true;
  cubin.minimal = false;
  cubin.extra = {"-lineinfo"};
  f = compile_flags(cubin);
  REQUIRE(f.at(0) == "--gpu-architecture=sm_90");
  REQUIRE(std::count(f.begin(), f.end(), "--minimal") == 0);
  REQUIRE(f.back() == "-lineinfo");
}

TEST_CASE("every test kernel compiles to PTX for compute_80 and compute_90 and to CUBIN for sm_90 with a clean log",
          "[nvrtc]") {
  if (!nvrtc_available()) return;
  for (const cuda_test_kernels::Source& src : cuda_test_kernels::all) {
    const std::vector<std::string> names = kernel_names(src.text);
    REQUIRE_FALSE(names.empty());
    for (const Target& t : kTargets) {
      CAPTURE(src.name, t.arch, t.cubin);
      CompileOptions opt;
      opt.arch = t.arch;
      opt.cubin = t.cubin;
      CompiledKernel k = compile(with_prelude(src.text), src.name, opt);
      INFO("log: " << k.log);
      REQUIRE(k.log.empty());  // no warning either: -w is not used
      if (t.cubin) {
        REQUIRE(k.ptx.empty());
        REQUIRE(k.cubin.size() > 4);
        REQUIRE(std::string(k.cubin.data() + 1, 3) == "ELF");
      } else {
        REQUIRE(k.cubin.empty());
        REQUIRE(k.ptx.find(".target sm_" + std::to_string(t.arch)) != std::string::npos);
        for (const std::string& name : names) {
          CAPTURE(name);
          REQUIRE(k.ptx.find(".entry " + name + "(") != std::string::npos);
        }
      }
    }
  }
}

TEST_CASE("the prelude compiles clean on its own and twice in one source", "[nvrtc]") {
  if (!nvrtc_available()) return;
  const std::string twice = std::string(prelude) + std::string(prelude) + kSmallKernel;
  for (const Target& t : kTargets) {
    CompileOptions opt;
    opt.arch = t.arch;
    opt.cubin = t.cubin;
    CompiledKernel k = compile(twice, "prelude_twice", opt);
    INFO("log: " << k.log);
    REQUIRE(k.log.empty());
  }
}

TEST_CASE("a kernel that does not compile raises CompileError with the NVRTC log", "[nvrtc]") {
  if (!nvrtc_available()) return;
  const std::string broken = with_prelude(R"(
extern "C" __global__ void broken_kernel(float* y) { y[threadIdx.x] = undefined_thing + 1.0f; }
)");
  try {
    compile(broken, "broken_kernel", {});
    FAIL("compiled");
  } catch (const tessel::CompileError& e) {
    const std::string msg = e.what();
    CHECK_THAT(msg, Catch::Contains("broken_kernel"));
    CHECK_THAT(msg, Catch::Contains("identifier \"undefined_thing\" is undefined"));
    CHECK_THAT(msg, Catch::Contains("--gpu-architecture=compute_90"));
    CHECK_THAT(msg, Catch::Contains("set TESSEL_DUMP=<dir>"));
  }

  const auto dir = std::filesystem::temp_directory_path() / ("tessel_nvrtc_dump_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  {
    ScopedEnv dump("TESSEL_DUMP", dir.string());
    try {
      compile(broken, "broken_kernel", {});
      FAIL("compiled");
    } catch (const tessel::CompileError& e) {
      const std::string path = (dir / "broken_kernel.cu").string();
      CHECK_THAT(std::string(e.what()), Catch::Contains("source dumped to " + path));
      std::ifstream in(path);
      std::stringstream text;
      text << in.rdbuf();
      CHECK(text.str() == broken);
    }
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("warnings reach the log (tests can assert their absence)", "[nvrtc]") {
  if (!nvrtc_available()) return;
  CompiledKernel k = compile(with_prelude(R"(
extern "C" __global__ void unused_variable(float* y) { int unused = 3; y[0] = 1.0f; }
)"),
                             "unused_variable", {});
  REQUIRE_THAT(k.log, Catch::Contains("warning"));
  REQUIRE_FALSE(k.ptx.empty());
}

TEST_CASE("an arch this NVRTC cannot target is a clear CompileError", "[nvrtc]") {
  if (!nvrtc_available()) return;
  CompileOptions opt;
  opt.arch = 35;
  REQUIRE_THROWS_WITH(compile(kSmallKernel, "old_arch", opt),
                      Catch::Contains("cannot compile kernel 'old_arch' for arch 35") && Catch::Contains("supports"));
}

TEST_CASE("median NVRTC compile time of a small kernel is reported and not asserted", "[nvrtc][timing]") {
  if (!nvrtc_available()) return;
  const std::string src = with_prelude(kSmallKernel);
  auto median_ms = [&](CompileOptions opt) {
    std::vector<double> ms;
    compile(src, "small_relu_scale", opt);  // warm-up: loads NVRTC's builtins
    for (int i = 0; i < 9; ++i) ms.push_back(compile(src, "small_relu_scale", opt).compile_ms);
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  };
  CompileOptions ptx90, ptx90_full, cubin90;
  ptx90_full.minimal = false;
  cubin90.cubin = true;
  const double a = median_ms(ptx90), b = median_ms(ptx90_full), c = median_ms(cubin90);
  std::printf("NVRTC %s median compile of a small kernel: PTX compute_90 %.1f ms with --minimal, %.1f ms without; "
              "CUBIN sm_90 %.1f ms\n",
              nvrtc_version().c_str(), a, b, c);
  SUCCEED();
}
