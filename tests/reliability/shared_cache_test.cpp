// Eight processes share one kernel-cache folder for twenty rounds: each
// realizes random trees on the compiled CPU backend (compiling, or loading
// what the others published, while they write) and every value equals the
// ref interpreter's. The workers are this program run again on a hidden test.
#include <catch2/catch.hpp>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "codegen/backend.h"
#include "dsl/tessel.h"
#include "tests/cuda_codegen/random_trees.h"

extern char** environ;

using namespace tessel;

namespace {

std::vector<double> values(const ir::NodePtr& n) {
  return from_buffer(*n->buffer, n->dtype, n->shape).to(DType::f64).to_vector<double>();
}

}  // namespace

// A worker: TESSEL_TEST_SEED picks the trees; exits non-zero on any mismatch.
TEST_CASE("shared-cache worker", "[.worker]") {
  const char* s = std::getenv("TESSEL_TEST_SEED");
  REQUIRE(s != nullptr);
  const uint64_t seed = std::strtoull(s, nullptr, 0);
  for (int i = 0; i < 8; ++i) {
    cuda_codegen_test::Case want = cuda_codegen_test::TreeGen(seed, i).make(i % 3);
    cuda_codegen_test::Case got = cuda_codegen_test::TreeGen(seed, i).make(i % 3);  // the same tree again
    INFO(want.what);
    ref_backend().realize(want.roots, false);
    cpu_backend().realize(got.roots, false);
    for (size_t r = 0; r < want.roots.size(); ++r) {
      std::vector<double> a = values(got.roots[r]), b = values(want.roots[r]);
      REQUIRE(a.size() == b.size());
      for (size_t k = 0; k < a.size(); ++k) {
        if (std::isnan(b[k])) {
          CHECK(std::isnan(a[k]));
          continue;
        }
        if (a[k] == b[k]) continue;  // infinities included
        INFO("element " << k);
        CHECK(std::fabs(a[k] - b[k]) <= 1e-4 * std::max(1.0, std::fabs(b[k])));
      }
    }
  }
}

TEST_CASE("8 processes sharing one kernel cache folder for 20 rounds compute what ref computes", "[reliability]") {
  char tmpl[] = "/tmp/tessel-shared-cache-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  const std::string dir = tmpl;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const uint64_t base = std::random_device{}();
  INFO("base seed " << base << "; a worker: TESSEL_CACHE_DIR=<dir> TESSEL_TEST_SEED=<seed> " << self
                    << " \"shared-cache worker\"");
  int failures = 0;
  for (int round = 0; round < 20; ++round) {
    std::vector<pid_t> pids;
    for (int w = 0; w < 8; ++w) {
      // Half the workers share a seed with another (the same kernels at once); trees vary by round.
      const uint64_t seed = base + static_cast<uint64_t>(round) * 16 + static_cast<uint64_t>(w / 2);
      std::vector<std::string> env_s;
      for (char** e = environ; *e; ++e)
        if (std::strncmp(*e, "TESSEL_CACHE_DIR=", 17) != 0 && std::strncmp(*e, "TESSEL_TEST_SEED=", 17) != 0)
          env_s.emplace_back(*e);
      env_s.push_back("TESSEL_CACHE_DIR=" + dir);
      env_s.push_back("TESSEL_TEST_SEED=" + std::to_string(seed));
      std::vector<char*> envp;
      for (auto& e : env_s) envp.push_back(e.data());
      envp.push_back(nullptr);
      std::string name = "shared-cache worker";
      char* argv[] = {const_cast<char*>(self.c_str()), name.data(), nullptr};
      pid_t pid = 0;
      REQUIRE(posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv, envp.data()) == 0);
      pids.push_back(pid);
    }
    for (pid_t pid : pids) {
      int status = 0;
      REQUIRE(waitpid(pid, &status, 0) == pid);
      if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) ++failures;
    }
  }
  int entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) entries += e.path().extension() == ".tslk";
  std::filesystem::remove_all(dir);
  CHECK(failures == 0);
  CHECK(entries > 0);
}
