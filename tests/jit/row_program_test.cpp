// Row programs: several reductions over one row domain and their elementwise
// readers in one kernel (softmax, log_softmax, layer norm), against the ref
// interpreter. Scheduling tests run in every build; the compiled ones need LLVM.
#include "tests/support/tensor_testing.h"

#include <functional>

#include "codegen/autodiff.h"
#include "codegen/cpu/cpu_backend.h"
#include "codegen/schedule.h"
#include "dsl/functional.h"
#include "dsl/reductions.h"
#include "tessel/config.h"

using namespace tessel;
using namespace tessel::testing;

namespace {

Tensor rnd(std::mt19937_64& g, const Shape& s, DType t, double scale = 4) {
  std::uniform_real_distribution<double> u(-scale, scale);
  std::vector<double> v(static_cast<size_t>(s.numel()));
  for (auto& x : v) x = u(g);
  return make(v, s, t);
}

// mean, then the mean of the squared deviation, then the normalized row.
Tensor layer_norm_rows(const Tensor& x, int64_t dim) {
  Tensor mu = x.mean({dim}, true);
  Tensor d = sub(x, mu);
  Tensor var = mul(d, d).mean({dim}, true);
  return div(d, Tensor(var + 1e-5).sqrt());
}

// The schedule of an f32 loss's gradients with respect to its `leaves` leaves.
sched::Schedule gradient_schedule(const Tensor& loss, size_t leaves) {
  std::vector<autodiff::LeafGrad> grads =
      autodiff::gradients(loss.node(), ir::constant(ir::ScalarValue::of(1.0), DType::f32), true);
  REQUIRE(grads.size() == leaves);
  std::vector<ir::NodePtr> roots;
  for (const autodiff::LeafGrad& g : grads) roots.push_back(g.grad);
  return sched::schedule(roots);
}

// PyTorch's gradient of cross_entropy over [rows, classes] logits:
// keep * (softmax - (1 - eps) * onehot - eps / C) * scale, label -100 ignored.
void check_cross_entropy_gradient(const std::vector<double>& got, const Tensor& logits,
                                  const std::vector<int64_t>& labels, double smoothing, double scale) {
  const size_t rows = static_cast<size_t>(logits.shape()[0]), classes = static_cast<size_t>(logits.shape()[1]);
  auto p = vals(softmax(logits, 1));
  for (size_t i = 0; i < rows; ++i)
    for (size_t c = 0; c < classes; ++c) {
      const double target =
          (static_cast<int64_t>(c) == labels[i] ? 1 - smoothing : 0) + smoothing / static_cast<double>(classes);
      const double expect = labels[i] == -100 ? 0 : (p[i * classes + c] - target) * scale;
      INFO("row " << i << " class " << c);
      CHECK(std::fabs(got[i * classes + c] - expect) < 1e-6);
    }
}

// Labels of `rows` rows over 10 classes: (i * step) % 10.
std::vector<int64_t> cycling_labels(size_t rows, size_t step) {
  std::vector<int64_t> lab(rows);
  for (size_t i = 0; i < rows; ++i) lab[i] = static_cast<int64_t>((i * step) % 10);
  return lab;
}

const sched::Step* row_step(const sched::Schedule& s) {
  for (const sched::Step& st : s.steps)
    if (st.kind == sched::StepKind::RowProgram) return &st;
  return nullptr;
}

}  // namespace

TEST_CASE("row programs: softmax is one kernel of two stages", "[jit]") {
  Tensor x = rand({33, 257});
  Tensor y = softmax(x, 1);  // the schedule points into y's graph: keep it alive
  sched::Schedule s = sched::schedule({y.node()});
  INFO(s.to_string());
  CHECK(s.kernels() == 1);
  REQUIRE(s.steps.size() == 1);
  const sched::Step* st = row_step(s);
  REQUIRE(st);
  REQUIRE(st->stages.size() == 2);
  CHECK(st->stages[0]->op == ir::Op::Max);
  CHECK(st->stages[1]->op == ir::Op::Sum);
  CHECK(st->stored == std::vector<bool>{false, false});
  CHECK(st->reason == "row program: 2 reduction(s) over axes [1] of [33, 257] share the kernel");
}

