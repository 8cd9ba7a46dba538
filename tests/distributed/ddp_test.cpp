// Data-parallel training across 2 and 4 processes on loopback (ddp_worker.cpp
// runs each rank): DDP equals single-process training, its all-reduces start
// while backward still runs, tied parameters, no_sync, models that differ, a
// rank killed mid-training, the distributed sampler, and the Trainer's
// checkpoints (written by rank 0, resumed by every rank).
#include <catch2/catch.hpp>

#include <filesystem>

#include "dsl/data/distributed_sampler.h"
#include "rank_processes.h"

using namespace tessel;
using namespace tessel::test;

namespace {

std::vector<RankResult> run_ddp(std::vector<std::string> args, int world, int deadline_s = 90) {
  RankRun run;
  run.argv = {TESSEL_DDP_WORKER, args.at(0)};
  run.world_size = world;
  run.deadline = std::chrono::seconds(deadline_s);
  return run_ranks_with_file_store(std::move(run), {args.begin() + 1, args.end()});
}

void expect_all_ok(const std::vector<RankResult>& results, int oks) {
  for (size_t r = 0; r < results.size(); ++r) {
    INFO("rank " << r << " printed:\n" << results[r].output);
    CHECK(results[r].exit_code == 0);
    CHECK(count(results[r].output, "FAIL") == 0);
    CHECK(count(results[r].output, "ok ") == oks);
  }
}

}  // namespace

TEST_CASE("DDP on 2 processes equals single-process training (f64 1e-12, f32 1e-5)", "[distributed][ddp]") {
  expect_all_ok(run_ddp({"equals_single", "f64"}, 2), 1);
  expect_all_ok(run_ddp({"equals_single", "f32"}, 2), 1);
}

TEST_CASE("DDP on 4 processes equals single-process training (f64 1e-12, f32 1e-5)", "[distributed][ddp]") {
  expect_all_ok(run_ddp({"equals_single", "f64"}, 4), 1);
  expect_all_ok(run_ddp({"equals_single", "f32"}, 4), 1);
}

TEST_CASE("DDP starts the first bucket's all-reduce before backward produces the last gradient", "[distributed][ddp]") {
  expect_all_ok(run_ddp({"overlap"}, 2), 4);
}

TEST_CASE("DDP reduces a tied parameter once", "[distributed][ddp]") {
  expect_all_ok(run_ddp({"tied"}, 2), 2);
}

TEST_CASE("DDP no_sync accumulates locally, then the next backward synchronizes", "[distributed][ddp]") {
  expect_all_ok(run_ddp({"no_sync"}, 2), 4);
  expect_all_ok(run_ddp({"no_sync"}, 4), 4);
}

TEST_CASE("DDP over models that differ is a ValueError naming the difference and the ranks", "[distributed][ddp]") {
  for (int world : {2, 4}) {
    auto results = run_ddp({"mismatch", std::to_string(world - 1)}, world);
    for (auto& r : results) {
      INFO(r.output);
      CHECK(r.exit_code == 4);
      CHECK(r.output.find(fmt::format(
                "ValueError: DistributedDataParallel: the models differ across ranks: entry #0 is parameter "
                "'0.weight' f32 [256, 784] on rank 0 but parameter '0.weight' f32 [128, 784] on rank {} (rank 0 has 4 "
                "parameters and buffers, rank {} has 4)",
                world - 1, world - 1)) != std::string::npos);
    }
  }
}

TEST_CASE("a rank killed with SIGKILL mid-training makes the others' backward fail naming it", "[distributed][ddp]") {
  auto results = run_ddp({"dead_rank"}, 4, 60);
  CHECK(results[1].signal == 9);
  for (int r : {0, 2, 3}) {
    INFO("rank " << r << ":\n" << results[r].output);
    CHECK(results[r].exit_code == 3);
    CHECK(results[r].output.find("rank 1 did not reach it or died") != std::string::npos);
    auto p = results[r].output.find("failed after ");
    REQUIRE(p != std::string::npos);
    CHECK(std::stod(results[r].output.substr(p + 13)) <= 2.5);  // the 2 s timeout, give or take scheduling
  }
}

TEST_CASE("DistributedSampler shards across 2 and 4 processes: disjoint, covering, padded, reshuffled alike",
          "[distributed][ddp]") {
  expect_all_ok(run_ddp({"sampler"}, 2), 9);
  expect_all_ok(run_ddp({"sampler"}, 4), 9);
}

TEST_CASE("DistributedSampler follows PyTorch's sizes and padding", "[distributed][ddp]") {
  // 10 examples, 4 ranks, no shuffle: [0..9, 0, 1] dealt round-robin.
  std::vector<std::vector<int64_t>> want = {{0, 4, 8}, {1, 5, 9}, {2, 6, 0}, {3, 7, 1}};
  for (int r = 0; r < 4; ++r) {
    data::DistributedSampler s(10, {.num_replicas = 4, .rank = r, .shuffle = false});
    CHECK(s.indices() == want[static_cast<size_t>(r)]);
    CHECK(s.num_samples() == 3);
    data::DistributedSampler d(10, {.num_replicas = 4, .rank = r, .shuffle = false, .drop_last = true});
    CHECK(d.indices() == std::vector<int64_t>{r, r + 4});  // 8 of 10 kept
  }
  data::DistributedSampler a(100, {.num_replicas = 2, .rank = 0, .seed = 5});
  data::DistributedSampler b(100, {.num_replicas = 2, .rank = 0, .seed = 5});
  a.set_epoch(3);
  b.set_epoch(3);
  CHECK(a.indices() == b.indices());
  b.set_epoch(4);
  CHECK(a.indices() != b.indices());
  CHECK_THROWS_MATCHES(data::DistributedSampler(10, {.num_replicas = 2, .rank = 2}), ValueError,
                       Catch::Message("DistributedSampler: invalid rank 2, rank should be in the interval [0, 1]"));
}

TEST_CASE("Trainer with a process group: rank 0 prints and checkpoints, a resumed run gives identical losses",
          "[distributed][ddp]") {
  std::string dir = fresh_temp_dir("ckpt");
  std::string ck = dir + "/ck.safetensors";
  auto full = run_ddp({"trainer", "3", "", ""}, 2);
  auto part = run_ddp({"trainer", "2", ck, ""}, 2);
  auto resumed = run_ddp({"trainer", "3", "", ck}, 2);
  for (auto* rs : {&full, &part, &resumed})
    for (size_t r = 0; r < rs->size(); ++r) {
      INFO("rank " << r << ":\n" << (*rs)[r].output);
      CHECK((*rs)[r].exit_code == 0);
      if (r > 0) CHECK((*rs)[r].output.find("epoch") == std::string::npos);  // only rank 0 prints
    }
  CHECK(std::filesystem::exists(ck));
  auto line = [](const std::string& out, int epoch) {
    auto p = out.find("loss " + std::to_string(epoch) + " ");
    return p == std::string::npos ? std::string("(none)") : out.substr(p, out.find('\n', p) - p);
  };
  INFO("full:\n" << full[0].output << "\npart:\n" << part[0].output << "\nresumed:\n" << resumed[0].output);
  CHECK(line(full[0].output, 1) == line(part[0].output, 1));
  CHECK(line(full[0].output, 2) == line(part[0].output, 2));
  CHECK(line(full[0].output, 3) == line(resumed[0].output, 3));
  CHECK(line(resumed[0].output, 3) != "(none)");
  CHECK(line(resumed[0].output, 2) == "(none)");  // it started at epoch 3
  std::filesystem::remove_all(dir);
}
