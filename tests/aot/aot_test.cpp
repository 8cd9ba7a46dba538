// Export files: what export_kernels writes, the manifest round trip, corrupted
// artifacts rejected with clear errors, NVRTC's PTX/CUBIN valid for ptxas /
// cuobjdump, and tracing that neither runs nor compiles anything.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "codegen/cpu/cpu_backend.h"
#include "codegen/aot/trace.h"
#include "dsl/aot.h"
#include "models.h"
#include "runtime/cuda/nvrtc.h"
#include "runtime/precompiled_kernels.h"

using namespace tessel;
namespace fs = std::filesystem;

namespace {

fs::path fresh_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / fmt::format("tessel_aot_{}_{}", name, ::getpid());
  fs::remove_all(d);
  return d;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}
void spit(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

aot::Manifest export_chain(const fs::path& dir, aot::ExportOptions o = {}) {
  Tensor x = randn(aot_models::chain_x_shape()), b = randn(aot_models::chain_b_shape());
  x.eval();
  b.eval();
  o.name = "chain";
  return aot::export_kernels(aot_models::chain, {x, b}, dir, o);
}

bool have(const char* tool) { return fs::exists(fs::path("/usr/local/cuda/bin") / tool); }

}  // namespace

TEST_CASE("tracing for export launches and compiles nothing", "[aot]") {
  fs::path dir = fresh_dir("trace");
  CpuJitStats before = cpu_jit_stats();
  KernelCacheStats cache = KernelCache::global().stats();
  Tensor x = randn(aot_models::chain_x_shape()), b = randn(aot_models::chain_b_shape());
  {
    BackendOverride interp(ref_backend());
    x.eval();
    b.eval();
  }
  aot::Manifest m = aot::export_kernels(aot_models::chain, {x, b}, dir, {.name = "chain", .cuda = false});
  CHECK(cpu_jit_stats().kernels_launched == before.kernels_launched);
  CHECK(cpu_jit_stats().kernels_compiled == before.kernels_compiled);
  CHECK(KernelCache::global().stats().compiles == cache.compiles);
  // t (one fused chain), then the softmax over it as one row program (max,
  // exp/sum and the divide in one kernel).
  CHECK(m.kernels.size() == 2);
  std::set<std::string> roles;
  for (auto& k : m.kernels) roles.insert(k.role);
  CHECK(roles == std::set<std::string>{"elementwise", "row"});
  fs::remove_all(dir);
}

TEST_CASE("tracing an embedding of computed positions records its bounds check and reads no value back", "[aot]") {
  // A trace allocates results without computing them: a bounds check that
  // read `any(index out of range)` back would pass or throw depending on what
  // the allocator's block held (a GPT export failed that way at random). The
  // small blocks the trace will be handed are filled with `true` first, so a
  // read would throw here every time.
  Tensor w = randn({16, 4});
  w.eval();
  {
    std::vector<Tensor> poison;
    for (int i = 0; i < 64; ++i) poison.push_back(tensor({true}));
  }  // freed into the allocator's cache
  aot::TraceBackend tb;
  {
    BackendOverride trace(tb);
    Tensor pos = arange(8, DType::i64);  // computed, as a GPT's position ids
    Tensor e = embedding(pos, w);
    CHECK_NOTHROW(e.eval());
  }
  // The check and the gather: the check's kernel is exported, since the real
  // run of the exported program launches it.
  CHECK(tb.realizations() == 2);
  bool check_recorded = false;
  for (const aot::TracedKernel& k : tb.kernels()) check_recorded |= k.role == "reduce";
  CHECK(check_recorded);
  // The real run still checks.
  CHECK_THROWS_AS(embedding(Tensor(arange(20, DType::i64) + 0), w).eval(), IndexError);
}

