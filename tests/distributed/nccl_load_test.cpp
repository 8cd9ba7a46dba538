// NCCL loaded at run time, checked without a GPU: built with TESSEL_TEST_NCCL
// unset, the CUDA toolkit's library loads and every entry point tessel
// declares binds (label driver); built with TESSEL_TEST_NCCL naming a missing
// library or one that is not NCCL, nothing throws while asking, and the
// nccl backend says what was tried and how to fix it.
#include "runtime/cuda/nccl.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "rank_processes.h"
#include "runtime/cuda/driver.h"
#include "runtime/dist/file_store.h"
#include "runtime/dist/init.h"
#include "runtime/dist/nccl_process_group.h"
#include "runtime/errors.h"

using namespace tessel;

#ifdef TESSEL_TEST_NCCL
namespace {
const bool kOverrideSet = [] {
  setenv("TESSEL_NCCL", TESSEL_TEST_NCCL, 1);
  return true;
}();
}  // namespace

TEST_CASE("an unusable TESSEL_NCCL is reported, never silently replaced", "[distributed][driver]") {
  REQUIRE(kOverrideSet);
  bool available = true;
  REQUIRE_NOTHROW(available = cuda::nccl_available());
  CHECK_FALSE(available);
  CHECK(cuda::nccl_library() == TESSEL_TEST_LOADED);
  const std::string reason = cuda::nccl_unavailable_reason();
  CHECK_THAT(reason, Catch::Contains(TESSEL_TEST_REASON));
  CHECK_THAT(reason, Catch::Contains("TESSEL_NCCL"));
  CHECK_THROWS_AS(cuda::nccl_version(), DeviceError);
  CHECK_THROWS_WITH(cuda::nccl_unique_id(),
                    Catch::StartsWith("ncclGetUniqueId: ") && Catch::Contains(TESSEL_TEST_REASON));
}

TEST_CASE("the nccl backend without NCCL is a DeviceError that says what was tried", "[distributed][driver]") {
  const std::string dir = test::fresh_temp_dir("nccl-missing");
  const std::string want_start = "the nccl backend: ";
  CHECK_THROWS_AS(dist::make_nccl_process_group(std::make_shared<dist::FileStore>(dir), 0, 1, std::chrono::seconds(5)),
                  DeviceError);
  CHECK_THROWS_WITH(
      dist::make_nccl_process_group(std::make_shared<dist::FileStore>(dir), 0, 1, std::chrono::seconds(5)),
      Catch::StartsWith(want_start) && Catch::Contains(TESSEL_TEST_REASON) && Catch::Contains("TESSEL_NCCL") &&
          Catch::EndsWith("; or use the gloo backend for CPU tensors"));
  CHECK_THROWS_WITH(dist::init_process_group({.backend = "nccl", .init_method = "file://" + dir, .rank = 0,
                                              .world_size = 1}),
                    Catch::StartsWith(want_start) && Catch::Contains(TESSEL_TEST_REASON));
  CHECK_FALSE(dist::is_initialized());
  std::filesystem::remove_all(dir);
}

#else

TEST_CASE("NCCL loads from the CUDA toolkit, every entry point tessel uses binds", "[distributed][driver]") {
  INFO(cuda::nccl_unavailable_reason());
  REQUIRE(cuda::nccl_available());
  CHECK(cuda::nccl_unavailable_reason().empty());
  const std::string lib = cuda::nccl_library();
  CHECK_THAT(lib, Catch::Contains("libnccl.so.2"));
  // major * 10000 + minor * 100 + patch since 2.9; tessel needs 2.10 or newer.
  const int v = cuda::nccl_version();
  CHECK(v >= 21000);
  CHECK(v < 100000);
  std::printf("NCCL %d from %s\n", v, lib.c_str());
}

TEST_CASE("the nccl backend needs a GPU: without one it is a DeviceError saying so", "[distributed][driver]") {
  const std::string dir = test::fresh_temp_dir("nccl-no-gpu");
  auto make = [&] {
    return dist::make_nccl_process_group(std::make_shared<dist::FileStore>(dir), 0, 1, std::chrono::seconds(5));
  };
  if (cuda::device_count() > 0) {
    CHECK_NOTHROW(make());  // a world of one: the unique id is made, the communicator waits for a collective
  } else {
    CHECK_THROWS_AS(make(), DeviceError);
    CHECK_THROWS_WITH(make(), Catch::StartsWith("the nccl backend needs a CUDA GPU and this process sees none (") &&
                                  Catch::EndsWith("); use the gloo backend for CPU tensors"));
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("NCCL's reductions have names", "[distributed][driver]") {
  CHECK(cuda::nccl_red_op_name(cuda::NcclRedOp::sum) == "sum");
  CHECK(cuda::nccl_red_op_name(cuda::NcclRedOp::prod) == "prod");
  CHECK(cuda::nccl_red_op_name(cuda::NcclRedOp::max) == "max");
  CHECK(cuda::nccl_red_op_name(cuda::NcclRedOp::min) == "min");
  CHECK(cuda::nccl_red_op_name(cuda::NcclRedOp::avg) == "avg");
}

#endif