TEST_CASE("row programs: log_softmax, layer norm and cross_entropy's row part", "[jit]") {
  Tensor x = rand({8, 16});
  Tensor lsm = log_softmax(x, 1);  // the schedules point into these graphs: keep them alive
  sched::Schedule ls = sched::schedule({lsm.node()});
  INFO(ls.to_string());
  CHECK(ls.kernels() == 1);
  REQUIRE(row_step(ls));
  CHECK(row_step(ls)->stages.size() == 2);

  Tensor lnr = layer_norm_rows(x, 1);
  sched::Schedule ln = sched::schedule({lnr.node()});
  INFO(ln.to_string());
  CHECK(ln.kernels() == 1);
  REQUIRE(row_step(ln));
  CHECK(row_step(ln)->stages.size() == 2);
  CHECK(row_step(ln)->stages[0]->op == ir::Op::Mean);

  // The picked log-probability is a third reduction over the same rows; the
  // mean over the batch is another domain, its kernel negating as it reads.
  Tensor labels = from_vector<int64_t>({0, 3, 15, 7, 7, 1, 2, 9}, Shape{8});
  Tensor ce_loss = cross_entropy(x, labels);
  sched::Schedule ce = sched::schedule({ce_loss.node()});
  INFO(ce.to_string());
  CHECK(ce.kernels() == 2);
  REQUIRE(row_step(ce));
  CHECK(row_step(ce)->node->op == ir::Op::Sum);
  CHECK(row_step(ce)->stages.size() == 2);
  sched::Options off;
  off.row_programs = false;
  CHECK(sched::schedule({ce_loss.node()}, off).kernels() == 5);  // max, x - max, sum, picked sum, mean of the negation
}

TEST_CASE("row programs: a stage read elsewhere keeps today's cuts", "[jit]") {
  Tensor x = rand({5, 7});
  Tensor m = x.max(1, true);
  // m is also read transposed: its row value is needed outside the kernel.
  Tensor y = Tensor(sub(x, m).exp()) + m.t().sum();
  sched::Schedule s = sched::schedule({y.node()});
  INFO(s.to_string());
  CHECK(row_step(s) == nullptr);
  CHECK(s.kernels() == 3);  // max, the full sum, the elementwise root

  sched::Options off;
  off.row_programs = false;
  Tensor sm = softmax(x, 1);
  sched::Schedule s2 = sched::schedule({sm.node()}, off);
  INFO(s2.to_string());
  CHECK(s2.kernels() == 4);  // max, exp(x - max) used twice, sum, divide
}

TEST_CASE("row programs: values kept for backward split the group where they are stored", "[jit][autograd]") {
  Tensor x = rand({6, 9}).requires_grad_();
  Tensor y = softmax(x, 1);
  sched::Schedule s = sched::schedule({y.node()}, {.keep_grad_values = true});
  INFO(s.to_string());
  // Backward reads exp(x - max) (exp's derivative reads its output) and the
  // sum (the divide's), not x - max: [max | exp], [sum (stored) | divide].
  REQUIRE(s.steps.size() == 2);
  CHECK(s.kernels() == 2);
  CHECK(s.steps[0].kind == sched::StepKind::RowProgram);
  CHECK(s.steps[0].node->op == ir::Op::Exp);
  CHECK(s.steps[0].stored == std::vector<bool>{false});  // the shift carries no gradient
  CHECK(s.steps[1].kind == sched::StepKind::RowProgram);
  CHECK(s.steps[1].stages[0]->op == ir::Op::Sum);
  CHECK(s.steps[1].stored == std::vector<bool>{true});
}

// var's last stage is its result: one kernel. std and logsumexp end in
// elementwise ops on the reduced row (sqrt; log and the shift), which a row
// program does not take in yet: they are one row kernel plus small ones.
TEST_CASE("row programs: var over a row is one kernel, std and logsumexp use the row program", "[jit]") {
  Tensor x = rand({33, 257});
  Tensor v = x.var({1}), sd = x.std({1}, 0), l = logsumexp(x, {1});  // keep the graphs alive
  sched::Schedule sv = sched::schedule({v.node()});
  INFO(sv.to_string());
  CHECK(sv.kernels() == 1);
  REQUIRE(row_step(sv));
  CHECK(row_step(sv)->stages.size() == 1);  // the mean; the sum is the output
  sched::Schedule ss = sched::schedule({sd.node()}), sl = sched::schedule({l.node()});
  INFO(ss.to_string() << sl.to_string());
  CHECK(row_step(ss));
  CHECK(ss.kernels() == 2);
  CHECK(row_step(sl));
  CHECK(sl.kernels() == 3);
}

