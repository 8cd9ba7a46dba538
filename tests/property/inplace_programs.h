// Random programs of statements over a few variables: new lazy values,
// in-place updates (+= -= *= /=, fill_, copy_), writes through element and
// reshaped views, handle aliases, and reads at random points. Laziness must
// never change a result: every variable ends equal to an eager run. Shared by
// the CPU programs (inplace_property_test.cpp) and the GPU ones.
#pragma once

#include <memory>
#include <optional>

#include "tree_gen.h"

namespace proptest {

namespace inplace_detail {

struct Var {
  Tensor t;
  std::shared_ptr<naive::Value> n;  // shared by handle aliases, as the tensor is
};

inline double elem_bound(const naive::Value& v) { return max_abs(v); }

}  // namespace inplace_detail

inline void run_programs(const char* name, int programs, bool on_default_backend, tessel::Device device = tessel::cpu()) {
  using namespace tessel;
  using inplace_detail::Var;
  using inplace_detail::elem_bound;
  uint64_t seed = tessel::testing::test_seed(name);
  INFO("seed " << seed << " (TESSEL_TEST_SEED=" << seed << " replays)");
  std::optional<BackendOverride> ref;
  if (!on_default_backend) ref.emplace(ref_backend());
  INFO("backend " << cpu_backend().name());
  TreeGen g(seed ^ 0x5555, Mode::f64);
  g.device = device;
  INFO("device " << device.str());
  for (int prog = 0; prog < programs; ++prog) {
    INFO("program " << prog);
    Dims shape = g.random_shape(3, 4);
    if (shape.empty()) shape = {3};
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    std::vector<Var> vars;
    for (int i = 0; i < 3; ++i) {
      Pair p = g.leaf(shape);
      vars.push_back({p.t.contiguous(), std::make_shared<naive::Value>(p.n)});
    }
    std::string log;
    for (int step = 0; step < 14; ++step) {
      size_t i = static_cast<size_t>(g.uni(0, static_cast<int64_t>(vars.size()) - 1));
      Var& v = vars[i];
      int kind = static_cast<int>(g.uni(0, 9));
      log += "v" + std::to_string(i) + ":";
      // Operands are small trees over the variables' current values and fresh leaves.
      auto operand = [&](bool) {
        Pair e = g.gen(shape, 2);  // broadcasts to the variable's shape
        if (g.coin(0.6)) {
          size_t wi = static_cast<size_t>(g.uni(0, static_cast<int64_t>(vars.size()) - 1));
          const Var& w = vars[wi];
          log += "(reads v" + std::to_string(wi) + ")";
          e.t = e.t + w.t;
          e.n = naive::zip(e.n, *w.n, [](double x, double y) { return x + y; });
          e.desc = "(" + e.desc + " + var)";
        }
        log += "{" + e.desc + "}";
        return e;
      };
      switch (kind) {
        case 0: {  // a new variable computed from the others (pending)
          Pair e = operand(false);
          Tensor t = e.t;
          naive::Value n = e.n;
          if (n.shape != shape) {
            t = t.expand(shape) * 1;
            n = naive::expand(n, shape);
          }
          // A pure view of an expand would share memory between elements, and
          // writes into it are refused; take a copy of those.
          if (e.desc.find("expand") != std::string::npos) t = t.contiguous();
          vars.push_back({t, std::make_shared<naive::Value>(n)});
          log += "new;";
          break;
        }
        case 1: {
          Pair e = operand(true);
          v.t += e.t;
          *v.n = naive::zip(*v.n, e.n, [](double x, double y) { return x + y; });
          log += "+=;";
          break;
        }
        case 2: {
          Pair e = operand(true);
          if (elem_bound(*v.n) * elem_bound(e.n) > 1e30) break;
          v.t *= e.t;
          *v.n = naive::zip(*v.n, e.n, [](double x, double y) { return x * y; });
          log += "*=;";
          break;
        }
        case 3: {
          Pair e = operand(true);
          v.t /= e.t.abs() + 1;
          *v.n = naive::zip(*v.n, e.n, [](double x, double y) { return x / (std::fabs(y) + 1); });
          log += "/=;";
          break;
        }
        case 4: {  // a scalar in place
          double c = static_cast<double>(g.uni(-8, 8)) / 4;
          v.t -= c;
          for (auto& x : v.n->v) x -= c;
          log += "-=c;";
          break;
        }
        case 5: {  // one element through operator[] views
          int64_t flat = g.uni(0, numel - 1);
          Dims idx = naive::unravel(flat, shape);
          double c = static_cast<double>(g.uni(-20, 20));
          Tensor target = v.t;
          for (size_t d = 0; d + 1 < idx.size(); ++d) target = target[idx[d]];
          target[idx.back()] = c;
          v.n->v[static_cast<size_t>(flat)] = c;
          log += "[]=;";
          break;
        }
        case 6: {  // one element through a flattened (reshaped) view
          int64_t flat = g.uni(0, numel - 1);
          double c = static_cast<double>(g.uni(-20, 20));
          // reshape is a view of contiguous memory and a copy otherwise (as in
          // PyTorch), so the write reaches the variable only in the first case.
          bool is_view = true;
          try {
            (void)v.t.view({-1});
          } catch (const ShapeError&) {
            is_view = false;
          }
          v.t.reshape({-1})[flat] = c;
          if (is_view) v.n->v[static_cast<size_t>(flat)] = c;
          log += is_view ? "flat[]=;" : "copy[]=;";
          break;
        }
        case 7: {  // fill_ or copy_ from another variable
          if (g.coin()) {
            double c = static_cast<double>(g.uni(-4, 4));
            v.t.fill_(c);
            for (auto& x : v.n->v) x = c;
            log += "fill;";
          } else {
            size_t wi = static_cast<size_t>(g.uni(0, static_cast<int64_t>(vars.size()) - 1));
            const Var& w = vars[wi];
            log += "(from v" + std::to_string(wi) + ")";
            v.t.copy_(w.t * 2);
            naive::Value n = *w.n;
            for (auto& x : n.v) x *= 2;
            *v.n = n;
            log += "copy;";
          }
          break;
        }
        case 8: {  // a handle alias: the same tensor under another name
          vars.push_back({v.t, v.n});
          log += "alias;";
          break;
        }
        default: {  // read now, which realizes at this point
          INFO("log: " << log);
          std::vector<double> got = v.t.to_vector<double>();
          tessel::testing::require_close(got, v.n->v, 1e-9, 1e-9);
          log += "read;";
          break;
        }
      }
      if (vars.size() > 8) vars.erase(vars.begin());
    }
    INFO("log: " << log);
    for (size_t i = 0; i < vars.size(); ++i) {
      INFO("variable " << i);
      REQUIRE(vars[i].t.shape().dims == shape);
      tessel::testing::require_close(vars[i].t.to_vector<double>(), vars[i].n->v, 1e-9, 1e-9);
    }
  }
}

}  // namespace proptest

