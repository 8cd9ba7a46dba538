// Row-program graphs (softmax, log_softmax, layer norm, cross_entropy's row
// sum, a stored stage, 3-d and transposed inputs, a 1000003-element row) for
// the CUDA row-program tests: each case builds a fresh graph over the same
// realized inputs, so one copy can go to the ref backend and one to the
// generated kernels.
#pragma once

#include <functional>
#include <random>
#include <string>
#include <vector>

#include "codegen/ir.h"
#include "dsl/functional.h"
#include "dsl/tessel.h"

namespace cuda_codegen_test {

struct RowCase {
  std::string what;
  std::function<std::vector<tessel::Tensor>()> make;  // roots
};

inline tessel::Tensor row_input(uint64_t seed, const tessel::Shape& s, tessel::DType t) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> u(-4, 4);
  std::vector<double> v(static_cast<size_t>(s.numel()));
  for (auto& x : v) x = u(g);
  tessel::Tensor x = tessel::from_vector<double>(v, s);
  if (t != tessel::DType::f64) x = x.to(t).contiguous();
  x.eval();  // a realized leaf: both copies of a case read the same memory
  return x;
}

inline tessel::Tensor layer_norm_rows(const tessel::Tensor& x, int64_t dim) {
  using namespace tessel;
  Tensor d = sub(x, x.mean({dim}, true));
  return div(d, Tensor(mul(d, d).mean({dim}, true) + 1e-5).sqrt());
}

inline std::vector<RowCase> row_cases() {
  using namespace tessel;
  std::vector<RowCase> c;
  uint64_t seed = 1;
  for (DType t : {DType::f32, DType::f64}) {
    const std::string tn(dtype_name(t));
    Tensor a = row_input(seed++, {33, 257}, t), b = row_input(seed++, {31, 33}, t), one = row_input(seed++, {1, 31}, t);
    Tensor narrow = row_input(seed++, {33, 2}, t), tr = row_input(seed++, {257, 33}, t).t();
    Tensor x3 = row_input(seed++, {3, 17, 5}, t);
    Tensor mask = binary_op(ir::Op::Gt, row_input(seed++, {31, 33}, t), Scalar(0)).to(t);
    mask.eval();
    c.push_back({tn + " softmax [33, 257] dim 1", [=] { return std::vector<Tensor>{softmax(a, 1)}; }});
    c.push_back({tn + " log_softmax [31, 33] dim 0", [=] { return std::vector<Tensor>{log_softmax(b, 0)}; }});
    c.push_back({tn + " layer norm [1, 31]", [=] { return std::vector<Tensor>{layer_norm_rows(one, 1)}; }});
    c.push_back({tn + " layer norm [33, 2]", [=] { return std::vector<Tensor>{layer_norm_rows(narrow, 1)}; }});
    c.push_back({tn + " softmax of a transposed [33, 257]", [=] { return std::vector<Tensor>{softmax(tr, 1)}; }});
    c.push_back({tn + " masked log_softmax row sums (a third reduction as the main part)",
                 [=] { return std::vector<Tensor>{mul(log_softmax(b, 1), mask).sum({1})}; }});
    c.push_back({tn + " mean stored beside x - mean", [=] {
                   Tensor mu = b.mean({1}, true);
                   return std::vector<Tensor>{mu, Tensor(sub(b, mu) * 2.0)};
                 }});
    c.push_back({tn + " softmax [3, 17, 5] dim 1", [=] { return std::vector<Tensor>{softmax(x3, 1)}; }});
    c.push_back({tn + " layer norm over dims 1 and 2 of [3, 17, 5]", [=] {
                   Tensor d = sub(x3, x3.mean({1, 2}, true));
                   return std::vector<Tensor>{div(d, Tensor(mul(d, d).mean({1, 2}, true) + 1e-5).sqrt())};
                 }});
  }
  Tensor big = row_input(seed++, {1, 1000003}, DType::f32);
  c.push_back({"f32 softmax [1, 1000003]", [=] { return std::vector<Tensor>{softmax(big, 1)}; }});
  return c;
}

inline std::vector<tessel::ir::NodePtr> nodes_of(const std::vector<tessel::Tensor>& ts) {
  std::vector<tessel::ir::NodePtr> n;
  for (const auto& t : ts) n.push_back(t.node());
  return n;
}

}  // namespace cuda_codegen_test
