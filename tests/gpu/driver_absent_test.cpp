// Without a usable driver (TESSEL_TEST_DRIVER names a missing library or the
// toolkit's stub), tessel sees no GPU: nothing throws while asking, and every
// call that needs a device says why it cannot have one.
#include "runtime/cuda/driver.h"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include "runtime/cuda/device_allocator.h"
#include "runtime/errors.h"

using namespace tessel::cuda;

namespace {
const bool kDriverSet = [] {
  setenv("TESSEL_CUDA_DRIVER", TESSEL_TEST_DRIVER, 1);
  return true;
}();
}  // namespace

TEST_CASE("without a driver there are no devices and asking does not throw", "[gpu][driver]") {
  REQUIRE(kDriverSet);
  int n = -1;
  REQUIRE_NOTHROW(n = device_count());
  REQUIRE(n == 0);
  REQUIRE_FALSE(driver_available());
  REQUIRE(driver_version() == 0);
  REQUIRE(current_device() == -1);
  REQUIRE_THAT(driver_unavailable_reason(), Catch::Contains(TESSEL_TEST_REASON));
  REQUIRE(error_name(CUDA_ERROR_OUT_OF_MEMORY) == "CUDA_ERROR_OUT_OF_MEMORY");
}

TEST_CASE("without a driver device calls raise DeviceError saying why", "[gpu][driver]") {
  REQUIRE_THROWS_WITH(mem_alloc(0, 16), Catch::Contains("cuMemAlloc_v2: the CUDA driver is not available (") &&
                                            Catch::Contains(TESSEL_TEST_REASON));
  REQUIRE_THROWS_AS(device_properties(0), tessel::DeviceError);
  REQUIRE_THROWS_AS(stream_create(0), tessel::DeviceError);
  REQUIRE_THROWS_AS(Module::load_ptx(0, ".entry k("), tessel::DeviceError);
  REQUIRE_THROWS_WITH(device_allocator(0), "cuda:0 does not exist: this machine has 0 CUDA devices");
  // Freeing nothing needs no driver.
  REQUIRE_NOTHROW(mem_free(0));
  REQUIRE_NOTHROW(host_free_pinned(nullptr));
}
