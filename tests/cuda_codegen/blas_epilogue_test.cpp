// Which matmul epilogues the CUDA backend hands to cuBLASLt (cudagen::blas_epilogue):
// the schedule of real graphs run through the step loop on host memory, each
// epilogue it passes to the matmul checked -- bias, ReLU and bias+ReLU in
// either operand order and both float dtypes, the bias's view reported exactly
// (offset included) -- and everything else left to a kernel.
#include <catch2/catch.hpp>

#include <optional>
#include <string>
#include <vector>

#include "codegen/builders.h"
#include "codegen/cuda/cuda_backend.h"
#include "host_executors.h"

using namespace tessel;
using cuda::GemmEpilogue;
using cuda_codegen_test::host_alloc;

namespace {

// Runs the steps on the host and records what blas_epilogue says of each matmul epilogue.
class Recorder : public cudagen::Executor {
 public:
  std::vector<std::optional<cudagen::BlasEpilogue>> seen;
  ir::BufferView alloc(DType t, const Shape& s) override { return host_alloc(t, s); }
  void launch(const lower::Lowered&) override {}
  ir::BufferView host_eval(const ir::Node& n, const std::vector<ir::BufferView>& args) override {
    return eval_with_ref(n, args);
  }
  void matmul_epilogue(const ir::Node&, const std::vector<ir::BufferView>&, const ir::BufferView& out,
                       const lower::Lowered& epi, const ir::Node&) override {
    seen.push_back(cudagen::blas_epilogue(epi, out));
  }
};

ir::NodePtr leaf(DType t, const Shape& s) { return ir::input(host_alloc(t, s), t, s); }

// What blas_epilogue says of the one matmul epilogue of `root`'s schedule.
std::optional<cudagen::BlasEpilogue> classify(const ir::NodePtr& root) {
  Recorder r;
  cudagen::realize_steps(r, {root}, false);
  REQUIRE(r.seen.size() == 1);  // the schedule handed the matmul an epilogue
  return r.seen[0];
}

}  // namespace

TEST_CASE("bias and ReLU epilogues of a 2-D product go to cuBLASLt with their bias view", "[unit]") {
  for (DType t : {DType::f32, DType::f64})
    for (int64_t M : {1, 33}) {
      CAPTURE(dtype_name(t), M);
      const int64_t K = 7, N = 5;
      ir::NodePtr x = leaf(t, Shape({M, K})), w = leaf(t, Shape({K, N}));
      // The bias: a window [3, 3 + N) of a longer buffer, so its offset shows.
      ir::BufferView big = host_alloc(t, Shape({N + 3}));
      ir::NodePtr b = ir::slice(ir::input(big, t, Shape({N + 3})), {3}, {1}, Shape({N}));

      auto bias_relu = classify(ir::unary(ir::Op::Relu, ir::binary(ir::Op::Add, ir::matmul(x, w), b)));
      REQUIRE(bias_relu.has_value());
      CHECK(bias_relu->kind == GemmEpilogue::bias_relu);
      CHECK(bias_relu->bias.storage == big.storage);
      CHECK(bias_relu->bias.offset == 3);
      CHECK(bias_relu->bias.strides == Strides{1});

      auto bias = classify(ir::binary(ir::Op::Add, ir::matmul(x, w), b));
      REQUIRE(bias.has_value());
      CHECK(bias->kind == GemmEpilogue::bias);
      auto bias_first = classify(ir::binary(ir::Op::Add, b, ir::matmul(x, w)));
      REQUIRE(bias_first.has_value());
      CHECK(bias_first->kind == GemmEpilogue::bias);
      CHECK(bias_first->bias.offset == 3);

      auto relu = classify(ir::unary(ir::Op::Relu, ir::matmul(x, w)));
      REQUIRE(relu.has_value());
      CHECK(relu->kind == GemmEpilogue::relu);
      CHECK(relu->bias.storage == nullptr);
    }
}

TEST_CASE("other matmul epilogues stay kernels", "[unit]") {
  const DType t = DType::f32;
  ir::NodePtr x = leaf(t, Shape({6, 4})), w = leaf(t, Shape({4, 5}));
  auto mm = [&] { return ir::matmul(x, w); };
  // A scale, a bias per row (a [6, 1] column), a full [6, 5] addend, a bias
  // read with a step, a bias of another dtype, a bias then a different activation.
  CHECK_FALSE(classify(ir::binary(ir::Op::Mul, mm(), ir::constant(ir::ScalarValue::of(2.0), t))).has_value());
  CHECK_FALSE(classify(ir::binary(ir::Op::Add, mm(), leaf(t, Shape({6, 1})))).has_value());
  CHECK_FALSE(classify(ir::binary(ir::Op::Add, mm(), leaf(t, Shape({6, 5})))).has_value());
  ir::NodePtr stepped = ir::slice(leaf(t, Shape({10})), {0}, {2}, Shape({5}));
  CHECK_FALSE(classify(ir::binary(ir::Op::Add, mm(), stepped)).has_value());
  CHECK_FALSE(classify(ir::unary(ir::Op::Relu, ir::binary(ir::Op::Add, mm(), ir::cast(leaf(DType::f64, Shape({5})), t))))
                  .has_value());
  CHECK_FALSE(classify(ir::unary(ir::Op::Sigmoid, ir::binary(ir::Op::Add, mm(), leaf(t, Shape({5}))))).has_value());
  CHECK_FALSE(classify(ir::unary(ir::Op::Relu, ir::binary(ir::Op::Sub, mm(), leaf(t, Shape({5}))))).has_value());
}
