// User mistakes with process groups and collectives: each a clear error,
// checked by type and message. A one-rank group in this process is enough.
#include <catch2/catch.hpp>
#include <stdlib.h>

#include <filesystem>

#include "dsl/dist/collectives.h"
#include "dsl/tessel.h"
#include "rank_processes.h"

using namespace tessel;

namespace {

struct OneRankGroup {
  std::string store = test::fresh_temp_dir("store");
  OneRankGroup() {
    dist::init_process_group({.backend = "gloo", .init_method = "file://" + store, .rank = 0, .world_size = 1});
  }
  ~OneRankGroup() {
    dist::destroy_process_group();
    std::filesystem::remove_all(store);
  }
};

}  // namespace

TEST_CASE("init_process_group rejects an unknown backend", "[distributed][error]") {
  CHECK_THROWS_MATCHES(dist::init_process_group({.backend = "mpi"}), ValueError,
                       Catch::Message("init_process_group: unknown backend 'mpi'; this build has \"gloo\" (CPU "
                                      "tensors) and \"nccl\" (GPU tensors)"));
}

TEST_CASE("init_process_group with env:// needs MASTER_ADDR", "[distributed][error]") {
  ::unsetenv("MASTER_ADDR");
  ::unsetenv("MASTER_PORT");
  CHECK_THROWS_MATCHES(dist::init_process_group({.backend = "gloo", .rank = 0, .world_size = 1}), ValueError,
                       Catch::Message("init_process_group: init_method env:// needs MASTER_ADDR and MASTER_PORT "
                                      "(MASTER_ADDR unset); launch with tessel-run, or use init_method "
                                      "\"file:///a/fresh/folder\""));
}

TEST_CASE("init_process_group rejects a rank outside the world", "[distributed][error]") {
  CHECK_THROWS_MATCHES(dist::init_process_group({.backend = "gloo", .init_method = "file:///tmp/x", .rank = 2,
                                                 .world_size = 2}),
                       ValueError, Catch::Message("init_process_group: rank 2 is not in a world of size 2 (ranks are 0..1)"));
  CHECK_THROWS_MATCHES(dist::init_process_group({.backend = "gloo", .init_method = "file:///tmp/x", .rank = 0}),
                       ValueError,
                       Catch::Message("init_process_group: give both .rank and .world_size, or neither (then the "
                                      "launcher's RANK and WORLD_SIZE are read)"));
}

TEST_CASE("init_process_group rejects a malformed init_method", "[distributed][error]") {
  CHECK_THROWS_MATCHES(
      dist::init_process_group({.backend = "gloo", .init_method = "tcp://nohost", .rank = 0, .world_size = 1}),
      ValueError, Catch::Message("init_process_group: init_method 'tcp://nohost' is not tcp://HOST:PORT"));
  CHECK_THROWS_MATCHES(
      dist::init_process_group({.backend = "gloo", .init_method = "nfs://x", .rank = 0, .world_size = 1}), ValueError,
      Catch::Message("init_process_group: init_method 'nfs://x' is not env://, tcp://HOST:PORT or file:///FOLDER"));
}

TEST_CASE("a collective without a process group says to create one", "[distributed][error]") {
  CHECK_THROWS_MATCHES(dist::all_reduce(ones({2})), ValueError,
                       Catch::Message("distributed: no process group; call dist::init_process_group() first (and "
                                      "start the program with tessel-run)"));
}

TEST_CASE("joining a second group without leaving the first is an error", "[distributed][error]") {
  OneRankGroup g;
  CHECK_THROWS_MATCHES(dist::init_process_group({.backend = "gloo", .init_method = "file:///tmp/x", .rank = 0,
                                                 .world_size = 1}),
                       ValueError,
                       Catch::Message("init_process_group: this process already joined a group; call "
                                      "destroy_process_group() before joining another"));
}

TEST_CASE("all_reduce rejects dtypes gloo cannot reduce, and avg of integers", "[distributed][error]") {
  OneRankGroup g;
  CHECK_THROWS_MATCHES(dist::all_reduce(ones({2}, DType::b8)), DTypeError,
                       Catch::Message("all_reduce: the gloo backend reduces f32, f64, i32 and i64 tensors, not bool; "
                                      "convert first with .to(DType::f32)"));
  CHECK_THROWS_MATCHES(dist::all_reduce(ones({2}, DType::i64), dist::ReduceOp::avg), DTypeError,
                       Catch::Message("all_reduce(avg): an average of i64 tensors would truncate; use sum and divide, "
                                      "or convert to a floating dtype"));
}

TEST_CASE("broadcast rejects a root outside the group", "[distributed][error]") {
  OneRankGroup g;
  CHECK_THROWS_MATCHES(dist::broadcast(ones({2}), 1), ValueError,
                       Catch::Message("broadcast: root 1 is not a rank of this group (0..0)"));
}

TEST_CASE("reduce_scatter needs an input of world-size chunks", "[distributed][error]") {
  OneRankGroup g;
  CHECK_THROWS_MATCHES(dist::reduce_scatter(zeros({2}), ones({3})), ShapeError,
                       Catch::Message("reduce_scatter: the input must hold 1 (world size) times the output's 2 f32 "
                                      "elements, as f32; it holds 3 f32"));
}

TEST_CASE("a one-rank group computes each collective as the identity", "[distributed]") {
  OneRankGroup g;
  Tensor t = tensor({1.0, 2.0, 3.0});
  dist::all_reduce(t, dist::ReduceOp::avg);
  CHECK(t.to_vector<float>() == std::vector<float>{1, 2, 3});
  auto all = dist::all_gather(t);
  REQUIRE(all.size() == 1);
  CHECK(all[0].to_vector<float>() == std::vector<float>{1, 2, 3});
  CHECK(dist::default_group()->rank() == 0);
  CHECK(dist::default_group()->size() == 1);
  CHECK(dist::default_group()->backend() == "gloo");
}
