// tessel-ckpt: look inside safetensors checkpoints without loading a model.
//
//   tessel-ckpt ls model.safetensors        tensors, aliases, metadata
//   tessel-ckpt verify model.safetensors    exit 0 if valid, 1 with the broken rule
//   tessel-ckpt diff a.safetensors b.safetensors   max abs difference per tensor
//
// Exit codes: 0 fine (diff: no differences), 1 invalid file (diff:
// differences found), 2 diff could not read an input; CLI11's own codes
// for bad command lines.
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstring>
#include <iostream>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "runtime/errors.h"
#include "runtime/safetensors.h"

namespace st = tessel::safetensors;
using tessel::DType;

namespace {

constexpr std::string_view kAliasKey = "tessel.aliases";

std::string shape_str(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

// The alias map tessel records in the metadata (alias -> stored tensor).
// Raises CheckpointError (rule: aliases) when it is not a JSON object of
// names of stored tensors.
std::map<std::string, std::string> aliases(const st::File& f) {
  std::map<std::string, std::string> out;
  auto it = f.metadata().find(std::string(kAliasKey));
  if (it == f.metadata().end()) return out;
  auto bad = [&](std::string_view why) {
    throw tessel::CheckpointError(fmt::format("checkpoint '{}': metadata key '{}': {} (rule: aliases)", f.source(),
                                              kAliasKey, why));
  };
  nlohmann::json j = nlohmann::json::parse(it->second, nullptr, false);
  if (!j.is_object()) bad("not a JSON object");
  for (auto& [alias, target] : j.items()) {
    if (!target.is_string()) bad(fmt::format("alias '{}' does not map to a name", alias));
    if (!f.find(target.get<std::string>()))
      bad(fmt::format("alias '{}' names '{}', which is not stored", alias, target.get<std::string>()));
    if (f.find(alias)) bad(fmt::format("alias '{}' is also a stored tensor", alias));
    out.emplace(alias, target.get<std::string>());
  }
  return out;
}

uint64_t total_bytes(const st::File& f) {
  uint64_t n = 0;
  for (const auto& t : f.entries()) n += t.nbytes;
  return n;
}

int cmd_ls(const std::string& path) {
  st::File f = st::open(path);
  size_t w = 4;
  for (const auto& t : f.entries()) w = std::max(w, t.name.size());
  std::vector<std::string> shapes;
  size_t sw = 5;
  for (const auto& t : f.entries()) sw = std::max(sw, shapes.emplace_back(shape_str(t.shape)).size());
  fmt::print("{:<{}}  {:<5}  {:<{}}  {}\n", "name", w, "dtype", "shape", sw, "bytes");
  for (size_t i = 0; i < f.entries().size(); ++i) {
    const auto& t = f.entries()[i];
    fmt::print("{:<{}}  {:<5}  {:<{}}  {}\n", t.name, w, st::dtype_code(t.dtype), shapes[i], sw, t.nbytes);
  }
  fmt::print("{} tensors, {} bytes\n", f.entries().size(), total_bytes(f));
  auto al = aliases(f);
  if (!al.empty()) {
    fmt::print("aliases:\n");
    for (const auto& [a, t] : al) fmt::print("  {} -> {}\n", a, t);
  }
  bool header = false;
  for (const auto& [k, v] : f.metadata()) {
    if (k == kAliasKey) continue;
    if (!header) fmt::print("metadata:\n"), header = true;
    fmt::print("  {} = {}\n", k, v);
  }
  return 0;
}

int cmd_verify(const std::string& path) {
  st::File f = st::open(path);
  aliases(f);
  fmt::print("ok: {} tensors, {} bytes\n", f.entries().size(), total_bytes(f));
  return 0;
}

// Element i of a tensor as a double; loads go through memcpy because a
// header of any length may leave the data unaligned.
double element(const st::TensorView& t, size_t i) {
  const std::byte* p = t.data + i * tessel::dtype_size(t.dtype);
  auto load = [p]<class T>(T) {
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
  };
  switch (t.dtype) {
    case DType::f32: return load(float{});
    case DType::f64: return load(double{});
    case DType::i64: return static_cast<double>(load(int64_t{}));
    case DType::i32: return load(int32_t{});
    case DType::b8: return std::to_integer<int>(*p) != 0;
    case DType::f16: return tessel::f16_to_f32(load(uint16_t{}));
    case DType::bf16: return tessel::bf16_to_f32(load(uint16_t{}));
  }
  return 0;
}

// max |a - b| over elements; equal values (infinities included) and pairs of
// NaNs count as 0, a NaN against a number makes the result NaN. Two i64
// tensors are compared exactly before the result is rounded to double.
double max_abs_diff(const st::TensorView& a, const st::TensorView& b) {
  size_t n = a.nbytes / tessel::dtype_size(a.dtype);
  double best = 0;
  for (size_t i = 0; i < n; ++i) {
    double d;
    if (a.dtype == DType::i64 && b.dtype == DType::i64) {
      int64_t x, y;
      std::memcpy(&x, a.data + 8 * i, 8);
      std::memcpy(&y, b.data + 8 * i, 8);
      __int128 diff = static_cast<__int128>(x) - y;
      d = static_cast<double>(diff < 0 ? -diff : diff);
    } else {
      double x = element(a, i), y = element(b, i);
      d = (x == y || (std::isnan(x) && std::isnan(y))) ? 0 : std::fabs(x - y);
    }
    if (std::isnan(d)) return d;
    best = std::max(best, d);
  }
  return best;
}

int cmd_diff(const std::string& pa, const std::string& pb) {
  st::File a = st::open(pa), b = st::open(pb);
  std::set<std::string> names;
  for (const auto& t : a.entries()) names.insert(t.name);
  for (const auto& t : b.entries()) names.insert(t.name);
  // Counted apart: a tensor in one file only was not compared with anything.
  int differ = 0, both = 0, only_a = 0, only_b = 0;
  for (const std::string& name : names) {
    const st::TensorView *x = a.find(name), *y = b.find(name);
    std::string line;
    if (!y) {
      fmt::print("{}: only in A\n", name);
      ++only_a;
      continue;
    }
    if (!x) {
      fmt::print("{}: only in B\n", name);
      ++only_b;
      continue;
    }
    ++both;
    if (x->shape != y->shape) {
      line = fmt::format("shape differs: {} vs {}", shape_str(x->shape), shape_str(y->shape));
    } else {
      double d = max_abs_diff(*x, *y);
      if (x->dtype != y->dtype)
        line = fmt::format("dtype differs: {} vs {}, ", st::dtype_code(x->dtype), st::dtype_code(y->dtype));
      line += fmt::format("max abs diff {}", d);
      if (x->dtype == y->dtype && d == 0) {
        fmt::print("{}: {}\n", name, line);
        continue;
      }
    }
    ++differ;
    fmt::print("{}: {}\n", name, line);
  }
  const bool metadata = a.metadata() != b.metadata();
  if (metadata) fmt::print("metadata differs\n");
  fmt::print("{} tensors in both compared, {} differ; {} only in A, {} only in B; metadata {}\n", both, differ, only_a,
             only_b, metadata ? "differs" : "equal");
  return differ || only_a || only_b || metadata ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Inspect tessel checkpoints (safetensors files)", "tessel-ckpt"};
  app.require_subcommand(1);
  app.failure_message(CLI::FailureMessage::help);
  std::string file, file_b;
  auto* ls = app.add_subcommand("ls", "List tensors (name, dtype, shape, bytes), aliases and metadata");
  ls->add_option("FILE", file, "checkpoint file")->required();
  auto* verify = app.add_subcommand("verify", "Check every rule of the format; exit 1 naming the rule broken");
  verify->add_option("FILE", file, "checkpoint file")->required();
  auto* diff = app.add_subcommand("diff", "Compare two checkpoints tensor by tensor (max abs difference)");
  diff->add_option("A", file, "first checkpoint")->required();
  diff->add_option("B", file_b, "second checkpoint")->required();
  CLI11_PARSE(app, argc, argv);

  const int invalid = diff->parsed() ? 2 : 1;
  try {
    if (ls->parsed()) return cmd_ls(file);
    if (verify->parsed()) return cmd_verify(file);
    return cmd_diff(file, file_b);
  } catch (const tessel::Error& e) {
    fmt::print(stderr, "{}\n", e.what());
  } catch (const std::exception& e) {
    fmt::print(stderr, "tessel-ckpt: {}\n", e.what());
  }
  return invalid;
}
