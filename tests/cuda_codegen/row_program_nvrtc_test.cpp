// The CUDA row-program kernels (a block per row, one pass per stage) compile
// under NVRTC to PTX for compute_80 and compute_90 and to CUBIN for sm_90
// with an empty log, for every case of row_program_cases.h.
#include <catch2/catch.hpp>

#include "host_executors.h"
#include "row_program_cases.h"
#include "runtime/cuda/nvrtc.h"
#include "runtime/errors.h"

using namespace cuda_codegen_test;

TEST_CASE("row-program CUDA kernels compile clean under NVRTC for compute_80, compute_90 and sm_90", "[nvrtc]") {
  if (!tessel::cuda::nvrtc_available()) {
    WARN("built without NVRTC: skipped");
    return;
  }
  CollectExecutor collect;
  int row_kernels = 0;
  for (const RowCase& c : row_cases()) {
    INFO(c.what);
    CollectExecutor one;
    auto roots = c.make();
    tessel::cudagen::realize_steps(one, nodes_of(roots), false);
    int rows = 0;
    for (auto& [text, k] : one.kernels) rows += k.row_program();
    CHECK(rows == 1);  // every case is one row program
    row_kernels += rows;
    collect.kernels.insert(one.kernels.begin(), one.kernels.end());
  }
  CHECK(row_kernels == 19);
  struct Target {
    int arch;
    bool cubin;
  };
  for (auto& [text, k] : collect.kernels) {
    if (!k.row_program()) continue;
    tessel::cudagen::CudaSource src = tessel::cudagen::emit_cuda(k);
    INFO(src.source.substr(src.source.find("// tessel kernel")));
    CHECK(tessel::cudagen::variants(k) == std::vector<tessel::cudagen::Variant>{tessel::cudagen::Variant::plain});
    for (Target t : {Target{80, false}, Target{90, false}, Target{90, true}}) {
      tessel::cuda::CompiledKernel out = tessel::cuda::compile(src.source, src.name, {.arch = t.arch, .cubin = t.cubin});
      INFO((t.cubin ? "sm_" : "compute_") << t.arch);
      CHECK(out.log.find_first_not_of(" \n\r\t") == std::string::npos);
      if (t.cubin) CHECK(!out.cubin.empty());
      else CHECK(out.ptx.find(".entry " + src.name + "(") != std::string::npos);
    }
  }
}