TEST_CASE("tracing a train-mode step leaves batch norm's running statistics and batch count as they were", "[aot]") {
  // Batch norm in train mode writes its running statistics and batch count in
  // place. The trace computes no values, so those writes must not reach the
  // model's memory (they once copied uncomputed values into it), while the
  // kernels computing them are still exported.
  fs::path dir = fresh_dir("bn_train");
  nn::Sequential net(nn::Conv2d(1, 3, 3), nn::BatchNorm2d(3), nn::ReLU(), nn::Flatten(), nn::Linear(3 * 4 * 4, 5),
                     nn::BatchNorm1d(5));
  Tensor x = randn({4, 1, 6, 6});
  {
    BackendOverride interp(ref_backend());
    NoGradGuard g;
    x.eval();
    OrderedDict<Tensor> buffers = net->named_buffers();
    for (const std::string k : {"1.", "5."}) {
      buffers[k + "running_mean"].fill_(0.25);
      buffers[k + "running_var"].fill_(2.0);
      buffers[k + "num_batches_tracked"].fill_(3);
    }
    for (auto& [k, t] : net->state_dict()) t.eval();
  }
  std::map<std::string, std::vector<double>> before;
  for (auto& [k, t] : net->state_dict()) before[k] = t.to_vector<double>();
  net->train();
  CpuJitStats jit = cpu_jit_stats();
  const uint64_t ref_runs = ref_stats().realizations;
  auto step = [&](const std::vector<Tensor>& in) {
    Tensor y = net(in[0]);
    return std::vector<Tensor>{(y * y).mean()};
  };
  aot::Manifest m = aot::export_traced(
      step, {x}, dir, {.name = "bn_train", .backward = true, .optimizer = aot::sgd({.lr = 0.1}), .cuda = false},
      net->parameters());
  CHECK(cpu_jit_stats().kernels_launched == jit.kernels_launched);
  CHECK(cpu_jit_stats().kernels_compiled == jit.kernels_compiled);
  CHECK(ref_stats().realizations == ref_runs);
  CHECK(m.kernels.size() > 0);
  for (auto& [k, t] : net->state_dict()) {
    INFO(k);
    CHECK(t.to_vector<double>() == before.at(k));
  }
  CHECK(before.at("1.running_mean") == std::vector<double>(3, 0.25));
  CHECK(before.at("5.num_batches_tracked") == std::vector<double>{3.0});
  fs::remove_all(dir);
}

TEST_CASE("an export writes every file and its manifest reads back equal", "[aot]") {
  fs::path dir = fresh_dir("roundtrip");
  aot::Manifest m = export_chain(dir);
  CHECK(fs::exists(dir / "manifest.json"));
  CHECK(fs::exists(dir / "chain.o"));
  CHECK(fs::exists(dir / "chain_kernels.cpp"));
  CHECK(fs::exists(dir / "chain_kernels.h"));
  aot::Manifest r = aot::read_manifest(dir);
  CHECK(r.name == "chain");
  CHECK(r.cpu_object == m.cpu_object);
  CHECK(r.cpu_target == m.cpu_target);
  CHECK(r.files == m.files);
  REQUIRE(r.kernels.size() == m.kernels.size());
  for (size_t i = 0; i < m.kernels.size(); ++i) {
    const auto &a = m.kernels[i], &b = r.kernels[i];
    CHECK(a.name == b.name);
    CHECK(a.key == b.key);
    CHECK(a.role == b.role);
    CHECK(a.num_args == b.num_args);
    CHECK(a.files == b.files);
    REQUIRE(a.params.size() == b.params.size());
    CHECK(b.params[0].output);
    CHECK(b.params[0].dtype == "f32");
    CHECK(fs::exists(dir / b.files.at("cu")));
    CHECK(slurp(dir / b.files.at("kir")).size() > 0);
  }
  if (cuda::nvrtc_available()) {
    CHECK(r.ptx_archs == std::vector<int>{80, 90});
    CHECK(r.kernels[0].files.count("ptx_80"));
    CHECK(r.kernels[0].files.count("cubin_90"));
  }
  fs::remove_all(dir);
}

