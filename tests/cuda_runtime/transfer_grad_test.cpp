// Gradients flow through to(device), as in PyTorch: a device copy is a leaf of
// its device's graph whose gradient is copied back into the source's graph.
// Runs over fake_libcuda (device memory on the host), so only copies happen on
// the "device": every computation here stays on the CPU.
#include <catch2/catch.hpp>

#include <cstdlib>

#include "dsl/tessel.h"

using namespace tessel;

namespace {
const bool kUseFake = [] {
  setenv("TESSEL_CUDA_DRIVER", TESSEL_FAKE_LIBCUDA, 1);
  return true;
}();

std::vector<double> vals(const Tensor& t) { return t.to_vector<double>(); }
}  // namespace

TEST_CASE("to(device) is differentiable: the gradient comes back to the source", "[emulated-cuda]") {
  (void)kUseFake;
  REQUIRE(num_gpus() == 1);
  Tensor x = tensor({1.0, 2.0, 3.0}).requires_grad_();
  Tensor on_gpu = x.to(gpu(0));
  CHECK(on_gpu.device() == gpu(0));
  CHECK(on_gpu.requires_grad());
  CHECK_FALSE(on_gpu.is_leaf());
  CHECK(on_gpu.grad_fn_name() == "ToCopyBackward0");
  Tensor back = on_gpu.to(cpu());
  CHECK(back.grad_fn_name() == "ToCopyBackward0");
  Tensor loss = Tensor(back * back).sum();
  loss.backward();
  REQUIRE(x.grad().defined());
  CHECK(x.grad().device() == cpu());
  CHECK(vals(x.grad()) == std::vector<double>{2, 4, 6});  // d(sum x^2)/dx

  // Two copies of one source: both gradients are summed into it.
  x.grad().zero_();
  Tensor twice = Tensor(x.to(gpu(0)).to(cpu()) * 3 + x.to(gpu(0)).to(cpu())).sum();
  twice.backward();
  CHECK(vals(x.grad()) == std::vector<double>{4, 4, 4});
}

TEST_CASE("a retained grad on a device copy is kept and still relayed", "[emulated-cuda]") {
  Tensor x = tensor({1.0, -1.0}).requires_grad_();
  Tensor y = x.to(gpu(0)).to(cpu());
  y.retain_grad();
  Tensor(y * 5).sum().backward();
  REQUIRE(y.grad().defined());
  CHECK(vals(y.grad()) == std::vector<double>{5, 5});
  CHECK(vals(x.grad()) == std::vector<double>{5, 5});
}

TEST_CASE("copies without grad stay plain leaves", "[emulated-cuda]") {
  Tensor x = tensor({1.0, 2.0}).requires_grad_();
  {
    NoGradGuard g;
    Tensor c = x.to(gpu(0));
    CHECK_FALSE(c.requires_grad());
    CHECK(c.is_leaf());
  }
  Tensor d = x.detach().to(gpu(0));
  CHECK_FALSE(d.requires_grad());
  CHECK(d.grad_fn_name().empty());
}