#if TESSEL_HAS_LLVM

namespace {

// Runs `f` on the compiled backend and on ref; returns the kernels launched.
uint64_t compare(const std::function<Tensor()>& f, bool exact, double tol = 0) {
  Backend* jit = cpu_jit_backend();
  REQUIRE(jit);
  Tensor want, got;
  {
    BackendOverride o(ref_backend());
    want = f();
    want.eval();
  }
  uint64_t before = cpu_jit_stats().kernels_launched;
  {
    BackendOverride o(*jit);
    got = f();
    got.eval();
  }
  uint64_t launched = cpu_jit_stats().kernels_launched - before;
  REQUIRE(got.shape() == want.shape());
  if (exact) {
    auto a = vals(got), b = vals(want);
    REQUIRE(a.size() == b.size());
    size_t bad = 0;
    for (size_t i = 0; i < a.size(); ++i) bad += !(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])));
    CHECK(bad == 0);
  } else {
    require_close(vals(got), vals(want), tol, tol);
  }
  return launched;
}

}  // namespace

TEST_CASE("row programs: softmax over dim 1 of [33, 257] is one launch, bit-equal to ref", "[jit]") {
  std::mt19937_64 g(7);
  for (DType t : {DType::f32, DType::f64}) {
    Tensor x = rnd(g, {33, 257}, t);
    CHECK(compare([&] { return softmax(x, 1); }, true) == 1);
    CHECK(compare([&] { return log_softmax(x, 1); }, true) == 1);
    CHECK(compare([&] { return layer_norm_rows(x, 1); }, true) == 1);
  }
  // A softmax row sums to one.
  BackendOverride o(*cpu_jit_backend());
  Tensor p = softmax(rnd(g, {3, 1000}, DType::f64), 1);
  for (double v : vals(p.sum({1}))) CHECK(std::fabs(v - 1) < 1e-12);
}

TEST_CASE("row programs: odd shapes, long rows, strided and transposed inputs", "[jit]") {
  std::mt19937_64 g(11);
  for (DType t : {DType::f32, DType::f64}) {
    for (int64_t rows : {1, 31, 33}) {
      for (int64_t cols : {1, 2, 31, 33}) {
        INFO(dtype_name(t) << " [" << rows << ", " << cols << "]");
        Tensor x = rnd(g, {rows, cols}, t);
        CHECK(compare([&] { return softmax(x, 1); }, true) == 1);
        CHECK(compare([&] { return log_softmax(x, 0); }, true) == 1);
        CHECK(compare([&] { return layer_norm_rows(x, 1); }, true) == 1);
      }
    }
    INFO(dtype_name(t));
    Tensor big = rnd(g, {1, 1000003}, t);
    CHECK(compare([&] { return softmax(big, 1); }, true) == 1);
    CHECK(compare([&] { return layer_norm_rows(big, 1); }, true) == 1);
    Tensor tr = rnd(g, {257, 33}, t).t();  // rows are strided in memory
    CHECK(compare([&] { return softmax(tr, 1); }, true) == 1);
    Tensor sl = rnd(g, {31, 66}, t).slice(1, 1, 66, 2);
    CHECK(compare([&] { return log_softmax(sl, 1); }, true) == 1);
    Tensor x3 = rnd(g, {3, 17, 5}, t);  // reduce the middle axis, and two axes at once
    CHECK(compare([&] { return softmax(x3, 1); }, true) == 1);
    CHECK(compare([&] { return layer_norm_rows(x3.permute({2, 0, 1}), 2); }, true) == 1);
    CHECK(compare([&] {
      Tensor mu = x3.mean({1, 2}, true);
      Tensor d = sub(x3, mu);
      return div(d, Tensor(mul(d, d).mean({1, 2}, true) + 1e-5).sqrt());
    }, true) == 1);
  }
}

