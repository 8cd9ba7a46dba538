// A 50 MB checkpoint saved through tessel::save by a process that is killed
// (SIGKILL) at random points: the file on disk is always one whole
// checkpoint, the previous or the new, and loads with every value right.
// 50 kills here (TESSEL_SOAK_KILLS raises it: scripts/soak-killed-save.sh).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/support/temp_dir.h"
#include "tests/support/tensor_testing.h"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <set>
#include <thread>

#include "dsl/io.h"
#include "dsl/tessel.h"

using namespace tessel;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kElems = 50'000'000 / 4;  // 50 MB of f32

// Version v: "weight" holds v + i / kElems at i, "version" holds v.
std::map<std::string, Tensor> version(int v) {
  Tensor w = arange(0, kElems, 1, DType::f32) * (1.0f / kElems) + static_cast<float>(v);
  w.eval();
  Tensor tag = full({1}, static_cast<double>(v), DType::i64);
  tag.eval();
  return {{"weight", w}, {"version", tag}};
}

int kills_wanted() {
  const char* e = std::getenv("TESSEL_SOAK_KILLS");
  return e ? std::max(1, std::atoi(e)) : 50;
}

}  // namespace

TEST_CASE("a 50 MB save killed at random points leaves the old or the new checkpoint", "[reliability]") {
  const tessel::testing::TempDir scratch("tessel-killed-save");  // removed even when a check fails
  const fs::path& dir = scratch.path;
  const fs::path target = dir / "model.safetensors";
  const std::map<std::string, Tensor> versions[2] = {version(0), version(1)};

  auto t0 = std::chrono::steady_clock::now();
  save(versions[1], target);
  save(versions[0], target);
  const auto per_save_us =
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count() / 2;
  // The seed picks the kill times; where a save is at a given time varies.
  const uint64_t seed = tessel::testing::test_seed("killed save");
  INFO("seed " << seed << ", one save " << per_save_us << " us");
  std::mt19937_64 rng(seed);

  const int wanted = kills_wanted();
  std::set<int64_t> seen;
  int temp_files = 0;
  for (int round = 0; round < wanted; ++round) {
    INFO("round " << round);
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      try {
        for (int i = round;; ++i) save(versions[i % 2], target);
      } catch (...) {
        ::_exit(3);
      }
    }
    // Somewhere in the first two saves (the child alternates versions).
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % std::max<int64_t>(2 * per_save_us, 1000)));
    ::kill(pid, SIGKILL);
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    REQUIRE(WIFSIGNALED(status));

    OrderedDict<Tensor> loaded = load_dict(target);
    REQUIRE(loaded.size() == 2);
    const int64_t v = loaded["version"].item<int64_t>();
    REQUIRE((v == 0 || v == 1));
    seen.insert(v);
    const Tensor& w = loaded["weight"];
    REQUIRE(w.shape() == Shape{kElems});
    // Every element is the version's: compare with the tensor saved.
    REQUIRE(Tensor(w == versions[v].at("weight")).all().item<bool>());

    for (const auto& e : fs::directory_iterator(dir))
      if (e.path() != target) {
        fs::remove(e.path());  // a killed save's temp file: never read by load
        ++temp_files;
      }
  }
  std::fprintf(stderr, "killed save: %d kills, versions seen %zu, temp files swept %d\n", wanted, seen.size(),
               temp_files);
  CHECK(seen.size() == 2);
}
