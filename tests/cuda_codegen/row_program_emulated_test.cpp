// The CUDA row-program kernels executed on the host through cuda_emulation.h
// (block per row, __syncthreads between stages, warp shuffles) against the
// ref backend: rows of 1, 2, 31, 33, 257 and 1000003 elements, reduced dims
// in the middle and two at once, transposed inputs, a stored stage, f32/f64.
#include <catch2/catch.hpp>
#include <dlfcn.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "host_executors.h"
#include "row_program_cases.h"

using namespace cuda_codegen_test;

namespace {

// Within `rtol` of the largest magnitude: the block combines its threads'
// partial sums in another order than the ref interpreter's single loop.
std::string mismatch(const tessel::Tensor& got, const tessel::Tensor& want) {
  auto g = got.to_vector<double>(), w = want.to_vector<double>();
  if (g.size() != w.size()) return "sizes differ";
  double scale = 1;
  for (double x : w) scale = std::max(scale, std::fabs(x));
  const double rtol = got.dtype() == tessel::DType::f64 ? 1e-12 : 1e-6;
  for (size_t i = 0; i < g.size(); ++i)
    if (!(std::fabs(g[i] - w[i]) <= rtol * scale))
      return fmt::format("element {} of {}: got {} want {}", i, g.size(), g[i], w[i]);
  return "";
}

}  // namespace

TEST_CASE("row-program CUDA kernels run in the host emulation and match the ref backend", "[emulated-cuda]") {
  namespace fs = std::filesystem;
  const std::vector<RowCase> cases = row_cases();
  CollectExecutor collect;
  for (const RowCase& c : cases) {
    auto roots = c.make();
    tessel::cudagen::realize_steps(collect, nodes_of(roots), false);
  }
  fs::path dir = fs::temp_directory_path() / fmt::format("tessel_emu_rows_{}", getpid());
  fs::create_directories(dir);
  std::ofstream(dir / "kernels.cpp") << emulation_source(collect.kernels);
  std::string cmd = fmt::format("{} -std=c++20 -O1 -shared -fPIC -I{} -o {} {} 2> {}", TESSEL_HOST_CXX, TESSEL_EMU_INCLUDE,
                                (dir / "kernels.so").string(), (dir / "kernels.cpp").string(), (dir / "log.txt").string());
  if (std::system(cmd.c_str()) != 0) {
    std::ifstream log(dir / "log.txt");
    std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
    FAIL("host compile of the row-program kernels failed:\n" << text.substr(0, 6000));
  }
  void* so = dlopen((dir / "kernels.so").c_str(), RTLD_NOW | RTLD_LOCAL);
  REQUIRE(so != nullptr);
  fs::remove_all(dir);

  // Small grids, so the blocks also loop over rows.
  EmulatedExecutor emu;
  emu.limits.max_blocks = 4;
  emu.lookup = [&](const std::string& name) { return dlsym(so, ("emu_" + name).c_str()); };
  for (const RowCase& c : cases) {
    INFO(c.what);
    std::vector<tessel::Tensor> want = c.make(), got = c.make();
    tessel::ref_backend().realize(nodes_of(want), false);
    const int before = emu.launches;
    tessel::cudagen::realize_steps(emu, nodes_of(got), false);
    CHECK(emu.launches - before == 1);  // the whole case is one row program
    REQUIRE(want.size() == got.size());
    for (size_t r = 0; r < got.size(); ++r) {
      std::string diff = mismatch(got[r], want[r]);
      INFO("root " << r);
      CHECK(diff.empty());
      if (!diff.empty()) WARN(diff);
    }
  }
  dlclose(so);
}