// torch.argmax's answer by a loop: the first NaN of a line, else its first maximum.
std::vector<double> first_max_index(const std::vector<double>& v, int64_t rows, int64_t cols, int64_t dim) {
  const int64_t lines = dim == 1 ? rows : cols, len = dim == 1 ? cols : rows;
  std::vector<double> out;
  for (int64_t l = 0; l < lines; ++l) {
    int64_t best = 0;
    for (int64_t j = 0; j < len; ++j) {
      const double x = v[static_cast<size_t>(dim == 1 ? l * cols + j : j * cols + l)];
      const double b = v[static_cast<size_t>(dim == 1 ? l * cols + best : best * cols + l)];
      if (std::isnan(b)) break;
      if (std::isnan(x) || x > b) best = j;
    }
    out.push_back(static_cast<double>(best));
  }
  return out;
}

TEST_CASE("row programs: argmax is one launch with no fallback and picks the first maximum or the first NaN",
          "[jit]") {
  std::mt19937_64 g(5);
  std::uniform_int_distribution<int> small(-3, 3);  // few values: rows hold ties
  for (DType t : {DType::f32, DType::f64, DType::i64}) {
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {31, 10}, {256, 10}, {33, 257}}) {
      INFO(dtype_name(t) << " [" << rows << ", " << cols << "]");
      std::vector<double> v(static_cast<size_t>(rows * cols));
      for (auto& e : v) e = small(g);
      if (is_floating(t) && cols > 4)
        for (int64_t r = 2; r < rows; r += 3) v[static_cast<size_t>(r * cols + 4)] = std::nan("");
      Tensor x = make(v, {rows, cols}, t);
      const uint64_t fallbacks = cpu_jit_stats().fallbacks;
      for (int64_t dim : {1, 0}) {
        INFO("dim " << dim);
        CHECK(compare([&] { return x.argmax(dim); }, true) == 1);
        BackendOverride o(*cpu_jit_backend());
        Tensor got = x.argmax(dim);
        CHECK(got.dtype() == DType::i64);
        CHECK(vals(got) == first_max_index(vals(x), rows, cols, dim));
      }
      CHECK(cpu_jit_stats().fallbacks == fallbacks);
    }
  }
  BackendOverride o(*cpu_jit_backend());
  // Both passes compute a transcendental again from the input: each must get
  // the same bits, or no element equals the maximum.
  for (int64_t cols : {7, 64, 257, 1000}) {
    INFO("exp and sigmoid over rows of " << cols);
    Tensor z = rnd(g, {64, cols}, DType::f32);
    std::vector<double> ev, sv;  // materialized by the interpreter, which calls the same libm
    {
      BackendOverride r(ref_backend());
      ev = vals(Tensor(z * 0.37).exp());
      sv = vals(z.sigmoid());
    }
    CHECK(vals(Tensor(z * 0.37).exp().argmax(1)) == first_max_index(ev, 64, cols, 1));
    CHECK(vals(z.sigmoid().argmax(1)) == first_max_index(sv, 64, cols, 1));
  }
  Tensor x = make({1, 7, 7, 2, 7, 0}, {2, 3}, DType::f32);
  CHECK(x.argmax().item<int64_t>() == 1);  // the flattened tensor's first maximum
  CHECK(vals(x.argmax(1, true)) == std::vector<double>{1, 1});
  CHECK(x.argmax(1, true).shape() == Shape{2, 1});
}

TEST_CASE("row programs: a batch's accuracy is two kernels and no fallback", "[jit]") {
  std::mt19937_64 g(9);
  Tensor logits = rnd(g, {256, 10}, DType::f32);
  std::vector<int64_t> lab = cycling_labels(256, 3);
  Tensor labels = from_vector<int64_t>(lab, Shape{256});
  const uint64_t fallbacks = cpu_jit_stats().fallbacks;
  // The argmax row program, then the count of hits (the compare and cast are its prologue).
  CHECK(compare([&] { return binary_op(ir::Op::Eq, logits.argmax(1), labels).to(DType::f32).sum(); }, true) == 2);
  CHECK(cpu_jit_stats().fallbacks == fallbacks);
  auto predicted = first_max_index(vals(logits), 256, 10, 1);
  double hits = 0;
  for (size_t i = 0; i < lab.size(); ++i) hits += predicted[i] == static_cast<double>(lab[i]);
  BackendOverride o(*cpu_jit_backend());
  CHECK(binary_op(ir::Op::Eq, logits.argmax(1), labels).to(DType::f32).sum().item<double>() == hits);
}

