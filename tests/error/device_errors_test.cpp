#include "error_testing.h"

using namespace tessel;

// Machines without a GPU: creating on gpu(0) is a clear error. With a GPU the
// creation succeeds and the cross-device op itself must be the error.

TEST_CASE("creating a tensor on a GPU that does not exist", "[error]") {
  if (num_gpus() > 0) SUCCEED("this machine has a GPU");
  else REQUIRE_ERROR(zeros({2}, gpu(0)), DeviceError, "cuda:0", "does not exist", "try_gpu");
}

TEST_CASE("creating on a GPU index past the last one", "[error]") {
  REQUIRE_ERROR(ones({2}, gpu(num_gpus() + 3)), DeviceError, "does not exist");
}

TEST_CASE("rand on a GPU that does not exist", "[error]") {
  REQUIRE_ERROR(rand({2}, gpu(num_gpus() + 1)), DeviceError, "does not exist");
}

TEST_CASE("moving to a GPU that does not exist", "[error]") {
  REQUIRE_ERROR(ones({2}).to(gpu(num_gpus() + 1)), DeviceError, "does not exist");
}

TEST_CASE("same-device to() returns the same tensor", "[error]") {
  Tensor t = ones({2});
  CHECK(t.to(cpu()).is_same(t));
}

TEST_CASE("cross-device op", "[error]") {
  if (num_gpus() == 0) {
    REQUIRE_ERROR(ones({2}, gpu(0)), DeviceError, "cuda:0");
    return;
  }
  Tensor a = ones({2}), b = ones({2}, gpu(0));
  REQUIRE_ERROR(Tensor(a + b), DeviceError, "same device", "cpu", "cuda:0");
}

TEST_CASE("try_gpu falls back to the CPU", "[error]") {
  if (num_gpus() == 0) {
    CHECK(try_gpu().is_cpu());
    CHECK(try_all_gpus().size() == 1);
  } else {
    CHECK(try_gpu().is_cuda());
  }
}
