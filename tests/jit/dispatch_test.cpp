// The cached launch path of the compiled CPU backend: a realization of a
// DAG form seen before replays its recorded plan (no scheduling, no
// lowering), and large kernels run on the thread pool. Both must give exactly
// what a fresh schedule on one thread gives.
#include "tests/support/tensor_testing.h"

#include <cstring>

#include "codegen/cpu/cpu_backend.h"
#include "dsl/expr.h"
#include "runtime/thread_pool.h"
#include "tessel/config.h"

using namespace tessel;
using namespace tessel::testing;

#if TESSEL_HAS_LLVM

namespace {

std::vector<double> on_ref(const std::function<Tensor()>& f) {
  BackendOverride r(ref_backend());
  return vals(f());
}

std::vector<uint32_t> bits_of(const Tensor& t) {
  std::vector<float> v = t.contiguous().to_vector<float>();
  std::vector<uint32_t> out(v.size());
  std::memcpy(out.data(), v.data(), v.size() * sizeof(float));
  return out;
}

struct Threads {
  int prev = num_threads();
  explicit Threads(int n) { set_num_threads(n); }
  ~Threads() { set_num_threads(prev); }
};

}  // namespace

TEST_CASE("a repeated realization reads each call's constants", "[jit]") {
  BackendOverride o(*cpu_jit_backend());
  Tensor x = rand({3, 5});
  x.eval();
  for (double c : {2.0, 3.0, -1.5, 2.0}) {
    Tensor y = x * c + 1.0;
    y.eval();
    require_close(vals(y), on_ref([&] { return Tensor(x * c + 1.0); }), 1e-6, 1e-6);
  }
  // Two constants equal in one call and different in the next.
  for (double c : {1.0, 0.25}) {
    Tensor y = x * c + 1.0;
    y.eval();
    require_close(vals(y), on_ref([&] { return Tensor(x * c + 1.0); }), 1e-6, 1e-6);
  }
  reset_cpu_jit_stats();
  Tensor y = x * 7.0 + 1.0;
  y.eval();
  CHECK(cpu_jit_stats().kernels_launched == 1);
  CHECK(cpu_jit_stats().kernels_compiled == 0);
  require_close(vals(y), on_ref([&] { return Tensor(x * 7.0 + 1.0); }), 1e-6, 1e-6);
}

TEST_CASE("a repeated realization follows each call's leaves", "[jit]") {
  BackendOverride o(*cpu_jit_backend());
  Tensor a = rand({4, 4}), b = rand({4, 4});
  a.eval();
  b.eval();
  // The same form over one storage and over two.
  for (int i = 0; i < 2; ++i) {
    Tensor y = a * a.t() + b;
    Tensor z = a * b.t() + b;
    y.eval();
    z.eval();
    require_close(vals(y), on_ref([&] { return Tensor(a * a.t() + b); }), 1e-6, 1e-6);
    require_close(vals(z), on_ref([&] { return Tensor(a * b.t() + b); }), 1e-6, 1e-6);
  }
  // Offsets of views are part of the form: rows 0 and 1 of the same tensor.
  for (int64_t r : {0, 1, 0}) {
    Tensor y = a[r] * 2.0 + b[r];
    y.eval();
    require_close(vals(y), on_ref([&] { return Tensor(a[r] * 2.0 + b[r]); }), 1e-6, 1e-6);
  }
}

TEST_CASE("expressions stay lazy and see the values from before an in-place write", "[jit]") {
  BackendOverride o(*cpu_jit_backend());
  Tensor x = rand({2, 20}), w = rand({2, 20});
  x.eval();
  w.eval();
  std::vector<double> before = on_ref([&] { return Tensor(relu(x * w + 1.0) * 2.0); });
  for (int i = 0; i < 3; ++i) {  // the plan is cached from the second call on
    Tensor y = relu(x * w + 1.0) * 2.0;
    CHECK_FALSE(y.is_realized());
    y.eval();
  }
  Tensor y = relu(x * w + 1.0) * 2.0;
  CHECK_FALSE(y.is_realized());
  x += 1.0;  // y was made from the old x: it is realized before the write
  require_close(vals(y), before, 1e-6, 1e-6);
  Tensor z = relu(x * w + 1.0) * 2.0;
  std::vector<double> after = on_ref([&] { return Tensor(relu(x * w + 1.0) * 2.0); });
  require_close(vals(z), after, 1e-6, 1e-6);
  CHECK(after != before);
}

TEST_CASE("a repeated training step replays with the values backward reads", "[jit]") {
  BackendOverride o(*cpu_jit_backend());
  Tensor x = rand({8, 6});
  x.eval();
  std::vector<std::vector<double>> grads;
  for (int i = 0; i < 3; ++i) {
    Tensor w = full({8, 6}, 0.5 + i);
    w.requires_grad_();
    Tensor loss = Tensor(Tensor(w * x + 1.0).tanh() * x).sum();
    loss.eval();  // the forward keeps what backward reads (replayed from the second step on)
    loss.backward();
    grads.push_back(vals(w.grad()));
  }
  for (int i = 0; i < 3; ++i) {
    BackendOverride r(ref_backend());
    Tensor w = full({8, 6}, 0.5 + i);
    w.requires_grad_();
    Tensor loss = Tensor(Tensor(w * x + 1.0).tanh() * x).sum();
    loss.backward();
    require_close(grads[static_cast<size_t>(i)], vals(w.grad()), 1e-6, 1e-6);
  }
}

TEST_CASE("large kernels give the same bits on 1 and 2 threads", "[jit]") {
  BackendOverride o(*cpu_jit_backend());
  Tensor a = rand({int64_t{1} << 20}), b = rand({int64_t{1} << 20}), c = rand({int64_t{1} << 20});
  Tensor m = rand({1024, 513}), n = rand({1024, 513});
  Tensor p = rand({4096, 256}), q = rand({256, 1024}), bias = rand({1024});
  for (auto* t : {&a, &b, &c, &m, &n, &p, &q, &bias}) t->eval();
  auto run = [&](int threads) {
    Threads th(threads);
    reset_cpu_jit_stats();
    Tensor chain = relu(a * b + c) * a;      // one long row: split by columns
    Tensor rows = Tensor(m * n + 1.0).exp();  // many rows: split by rows
    Tensor red = Tensor(m * n).sum({1});      // a row reduction
    Tensor total = Tensor(a * b).sum();       // one row: never split
    Tensor mlp = relu(p % q + bias);          // a 16 MB product: bands of rows, each with its epilogue
    realize({chain, rows, red, total});
    CHECK(cpu_jit_stats().kernels_launched == 4);
    mlp.eval();
    return std::vector<std::vector<uint32_t>>{bits_of(chain), bits_of(rows), bits_of(red), bits_of(total),
                                              bits_of(mlp)};
  };
  auto one = run(1), two = run(2);
  for (size_t i = 0; i < one.size(); ++i) {
    INFO("result " << i);
    CHECK(one[i] == two[i]);
  }
  require_close(vals(Tensor(relu(a * b + c) * a)), on_ref([&] { return Tensor(relu(a * b + c) * a); }), 1e-6, 1e-6);
}

#endif  // TESSEL_HAS_LLVM