TEST_CASE("row programs: cross_entropy's forward is two launches and its gradient holds", "[jit][autograd]") {
  std::mt19937_64 g(3);
  Tensor logits = rnd(g, {31, 10}, DType::f32);
  std::vector<int64_t> lab = cycling_labels(31, 7);
  Tensor labels = from_vector<int64_t>(lab, Shape{31});
  CHECK(compare([&] { return cross_entropy(logits, labels); }, true) == 2);  // rows, then the mean of their negation

  // d/dlogits of the mean loss: (softmax - onehot) / N, on both backends.
  auto grad = [&](Backend& b) {
    BackendOverride o(b);
    Tensor w = logits.detach().requires_grad_();
    Tensor loss = cross_entropy(w, labels);
    loss.backward();
    return vals(w.grad());
  };
  auto got = grad(*cpu_jit_backend());
  auto want = grad(ref_backend());
  require_close(got, want, 1e-6, 1e-7);
  check_cross_entropy_gradient(got, logits, lab, 0.0, 1.0 / 31);
}

TEST_CASE("row programs: cross_entropy's gradient is one row program over the logits under every option",
          "[jit][autograd]") {
  std::mt19937_64 g(4);
  Tensor logits = rnd(g, {31, 10}, DType::f32);
  for (bool ignoring : {false, true})
    for (const char* reduction : {"mean", "sum"})
      for (double smoothing : {0.0, 0.1}) {
        INFO("ignored rows " << ignoring << ", reduction " << reduction << ", label_smoothing " << smoothing);
        std::vector<int64_t> lab(31);
        for (size_t i = 0; i < lab.size(); ++i)
          lab[i] = ignoring && i % 5 == 2 ? -100 : static_cast<int64_t>((i * 3) % 10);
        Tensor labels = from_vector<int64_t>(lab, Shape{31});
        Tensor w = logits.detach().requires_grad_();
        Tensor loss = cross_entropy(w, labels, {.label_smoothing = smoothing, .reduction = reduction});
        // max, sum of exp, then keep * (softmax - target) times the incoming gradient.
        sched::Schedule s = gradient_schedule(loss, 1);
        INFO(s.to_string());
        CHECK(s.kernels() == 1);
        REQUIRE(row_step(s));
        CHECK(row_step(s)->stages.size() == 2);

        loss.backward();
        const double counted = ignoring ? 25 : 31;
        check_cross_entropy_gradient(vals(w.grad()), logits, lab, smoothing,
                                     std::string(reduction) == "mean" ? 1 / counted : 1);
      }
}

TEST_CASE("row programs: a loss gradient also read by a bias's column sum is still one row program",
          "[jit][autograd]") {
  // The bias gradient sums the logits' gradient over the batch (axis 0); the
  // row program sums over the classes (axis 1). Grouping the column sum first
  // must not leave its axes to the row program's walk.
  std::mt19937_64 g(11);
  Tensor h = rnd(g, {32, 20}, DType::f32);
  Tensor W = rnd(g, {10, 20}, DType::f32, 0.3).requires_grad_(), b = rnd(g, {10}, DType::f32, 0.3).requires_grad_();
  std::vector<int64_t> lab = cycling_labels(32, 7);
  Tensor labels = from_vector<int64_t>(lab, Shape{32});
  Tensor loss = cross_entropy(add(h.matmul(W.t()), b), labels);
  sched::Schedule s = gradient_schedule(loss, 2);
  INFO(s.to_string());
  REQUIRE(row_step(s));
  CHECK(row_step(s)->node->op == ir::Op::Mul);
  CHECK(row_step(s)->stages.size() == 2);
  int reduces = 0;
  for (const sched::Step& st : s.steps) reduces += st.kind == sched::StepKind::Reduce;
  CHECK(reduces == 1);  // the bias's column sum
}

