// cuBLASLt loaded at run time, checked without a GPU (label driver): built
// with TESSEL_TEST_CUBLASLT unset, the toolkit's library loads and reports a
// plausible version, and gemm checks its arguments before it needs a device;
// built with TESSEL_TEST_CUBLASLT naming a missing library or one that is not
// cuBLASLt, nothing throws while asking and every product says what was tried.
#include "runtime/cuda/cublas.h"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include "runtime/errors.h"

using namespace tessel::cuda;
using tessel::DType;

#ifdef TESSEL_TEST_CUBLASLT
namespace {
const bool kOverrideSet = [] {
  setenv("TESSEL_CUBLASLT", TESSEL_TEST_CUBLASLT, 1);
  return true;
}();
}  // namespace

TEST_CASE("an unusable TESSEL_CUBLASLT is reported, never silently replaced", "[driver]") {
  REQUIRE(kOverrideSet);
  bool available = true;
  REQUIRE_NOTHROW(available = cublaslt_available());
  CHECK_FALSE(available);
  CHECK(cublaslt_library() == TESSEL_TEST_LOADED);
  const std::string reason = cublaslt_unavailable_reason();
  CHECK_THAT(reason, Catch::Contains(TESSEL_TEST_REASON));
  CHECK_THAT(reason, Catch::Contains("TESSEL_CUBLASLT"));
  CHECK_THROWS_AS(cublaslt_version(), tessel::DeviceError);
  CHECK_THROWS_WITH(cublaslt_version(), Catch::StartsWith("cublasLtGetVersion: ") && Catch::Contains(TESSEL_TEST_REASON));
  CHECK_THROWS_WITH(gemm(0, nullptr, DType::f32, 2, 3, 4, {0x1000, 4}, {0x2000, 3}, 0x3000, 3),
                    Catch::StartsWith("cuBLASLt gemm: ") && Catch::Contains(TESSEL_TEST_REASON));
}

#else

TEST_CASE("cuBLASLt loads from the CUDA toolkit and reports its version", "[driver]") {
  INFO(cublaslt_unavailable_reason());
  REQUIRE(cublaslt_available());
  CHECK(cublaslt_unavailable_reason().empty());
  const std::string lib = cublaslt_library();
  CHECK_THAT(lib, Catch::Contains("libcublasLt.so."));
  // major * 10000 + minor * 100 + patch, the major the soname's.
  const std::size_t v = cublaslt_version();
  CHECK(v >= 110000);
  CHECK(v < 1000000);
  const std::string major = lib.substr(lib.rfind(".so.") + 4);
  CHECK(std::to_string(v / 10000) == major);
  std::printf("cuBLASLt %zu from %s\n", v, lib.c_str());
}

TEST_CASE("gemm rejects what cuBLASLt cannot compute before touching a device", "[driver]") {
  const GemmOperand a{0x1000, 4}, b{0x2000, 3};
  CHECK_THROWS_AS(gemm(0, nullptr, DType::i64, 2, 3, 4, a, b, 0x3000, 3), tessel::DTypeError);
  CHECK_THROWS_WITH(gemm(0, nullptr, DType::f16, 2, 3, 4, a, b, 0x3000, 3),
                    "cuBLASLt gemm: f16 product [2, 4] x [4, 3] (A B, epilogue none): only f32 and f64 products run on "
                    "cuBLASLt");
  CHECK_THROWS_WITH(gemm(0, nullptr, DType::f32, 2, 3, 0, a, b, 0x3000, 3),
                    Catch::Contains("M and N must be at least 0 and K at least 1"));
  CHECK_THROWS_AS(gemm(0, nullptr, DType::f32, -1, 3, 4, a, b, 0x3000, 3), tessel::ValueError);
  // Stored rows: A's are K = 4 long, B's N = 3, C's N = 3; transposed, A's are M = 2, B's K = 4.
  CHECK_THROWS_WITH(gemm(0, nullptr, DType::f64, 2, 3, 4, {0x1000, 3}, b, 0x3000, 3),
                    Catch::Contains("leading dimensions lda=3 ldb=3 ldc=3 are shorter than the rows they step over "
                                    "(4, 3, 3)"));
  CHECK_THROWS_AS(gemm(0, nullptr, DType::f32, 2, 3, 4, a, {0x2000, 3, true}, 0x3000, 3), tessel::ValueError);
  CHECK_THROWS_AS(gemm(0, nullptr, DType::f32, 2, 3, 4, a, b, 0x3000, 2), tessel::ValueError);
  CHECK_THROWS_WITH(gemm(0, nullptr, DType::f32, 2, 3, 4, a, b, 0x3000, 3, GemmEpilogue::bias_relu),
                    Catch::Contains("epilogue bias+relu): the bias epilogue needs a bias"));
  // Nothing to compute needs no device.
  CHECK_NOTHROW(gemm(0, nullptr, DType::f32, 0, 3, 4, a, b, 0x3000, 3));
  CHECK_NOTHROW(gemm(0, nullptr, DType::f32, 2, 0, 4, a, {0x2000, 1}, 0x3000, 1));
}

TEST_CASE("epilogues have names", "[driver]") {
  CHECK(gemm_epilogue_name(GemmEpilogue::none) == "none");
  CHECK(gemm_epilogue_name(GemmEpilogue::bias) == "bias");
  CHECK(gemm_epilogue_name(GemmEpilogue::relu) == "relu");
  CHECK(gemm_epilogue_name(GemmEpilogue::bias_relu) == "bias+relu");
}

#endif
