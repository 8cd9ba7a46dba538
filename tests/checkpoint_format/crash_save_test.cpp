// A process killed (SIGKILL) in the middle of saving leaves the target as one
// complete checkpoint, old or new, never a torn one.
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <set>
#include <thread>

#include "ckpt_test_util.h"

using namespace ckpt_test;
namespace st = tessel::safetensors;

namespace {

// Versions of different sizes (some above the mapping threshold), each
// tagged with its number in the metadata.
struct Version {
  std::vector<Owned> tensors;
  std::map<std::string, std::string> metadata;
  std::vector<std::byte> bytes;
};

std::vector<Version> make_versions() {
  std::mt19937_64 rng(11);
  const int64_t sizes[] = {16, 2'000, 70'000, 400'000, 900'000};
  std::vector<Version> vs;
  for (size_t v = 0; v < std::size(sizes); ++v) {
    Version ver;
    ver.tensors = {random_tensor("0.weight", DType::f32, {sizes[v]}, rng),
                   random_tensor("0.bias", DType::bf16, {static_cast<int64_t>(v) + 1}, rng)};
    ver.metadata = {{"version", std::to_string(v)}};
    ver.bytes = st::serialize(views(ver.tensors), ver.metadata);
    vs.push_back(std::move(ver));
  }
  return vs;
}

}  // namespace

TEST_CASE("a save killed at 100+ random points leaves the old or the new checkpoint intact") {
  TempDir dir;
  const fs::path target = dir.path / "model.safetensors";
  const std::vector<Version> versions = make_versions();
  const uint64_t seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);

  // Kill points are spread over about two saves, however fast the disk is.
  auto t0 = std::chrono::steady_clock::now();
  for (const Version& v : versions) st::write_file(target, views(v.tensors), v.metadata);
  auto per_save = (std::chrono::steady_clock::now() - t0) / versions.size();
  auto span_us = std::max<int64_t>(200, 2 * std::chrono::duration_cast<std::chrono::microseconds>(per_save).count());

  std::set<std::string> seen;
  int kills = 0, leftovers = 0;
  for (int round = 0; round < 120; ++round) {
    const size_t first = rng() % versions.size();
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      // The child saves version after version over the same file until killed.
      try {
        for (size_t i = first;; ++i) {
          const Version& v = versions[i % versions.size()];
          st::write_file(target, views(v.tensors), v.metadata);
        }
      } catch (...) {
        ::_exit(3);
      }
    }
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % span_us));
    ::kill(pid, SIGKILL);
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    REQUIRE(WIFSIGNALED(status));
    REQUIRE(WTERMSIG(status) == SIGKILL);
    ++kills;

    INFO("round " << round);
    st::File f = st::open(target);  // throws on a torn file
    auto it = f.metadata().find("version");
    REQUIRE(it != f.metadata().end());
    const Version& v = versions.at(std::stoul(it->second));
    REQUIRE(read_all(target) == v.bytes);
    REQUIRE(f.entries().size() == v.tensors.size());
    for (size_t i = 0; i < v.tensors.size(); ++i) REQUIRE(same_bytes(f.entries()[i], v.tensors[i].bytes));
    seen.insert(it->second);

    // A killed save may leave its temp file; the real loader never looks at
    // them, the test sweeps them so they do not pile up.
    for (const auto& e : fs::directory_iterator(dir.path)) {
      if (e.path() == target) continue;
      REQUIRE_THAT(e.path().filename().string(), Catch::StartsWith(".model.safetensors.tmp."));
      fs::remove(e.path());
      ++leftovers;
    }
  }
  std::fprintf(stderr, "crash test: %d kills, %zu distinct versions seen, %d temp files swept\n", kills,
               seen.size(), leftovers);
  CHECK(kills >= 100);
  CHECK(seen.size() >= 2);
}