TEST_CASE("row programs: softmax and layer norm gradients equal ref's", "[jit][autograd]") {
  std::mt19937_64 g(9);
  Tensor x0 = rnd(g, {17, 33}, DType::f64), w = rnd(g, {17, 33}, DType::f64);
  for (int which = 0; which < 2; ++which) {
    auto grad = [&](Backend& b) {
      BackendOverride o(b);
      Tensor x = x0.detach().requires_grad_();
      Tensor y = which == 0 ? softmax(x, 1) : layer_norm_rows(x, 1);
      Tensor(y * w).sum().backward();
      return vals(x.grad());
    };
    INFO((which == 0 ? "softmax" : "layer norm"));
    auto got = grad(*cpu_jit_backend()), want = grad(ref_backend());
    require_close(got, want, 1e-12, 1e-12);
    double total = 0;  // softmax's gradient sums to zero along each row; so does layer norm's
    for (size_t c = 0; c < 33; ++c) total += got[c];
    CHECK(std::fabs(total) < 1e-9);
  }
}

TEST_CASE("row programs: a stage that is also a result is stored by the kernel", "[jit]") {
  std::mt19937_64 g(5);
  Tensor x = rnd(g, {9, 40}, DType::f64);
  auto run = [&](Backend& b) {
    BackendOverride o(b);
    Tensor mu = x.mean({1}, true);
    Tensor y = Tensor(sub(x, mu) * 2.0);
    realize({mu, y});
    return std::make_pair(vals(mu), vals(y));
  };
  uint64_t before = cpu_jit_stats().kernels_launched;
  auto [mu, y] = run(*cpu_jit_backend());
  CHECK(cpu_jit_stats().kernels_launched - before == 1);
  auto [mu_ref, y_ref] = run(ref_backend());
  CHECK(mu == mu_ref);
  CHECK(y == y_ref);
}

TEST_CASE("row programs: random row pipelines vs ref", "[jit][property]") {
  uint64_t seed = test_seed("row program pipelines");
  std::mt19937_64 pick(seed);
  const int64_t sizes[] = {1, 2, 7, 31, 33, 64};
  for (int trial = 0; trial < 120; ++trial) {
    uint64_t tseed = pick();
    std::mt19937_64 g(tseed);
    DType t = g() % 2 ? DType::f32 : DType::f64;
    int64_t m = sizes[g() % 6], n = sizes[g() % 6];
    int64_t dim = static_cast<int64_t>(g() % 2);
    Tensor a = rnd(g, {m, n}, t), b = rnd(g, {n, m}, t).t(), c = rnd(g, {1, n}, t);
    int stages = 1 + static_cast<int>(g() % 3);
    std::vector<int> ops;
    for (int i = 0; i < stages + 1; ++i) ops.push_back(static_cast<int>(g() % 6));
    // x = f(a, b, c); each stage reduces an expression of x and the earlier
    // stages; the result mixes them all.
    auto build = [&] {
      Tensor x = Tensor(a * b + c).tanh() * 3.0;
      std::vector<Tensor> st;
      Tensor cur = x;
      for (int i = 0; i < stages; ++i) {
        Tensor body = st.empty() ? x : Tensor(x - st.back());
        Tensor r;
        switch (ops[static_cast<size_t>(i)]) {
          case 0: r = body.max(dim, true); break;
          case 1: r = body.min(dim, true); break;
          case 2: r = body.exp().sum({dim}, true); break;
          case 3: r = body.mean({dim}, true); break;
          case 4: r = mul(body, body).mean({dim}, true); break;
          default: r = body.abs().sum({dim}, true); break;
        }
        st.push_back(r);
      }
      Tensor out = x;
      for (size_t i = 0; i < st.size(); ++i) out = Tensor(out - st[i] * 0.5);
      if (ops.back() % 2) return out.exp().sum({dim}, true);  // the main part is a reduction too
      return out;
    };
    INFO("trial " << trial << " seed " << tseed << " " << dtype_name(t) << " [" << m << ", " << n << "] dim " << dim);
    CHECK(compare(build, true) == 1);
  }
}

TEST_CASE("row programs: var over rows is one launch, var std and logsumexp equal to ref", "[jit]") {
  std::mt19937_64 g(17);
  for (DType t : {DType::f32, DType::f64}) {
    Tensor x = rnd(g, {33, 257}, t);
    CHECK(compare([&] { return x.var({1}); }, false, 1e-5) == 1);
    CHECK(compare([&] { return x.std({-1}, 0, true); }, false, 1e-5) == 2);
    CHECK(compare([&] { return logsumexp(x, {1}); }, false, 1e-5) == 3);
  }
}

#endif
