// Streaming stores: large elementwise outputs are written with non-temporal,
// cache-line-aligned vector stores by a kernel variant compiled when a launch
// needs it (llvm_emitter.h, kStreamBytes). The kernels are compiled by hand
// here so the output can start at any element of a cache line and end
// anywhere in one (head, lines, tail).
#include "tests/support/tensor_testing.h"

#include "tessel/config.h"

#if TESSEL_HAS_LLVM

#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include <cstdlib>
#include <memory>

#include "codegen/cpu/cpu_backend.h"
#include "codegen/cpu/llvm_emitter.h"
#include "tests/jit/hand_kernels.h"

using namespace tessel;
using namespace tessel::testing;

namespace {

using kir::Stmt;
using kir::StmtKind;
using testing::load;
using testing::op;

// out = relu(a * b + c) * d as one rank-1 kernel of dtype t (f32, f64 or i64).
kir::Kernel chain(DType t) {
  kir::Kernel k;
  k.params = {{t, true}, {t, false}, {t, false}, {t, false}, {t, false}};
  k.load_params = {1, 2, 3, 4};
  k.rank = 1;
  k.body = {load(0, t), load(1, t), op(ir::Op::Mul, t, {0, 1}), load(2, t), op(ir::Op::Add, t, {2, 3}),
            op(ir::Op::Relu, t, {4}), load(3, t), op(ir::Op::Mul, t, {5, 6})};
  k.value = 7;
  return k;
}

// Same, with exp in place of relu: compute-bound, keeps ordinary stores.
kir::Kernel exp_chain(DType t) {
  kir::Kernel k = chain(t);
  k.body[5].op = ir::Op::Exp;
  return k;
}

bool has_nontemporal(const kir::Kernel& k, bool streaming = true) {
  llvm::LLVMContext ctx;
  return cpujit::module_text(*cpujit::emit_llvm(k, "k", ctx, {.streaming = streaming})).find("!nontemporal") !=
         std::string::npos;
}

cpujit::KernelFn* compile(const kir::Kernel& k) { return testing::compile_by_hand(k, {.streaming = true}); }

template <class T> T expect_chain(T a, T b, T c, T d) {
  T t = a * b + c;
  return (t > T(0) ? t : T(0)) * d;
}

// Runs the chain over n elements with the output starting `shift` elements
// into a 64-byte-aligned buffer; every element must equal the scalar formula
// and the elements around the output must be untouched.
template <class T> void run_chain(DType t, int64_t n, int64_t shift, int64_t stride_d = 1) {
  cpujit::KernelFn* fn = compile(chain(t));
  const int64_t pad = 32;
  auto buf = [&](int64_t len) { return std::unique_ptr<T[], void (*)(T*)>(
      static_cast<T*>(std::aligned_alloc(64, static_cast<size_t>((len * static_cast<int64_t>(sizeof(T)) + 63) / 64 * 64))),
      [](T* p) { std::free(p); }); };
  auto out = buf(n + 2 * pad), a = buf(n), b = buf(n), c = buf(n), d = buf(n);
  for (int64_t i = 0; i < n; ++i) {
    a[i] = static_cast<T>(i % 13) - T(6);
    b[i] = static_cast<T>(i % 7) - T(2);
    c[i] = static_cast<T>(i % 5) - T(3);
    d[i] = static_cast<T>(i % 11) + T(1);
  }
  const T canary = T(-12345);
  for (int64_t i = 0; i < n + 2 * pad; ++i) out[i] = canary;
  T* o = out.get() + pad + shift;  // shift < pad
  void* bufs[] = {o, a.get(), b.get(), c.get(), d.get()};
  // dims | store off, stride | 4 loads: off, stride
  int64_t args[] = {n, 0, 1, 0, 1, 0, 1, 0, 1, 0, stride_d};
  fn(bufs, args, 0, 1);
  int64_t bad = -1;
  for (int64_t i = 0; i < n && bad < 0; ++i)
    if (o[i] != expect_chain(a[i], b[i], c[i], d[stride_d * i])) bad = i;
  INFO("n " << n << " shift " << shift << " first wrong element " << bad);
  CHECK(bad == -1);
  int64_t first = o - out.get();
  bool untouched = true;
  for (int64_t i = 0; i < first; ++i) untouched = untouched && out[i] == canary;
  for (int64_t i = first + n; i < n + 2 * pad; ++i) untouched = untouched && out[i] == canary;
  CHECK(untouched);
}

}  // namespace