TEST_CASE("a corrupted export is rejected with a clear error", "[aot]") {
  fs::path dir = fresh_dir("corrupt");
  aot::Manifest m = export_chain(dir, {.cuda = false});
  const std::string manifest = slurp(dir / "manifest.json");

  SECTION("an edited kernel key") {
    std::string edited = manifest;
    size_t at = edited.find("\"key\": \"" + m.kernels[0].key);
    REQUIRE(at != std::string::npos);
    at += 8;
    edited[at] = edited[at] == '0' ? '1' : '0';
    spit(dir / "manifest.json", edited);
    REQUIRE_THROWS_AS(aot::read_manifest(dir), aot::ArtifactError);
    REQUIRE_THROWS_WITH(aot::read_manifest(dir), Catch::Contains("the manifest was edited"));
  }
  SECTION("an edited kernel file") {
    fs::path kir = dir / m.kernels[0].files.at("kir");
    spit(kir, slurp(kir) + " ");
    REQUIRE_THROWS_WITH(aot::read_manifest(dir), Catch::Contains("corrupted or was edited") && Catch::Contains(".kir"));
  }
  SECTION("a truncated object file") {
    std::string obj = slurp(dir / "chain.o");
    spit(dir / "chain.o", obj.substr(0, obj.size() / 2));
    REQUIRE_THROWS_WITH(aot::read_manifest(dir), Catch::Contains("chain.o"));
  }
  SECTION("a missing file") {
    fs::remove(dir / "chain_kernels.cpp");
    REQUIRE_THROWS_WITH(aot::read_manifest(dir), Catch::Contains("missing on disk"));
  }
  SECTION("not a manifest") {
    spit(dir / "manifest.json", "{\"format\": \"other\"}");
    REQUIRE_THROWS_WITH(aot::read_manifest(dir), Catch::Contains("not a tessel AOT manifest"));
    spit(dir / "manifest.json", "{ nope");
    REQUIRE_THROWS_WITH(aot::read_manifest(dir), Catch::Contains("not valid JSON"));
  }
  fs::remove_all(dir);
}

TEST_CASE("the precompiled registry rejects an entry whose key does not match its text", "[aot]") {
  static const char text[] = "kernel that was edited";
  precompiled::Entry e;
  e.set = "edited";
  e.text = text;
  e.key_hex = "00000000000000000000000000000000";
  size_t n = precompiled::size();
  precompiled::register_kernel(e);
  CHECK(precompiled::size() == n);
  CHECK(precompiled::find(std::string_view(text)) == nullptr);
  REQUIRE(!precompiled::errors().empty());
  CHECK_THAT(precompiled::errors().back(), Catch::Contains("does not match its kernel text"));
}

TEST_CASE("exported PTX and CUBIN are valid for ptxas and cuobjdump", "[aot][nvrtc]") {
  if (!cuda::nvrtc_available()) {
    WARN("built without NVRTC: nothing to check");
    return;
  }
  fs::path dir = fresh_dir("ptx");
  aot::Manifest m = export_chain(dir);
  for (const auto& k : m.kernels) {
    for (int arch : {80, 90}) {
      fs::path ptx = dir / k.files.at(fmt::format("ptx_{}", arch));
      CHECK_THAT(slurp(ptx), Catch::Contains(".entry " + k.cuda_name));
      if (have("ptxas")) {
        std::string cmd = fmt::format("/usr/local/cuda/bin/ptxas -arch=sm_{} -o {} {} 2>&1", arch,
                                      (dir / "check.cubin").string(), ptx.string());
        INFO(cmd);
        CHECK(std::system(cmd.c_str()) == 0);
      }
    }
    fs::path cubin = dir / k.files.at("cubin_90");
    CHECK(slurp(cubin).substr(0, 4) == "\x7f" "ELF");
    if (have("cuobjdump")) {
      std::string cmd = fmt::format("/usr/local/cuda/bin/cuobjdump -elf {} | grep -q {}", cubin.string(), k.cuda_name);
      INFO(cmd);
      CHECK(std::system(cmd.c_str()) == 0);
    }
  }
  fs::remove_all(dir);
}
