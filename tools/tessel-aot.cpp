// tessel-aot: ahead-of-time kernels from the command line.
//
//   tessel-aot export --model mlp --batch 64 --out out/mlp [--backward] [--archs 80,90] [--no-cuda]
//   tessel-aot export --model mlp --out out/train --optimizer sgd:lr=0.1,momentum=0.9   # a training loop's kernels
//   tessel-aot generate ./my_generator --out out/net --name net   # runs a generator program
//   tessel-aot list out/mlp                                       # kernels of a manifest
//   tessel-aot verify out/mlp                                     # every file against its hash
//
// Built-in models: mlp (the chapter MLP, 20 -> 256 -> ReLU -> 10, symbolic
// parameters: exported from its type and the input shape, nothing runs),
// chain (an elementwise chain with broadcasting plus a softmax).
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdlib>

#include "dsl/aot.h"
#include "dsl/nn/symbolic.h"
#include "dsl/tessel.h"

using namespace tessel;

namespace {

std::vector<int> parse_archs(const std::string& s) {
  std::vector<int> out;
  std::stringstream ss(s);
  for (std::string t; std::getline(ss, t, ',');)
    if (!t.empty()) out.push_back(std::stoi(t));
  return out;
}

aot::Manifest export_zoo(const std::string& model, int64_t batch, const std::string& out, aot::ExportOptions o) {
  if (model == "mlp")
    return aot::export_symbolic(relu(param<"X"> % param<"W1"> + param<"b1">) % param<"W2"> + param<"b2">,
                                {.widths = {{"W1", 256}, {"W2", 10}}}, Shape{batch, 20}, out, o);
  if (model == "chain") {
    Tensor x = randn({batch, 96}), b = randn({96});
    x.eval();
    b.eval();
    auto chain = [](const Tensor& x, const Tensor& b) {
      Tensor u = x * b + 1.0;
      Tensor v = u.tanh() * x.sigmoid();
      Tensor t = v.exp() - b;
      Tensor d = x - x.max(1, true);
      Tensor e = d.exp();
      Tensor s = e / e.sum({1}, true);
      return std::vector<Tensor>{t, s};
    };
    return aot::export_kernels(chain, {x, b}, out, o);
  }
  throw ValueError(fmt::format("unknown model '{}'; built-in models: mlp, chain", model));
}

void print_manifest(const aot::Manifest& m) {
  fmt::print("export '{}' (tessel {}): {} kernels\n", m.name, m.tessel_version, m.kernels.size());
  if (!m.cpu_object.empty()) fmt::print("  cpu:  {} for {} ({})\n", m.cpu_object, m.cpu_target, m.cpu_compiler);
  if (!m.nvrtc_version.empty())
    fmt::print("  cuda: NVRTC {}, PTX for {}, CUBIN for {}\n", m.nvrtc_version, fmt::join(m.ptx_archs, ","),
               fmt::join(m.cubin_archs, ","));
  for (const auto& k : m.kernels) {
    std::vector<std::string> ps;
    for (auto& p : k.params) ps.push_back(p.output ? p.dtype + " out" : p.dtype);
    fmt::print("  {}  {:<11} {:<8} rank {} ({} reduced) args {}  [{}]\n", k.key, k.role, k.node, k.rank, k.reduce_rank,
               k.num_args, fmt::join(ps, ", "));
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tessel-aot: export, list and verify ahead-of-time kernels"};
  app.require_subcommand(1);

  std::string model = "mlp", out, name, archs = "80,90", cubin_archs = "90", cpu = "host", optimizer;
  int64_t batch = 64;
  bool backward = false, no_cuda = false;
  auto* ex = app.add_subcommand("export", "export the kernels of a built-in model");
  ex->add_option("--model", model, "mlp or chain")->capture_default_str();
  ex->add_option("--batch", batch, "rows of the example input")->capture_default_str();
  ex->add_option("--out", out, "export folder")->required();
  ex->add_option("--name", name, "export name (C identifier; default: the model)");
  ex->add_option("--archs", archs, "PTX archs")->capture_default_str();
  ex->add_option("--cubin-archs", cubin_archs, "CUBIN archs")->capture_default_str();
  ex->add_option("--cpu", cpu, "host, or an LLVM CPU name such as x86-64-v3")->capture_default_str();
  ex->add_flag("--backward", backward, "also export the backward kernels");
  ex->add_option("--optimizer", optimizer,
                 "also export an optimizer's steps (implies --backward): sgd, sgd:lr=0.1,momentum=0.9, adam, "
                 "adamw:weight_decay=0.01");
  ex->add_flag("--no-cuda", no_cuda, "CPU kernels only");

  std::vector<std::string> gen;
  auto* gn = app.add_subcommand("generate", "run a generator program (see dsl/aot.h parse_generator_args)");
  gn->add_option("command", gen, "generator and its arguments")->required();
  gn->allow_extras();

  std::string dir;
  auto* ls = app.add_subcommand("list", "print a manifest's kernels");
  ls->add_option("dir", dir, "export folder")->required();
  auto* vf = app.add_subcommand("verify", "check every file of an export against the manifest");
  vf->add_option("dir", dir, "export folder")->required();

  CLI11_PARSE(app, argc, argv);
  try {
    if (*ex) {
      aot::ExportOptions o;
      o.name = name.empty() ? model : name;
      o.backward = backward || !optimizer.empty();
      if (!optimizer.empty()) o.optimizer = aot::parse_optimizer(optimizer);
      o.cuda = !no_cuda;
      o.cpu_target = cpu;
      o.ptx_archs = parse_archs(archs);
      o.cubin_archs = parse_archs(cubin_archs);
      print_manifest(export_zoo(model, batch, out, o));
    } else if (*gn) {
      std::string cmd;
      for (auto& a : gen) cmd += "'" + a + "' ";
      for (auto& a : gn->remaining()) cmd += "'" + a + "' ";
      int rc = std::system(cmd.c_str());
      if (rc != 0) {
        fmt::print(stderr, "tessel-aot: generator failed ({})\n", rc);
        return 1;
      }
    } else if (*ls) {
      print_manifest(aot::parse_manifest(std::filesystem::path(dir) / "manifest.json"));
    } else if (*vf) {
      aot::Manifest m = aot::read_manifest(dir);
      fmt::print("{}: OK ({} kernels, {} files match their hashes)\n", dir, m.kernels.size(), m.files.size());
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "tessel-aot: {}\n", e.what());
    return 1;
  }
  return 0;
}