TEST_CASE("streaming stores: emitted for memory-bound elementwise kernels only", "[jit]") {
  CHECK(has_nontemporal(chain(DType::f32)));
  CHECK(has_nontemporal(chain(DType::f64)));
  CHECK(has_nontemporal(chain(DType::i64)));
  CHECK_FALSE(has_nontemporal(chain(DType::f32), /*streaming=*/false));  // the plain variant
  CHECK_FALSE(has_nontemporal(exp_chain(DType::f32)));  // compute-bound: vector-math calls instead
  kir::Kernel sum = chain(DType::f32);
  sum.reduce = kir::ReduceKind::Sum;
  sum.reduce_rank = 1;
  sum.rank = 2;
  sum.epilogue = {{StmtKind::Acc, ir::Op::Add, DType::f64, {}, 0}, op(ir::Op::Cast, DType::f32, {0})};
  sum.result = 1;
  CHECK_FALSE(has_nontemporal(sum));
}

TEST_CASE("streaming stores: a launch asks for the variant when it writes 16 MiB with unit strides", "[jit]") {
  kir::Kernel k = chain(DType::f32);
  const int64_t big = cpujit::kStreamBytes / 4;
  auto args = [](int64_t n, int64_t stride_d) { return std::vector<int64_t>{n, 0, 1, 0, 1, 0, 1, 0, 1, 0, stride_d}; };
  CHECK(cpujit::wants_streaming(k, args(big, 1).data(), 1));
  CHECK_FALSE(cpujit::wants_streaming(k, args(big - 1, 1).data(), 1));
  CHECK(cpujit::wants_streaming(k, args(big / 4, 1).data(), 4));  // rows count: 4 rows of a quarter
  CHECK_FALSE(cpujit::wants_streaming(k, args(big, 0).data(), 1));  // a broadcast operand
  CHECK_FALSE(cpujit::wants_streaming(exp_chain(DType::f32), args(big, 1).data(), 1));
}

TEST_CASE("streaming stores: every alignment of the output, head and tail lengths", "[jit]") {
  const int64_t big = (int64_t{16} << 20) / 4;  // exactly the threshold in f32 elements
  for (int64_t shift : {0, 1, 5, 15}) {
    run_chain<float>(DType::f32, big + 3, shift);  // head of 16 - shift lines' elements, tail of 3 (+ what the head took)
  }
  run_chain<float>(DType::f32, big + 16 * 5, 0);  // whole lines only
  run_chain<float>(DType::f32, big - 1, 3);       // just below the threshold: cached stores, same values
  run_chain<float>(DType::f32, 1000, 7);          // small
  run_chain<double>(DType::f64, (int64_t{16} << 20) / 8 + 9, 3);
  run_chain<int64_t>(DType::i64, (int64_t{16} << 20) / 8 + 1, 1);
  run_chain<float>(DType::f32, big + 3, 2, /*stride_d=*/0);  // a broadcast operand: not unit stride, cached path
}

TEST_CASE("streaming stores: a large fused chain equals the ref interpreter", "[jit]") {
  Backend* jit = cpu_jit_backend();
  REQUIRE(jit);
  manual_seed(7);
  const int64_t n = (int64_t{16} << 20) / 4 + 13;
  Tensor a = rand({n}), b = rand({n}), c = rand({n}) - 0.5, d = rand({n});
  for (Tensor* t : {&a, &b, &c, &d}) t->eval();
  Tensor want, got;
  {
    BackendOverride r(ref_backend());
    want = relu(a * b + c) * d;
    want.eval();
  }
  {
    BackendOverride o(*jit);
    got = relu(a * b + c) * d;
    got.eval();
  }
  REQUIRE(got.shape() == Shape({n}));
  CHECK(vals(got) == vals(want));
}

#endif  // TESSEL_HAS_LLVM
