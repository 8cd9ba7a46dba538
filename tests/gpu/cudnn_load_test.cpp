// cuDNN loaded at run time, checked without a GPU (label driver): built with
// TESSEL_TEST_CUDNN unset, the toolkit's library loads and reports a
// plausible version, and the convolutions check their arguments before they
// need a device; built with TESSEL_TEST_CUDNN naming a missing library or one
// that is not cuDNN, nothing throws while asking and every convolution says
// what was tried.
#include "runtime/cuda/cudnn.h"

#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "runtime/errors.h"

using namespace tessel::cuda;
using tessel::DType;

namespace {
const ConvProblem kProblem{.n = 2, .c = 4, .h = 8, .w = 8, .o = 6, .kh = 3, .kw = 3, .groups = 2, .pad_h = 1, .pad_w = 1};
}  // namespace

#ifdef TESSEL_TEST_CUDNN
namespace {
const bool kOverrideSet = [] {
  setenv("TESSEL_CUDNN", TESSEL_TEST_CUDNN, 1);
  return true;
}();
}  // namespace

TEST_CASE("an unusable TESSEL_CUDNN is reported, never silently replaced", "[driver]") {
  REQUIRE(kOverrideSet);
  bool available = true;
  REQUIRE_NOTHROW(available = cudnn_available());
  CHECK_FALSE(available);
  CHECK(cudnn_library() == TESSEL_TEST_LOADED);
  const std::string reason = cudnn_unavailable_reason();
  CHECK_THAT(reason, Catch::Contains(TESSEL_TEST_REASON));
  CHECK_THAT(reason, Catch::Contains("TESSEL_CUDNN"));
  CHECK_THROWS_AS(cudnn_version(), tessel::DeviceError);
  CHECK_THROWS_WITH(cudnn_version(), Catch::StartsWith("cudnnGetVersion: ") && Catch::Contains(TESSEL_TEST_REASON));
  CHECK_THROWS_WITH(conv_forward(0, nullptr, DType::f32, kProblem, 0x1000, 0x2000, 0x3000),
                    Catch::StartsWith("cuDNN convolution: ") && Catch::Contains(TESSEL_TEST_REASON));
  CHECK_THROWS_AS(conv_supported(0, DType::f32, ConvPass::forward, kProblem), tessel::DeviceError);
}

#else

TEST_CASE("cuDNN loads from the CUDA toolkit and reports its version", "[driver]") {
  INFO(cudnn_unavailable_reason());
  REQUIRE(cudnn_available());
  CHECK(cudnn_unavailable_reason().empty());
  const std::string lib = cudnn_library();
  CHECK_THAT(lib, Catch::Contains("libcudnn.so."));
  // major * 10000 + minor * 100 + patch, the major the soname's.
  const std::size_t v = cudnn_version();
  CHECK(v >= 90000);
  CHECK(v < 1000000);
  const std::string major = lib.substr(lib.rfind(".so.") + 4);
  CHECK(std::to_string(v / 10000) == major);
  std::printf("cuDNN %zu from %s\n", v, lib.c_str());
}

TEST_CASE("convolutions reject what cuDNN cannot compute before touching a device", "[driver]") {
  CHECK_THROWS_AS(conv_forward(0, nullptr, DType::i64, kProblem, 0x1000, 0x2000, 0x3000), tessel::DTypeError);
  CHECK_THROWS_WITH(conv_backward_data(0, nullptr, DType::f16, kProblem, 0x1000, 0x2000, 0x3000),
                    "cuDNN convolution: f16 convolution backward data (input [2, 4, 8, 8], weight [6, 2, 3, 3], "
                    "groups 2, stride (1, 1), padding (1, 1), dilation (1, 1)): only f32 and f64 convolutions run on "
                    "cuDNN");
  ConvProblem p = kProblem;
  p.groups = 4;  // does not divide o = 6
  CHECK_THROWS_WITH(conv_forward(0, nullptr, DType::f32, p, 0x1000, 0x2000, 0x3000),
                    Catch::Contains("groups must divide both c and o"));
  p = kProblem;
  p.pad_w = -1;
  CHECK_THROWS_WITH(conv_backward_filter(0, nullptr, DType::f64, p, 0x1000, 0x2000, 0x3000),
                    Catch::Contains("negative padding"));
  p = kProblem;
  p.dilation_h = 5;  // spans 11 rows of the 10 padded ones
  CHECK_THROWS_WITH(conv_forward(0, nullptr, DType::f32, p, 0x1000, 0x2000, 0x3000),
                    Catch::Contains("the kernel is larger than the padded input"));
  p = kProblem;
  p.n = int64_t(1) << 31;
  CHECK_THROWS_WITH(conv_forward(0, nullptr, DType::f32, p, 0x1000, 0x2000, 0x3000),
                    Catch::Contains("exceeds cuDNN's 32-bit int"));
  CHECK_FALSE(conv_supported(0, DType::f32, ConvPass::forward, p));
  // Nothing to write needs no device.
  p = kProblem;
  p.n = 0;
  CHECK_NOTHROW(conv_forward(0, nullptr, DType::f32, p, 0x1000, 0x2000, 0x3000));
  CHECK_NOTHROW(conv_backward_data(0, nullptr, DType::f32, p, 0x1000, 0x2000, 0x3000));
  CHECK(conv_supported(0, DType::f32, ConvPass::forward, p));
}

TEST_CASE("convolution passes and problems have names", "[driver]") {
  CHECK(conv_pass_name(ConvPass::forward) == "forward");
  CHECK(conv_pass_name(ConvPass::backward_data) == "backward data");
  CHECK(conv_pass_name(ConvPass::backward_filter) == "backward filter");
  CHECK(kProblem.out_h() == 8);
  CHECK(ConvProblem{.h = 9, .kh = 3, .stride_h = 2}.out_h() == 4);
}

#endif
