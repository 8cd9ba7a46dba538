// tessel's cuBLASLt products (runtime/cuda/cublas.h) over the host stand-in
// (libtessel-emulated-cublaslt.so): every transpose, epilogue and dtype against
// a host loop, exactly (small integers, so every sum is exact).
#include <catch2/catch.hpp>

#include <cstring>
#include <string>
#include <vector>

#include "emulated_test_support.h"
#include "runtime/cuda/cublas.h"
#include "runtime/cuda/driver.h"

using namespace tessel::cuda;
using tessel::DType;

namespace {

unsigned long long matmuls() {
  (void)cublaslt_available();  // loads the library
  auto f = emulated_test::symbol<unsigned long long (*)()>(TESSEL_EMU_CUBLASLT_PATH, "tessel_emu_blaslt_matmuls");
  return f ? f() : ~0ull;
}

template <class T>
void check_products(DType dt) {
  const int64_t M = 5, N = 7, K = 3;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (GemmEpilogue epi : {GemmEpilogue::none, GemmEpilogue::bias, GemmEpilogue::relu, GemmEpilogue::bias_relu}) {
        INFO("trans_a " << ta << " trans_b " << tb << " epilogue " << gemm_epilogue_name(epi));
        // Stored matrices with padded rows: A is [M, K] or, transposed, [K, M].
        const int64_t a_rows = ta ? K : M, a_cols = ta ? M : K, lda = a_cols + 2;
        const int64_t b_rows = tb ? N : K, b_cols = tb ? K : N, ldb = b_cols + 1;
        const int64_t ldc = N + 3;
        std::vector<T> a(a_rows * lda), b(b_rows * ldb), bias(N), c(M * ldc, T(-77));
        for (std::size_t i = 0; i < a.size(); ++i) a[i] = T(static_cast<int>(i * 7 % 11) - 5);
        for (std::size_t i = 0; i < b.size(); ++i) b[i] = T(static_cast<int>(i * 5 % 9) - 4);
        for (int64_t n = 0; n < N; ++n) bias[n] = T(n - 3);
        auto A = [&](int64_t i, int64_t k) { return ta ? a[k * lda + i] : a[i * lda + k]; };
        auto B = [&](int64_t k, int64_t j) { return tb ? b[j * ldb + k] : b[k * ldb + j]; };
        std::vector<T> expect = c;
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < N; ++j) {
            T s = 0;
            for (int64_t k = 0; k < K; ++k) s += A(i, k) * B(k, j);
            if (epi == GemmEpilogue::bias || epi == GemmEpilogue::bias_relu) s += bias[j];
            if (epi == GemmEpilogue::relu || epi == GemmEpilogue::bias_relu) s = s > 0 ? s : T(0);
            expect[i * ldc + j] = s;
          }
        const std::size_t sz = sizeof(T);
        CUdeviceptr da = mem_alloc(0, a.size() * sz), db = mem_alloc(0, b.size() * sz),
                    dc = mem_alloc(0, c.size() * sz), dbias = mem_alloc(0, bias.size() * sz);
        memcpy_htod(da, a.data(), a.size() * sz);
        memcpy_htod(db, b.data(), b.size() * sz);
        memcpy_htod(dc, c.data(), c.size() * sz);
        memcpy_htod(dbias, bias.data(), bias.size() * sz);
        const unsigned long long before = matmuls();
        gemm(0, nullptr, dt, M, N, K, {da, lda, ta}, {db, ldb, tb}, dc, ldc, epi, dbias);
        CHECK(matmuls() == before + 1);
        std::vector<T> got(c.size());
        memcpy_dtoh(got.data(), dc, got.size() * sz);
        CHECK(got == expect);  // the padding (-77) untouched too
        for (CUdeviceptr p : {da, db, dc, dbias}) mem_free(p);
      }
}

}  // namespace

TEST_CASE("the cuBLASLt stand-in is what tessel loads", "[emulated-gpu][cublaslt]") {
  INFO(cublaslt_unavailable_reason());
  REQUIRE(cublaslt_available());
  CHECK(cublaslt_library() == std::getenv("TESSEL_CUBLASLT"));
  CHECK(cublaslt_version() == 130000);
}

TEST_CASE("f32 products with every transpose and epilogue match a host loop", "[emulated-gpu][cublaslt]") {
  check_products<float>(DType::f32);
}

TEST_CASE("f64 products with every transpose and epilogue match a host loop", "[emulated-gpu][cublaslt]") {
  check_products<double>(DType::f64);
}

TEST_CASE("a product on cuda:1 reads and writes cuda:1's memory", "[emulated-gpu][cublaslt]") {
  const float a[] = {1, 2, 3, 4}, b[] = {5, 6, 7, 8};  // [2, 2] each
  CUdeviceptr da = mem_alloc(1, 16), db = mem_alloc(1, 16), dc = mem_alloc(1, 16);
  memcpy_htod(da, a, 16);
  memcpy_htod(db, b, 16);
  gemm(1, nullptr, DType::f32, 2, 2, 2, {da, 2}, {db, 2}, dc, 2);
  float c[4];
  memcpy_dtoh(c, dc, 16);
  CHECK(std::vector<float>(c, c + 4) == std::vector<float>{19, 22, 43, 50});
  for (CUdeviceptr p : {da, db, dc}) mem_free(p);
}
