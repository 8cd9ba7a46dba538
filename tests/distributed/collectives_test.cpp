// Collectives across 2 and 4 processes on loopback, each checked against its
// definition by the ranks themselves (collectives_worker.cpp); failures
// (a rank killed with SIGKILL, a hung rank, ranks that disagree) end every
// other rank with a DistError that names the culprit, within the timeout.
#include <catch2/catch.hpp>

#include <filesystem>

#include "rank_processes.h"

using namespace tessel::test;

namespace {

std::vector<RankResult> run_worker(const std::string& scenario, int world, std::vector<int> linger = {}) {
  RankRun run;
  run.argv = {TESSEL_COLLECTIVES_WORKER, scenario};
  run.world_size = world;
  run.deadline = std::chrono::seconds(60);
  run.linger_ok = std::move(linger);
  return run_ranks_with_file_store(std::move(run));
}

// What the worker printed as "failed after S s": from the collective's call to its DistError.
double seconds_to_fail(const std::string& out) {
  auto p = out.find("failed after ");
  return p == std::string::npos ? 1e9 : std::stod(out.substr(p + 13));
}

void check_collectives(int world) {
  auto results = run_worker("collectives", world);
  for (size_t r = 0; r < results.size(); ++r) {
    INFO("rank " << r << " printed:\n" << results[r].output);
    CHECK(results[r].exit_code == 0);
    CHECK(count(results[r].output, "FAIL") == 0);
    // 4 dtypes x (sum, max) + 2 avg + broadcast + world gathers + reduce_scatter + 3 async + barrier
    CHECK(count(results[r].output, "ok ") == 8 + 2 + 1 + world + 1 + 3 + 1);
  }
}

}  // namespace

TEST_CASE("every collective matches its definition on 2 processes", "[distributed]") {
  check_collectives(2);
  // The values themselves, for 2 ranks: sums of r*100+i over r in {0, 1}.
  auto again = run_worker("collectives", 2);
  CHECK(again[0].output.find("ok all_reduce sum f64 [100, 102, 104, 106, 108]") != std::string::npos);
  CHECK(again[1].output.find("ok all_reduce max i32 [100, 101, 102, 103, 104]") != std::string::npos);
  CHECK(again[1].output.find("ok reduce_scatter [104, 106]") != std::string::npos);
}

TEST_CASE("every collective matches its definition on 4 processes", "[distributed]") {
  check_collectives(4);
}

TEST_CASE("ranks passing tensors of different shapes get a DistError naming the rank", "[distributed]") {
  auto results = run_worker("mismatch_shape", 2);
  for (auto& r : results) {
    INFO(r.output);
    CHECK(r.exit_code == 3);
    CHECK(r.output.find("DistError: collective #1: rank 1 called all_reduce(sum) of f32 [4] but rank 0 called "
                        "all_reduce(sum) of f32 [3]; every rank must make the same collective calls in the same "
                        "order, with tensors of the same shape and dtype") != std::string::npos);
  }
}

TEST_CASE("ranks passing tensors of different dtypes get a DistError naming the rank", "[distributed]") {
  auto results = run_worker("mismatch_dtype", 2);
  for (auto& r : results) {
    INFO(r.output);
    CHECK(r.exit_code == 3);
    CHECK(r.output.find("DistError: collective #1: rank 1 called all_reduce(sum) of f64 [3] but rank 0 called "
                        "all_reduce(sum) of f32 [3]") != std::string::npos);
  }
}

TEST_CASE("ranks making different calls get a DistError naming the rank", "[distributed]") {
  auto results = run_worker("mismatch_call", 2);
  for (auto& r : results) {
    INFO(r.output);
    CHECK(r.exit_code == 3);
    CHECK(r.output.find("rank 1 called broadcast(root=0) of f32 [3] but rank 0 called all_reduce(sum) of f32 [3]") !=
          std::string::npos);
  }
}

TEST_CASE("a rank killed with SIGKILL makes the others fail within the timeout naming it", "[distributed]") {
  auto results = run_worker("dead_rank", 4);
  CHECK(results[1].signal == 9);
  for (int r : {0, 2, 3}) {
    INFO("rank " << r << ":\n" << results[r].output);
    CHECK(results[r].exit_code == 3);
    CHECK(results[r].output.find("failed on rank " + std::to_string(r) + ": rank 1 did not reach it or died") !=
          std::string::npos);
    CHECK(seconds_to_fail(results[r].output) <= 2.1);  // the 2 s timeout, give or take scheduling
    CHECK(results[r].seconds < 6.0);
  }
}

TEST_CASE("a hung rank makes the others fail within the timeout naming it", "[distributed]") {
  auto results = run_worker("hung_rank", 2, /*linger=*/{1});
  INFO(results[0].output);
  CHECK(results[0].exit_code == 3);
  CHECK(results[0].output.find("all_reduce (collective #2) failed on rank 0: rank 1 did not reach it or died") !=
        std::string::npos);
  CHECK(seconds_to_fail(results[0].output) <= 2.1);
  CHECK(results[0].seconds < 6.0);
  CHECK(results[1].signal == 9);  // still hanging, killed by the test
}

TEST_CASE("all_reduce_after moves what the buffer holds when its gate opens, and a cancelled gate fails both ranks",
          "[distributed]") {
  auto results = run_worker("gated", 2);
  for (auto& r : results) CHECK(r.output.find("ok gated [3, 5, 7, 9]") != std::string::npos);  // (1+i) + (2+i)
  INFO("rank 0:\n" << results[0].output << "rank 1:\n" << results[1].output);
  CHECK(results[0].output.find("an all_reduce on rank 0 never moved its data: its caller cancelled it before the "
                               "data was ready") != std::string::npos);
  CHECK(seconds_to_fail(results[0].output) < 1.0);  // at once, not after the timeout
  CHECK(results[0].output.find("DistError: all_reduce (collective #3): this process group failed earlier and cannot "
                               "be used") != std::string::npos);
  CHECK(results[0].exit_code == 3);
  CHECK(results[1].output.find("failed on rank 1: rank 0 did not reach it or died") != std::string::npos);
  CHECK(seconds_to_fail(results[1].output) <= 2.1);  // the 2 s timeout
}
