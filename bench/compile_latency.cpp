// compile_latency: run_benchmarks' compile_latency figure on its own, with
// no LibTorch or Google Benchmark, and where the time goes by phase.
//
//   build-bench/bench/compile_latency             # 5 rounds
//   build-bench/bench/compile_latency --rounds=9
//
// Each round is two fresh processes on a fresh TESSEL_CACHE_DIR: the first
// compiles the 12 trees of bench/compile_pass.h (per new kernel: cold
// realization minus a warm one; the first kernel of the process, which also
// starts the JIT, is reported apart), the second loads the same kernels from
// the disk cache. Reported: the median over rounds of each round's median,
// the range over rounds, and the median over every kernel of every round.
#include <fmt/format.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "bench/compile_pass.h"
#include "runtime/thread_pool.h"

namespace {

std::string list(const std::vector<double>& v) {
  std::string s;
  for (double x : v) s += fmt::format("{}{:.4f}", s.empty() ? "" : ",", x);
  return s.empty() ? "-" : s;
}

std::vector<double> parse_list(const std::string& s) {
  std::vector<double> v;
  if (s == "-") return v;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, ',');) v.push_back(std::stod(x));
  return v;
}

// One child: the compile pass, printed as "key=v1,v2,..." words on one line.
int child() {
  bench::CompileRun run = bench::compile_pass();
  std::printf(
      "compile_child per_kernel=%s per_kernel_cpu=%s llvm=%s emit=%s target_machine=%s optimize=%s codegen=%s link=%s "
      "startup=%.4f compiled=%llu from_disk=%llu\n",
      list(run.per_kernel_ms).c_str(), list(run.per_kernel_cpu_ms).c_str(), list(run.llvm_ms).c_str(), list(run.emit_ms).c_str(),
      list(run.target_machine_ms).c_str(), list(run.optimize_ms).c_str(), list(run.codegen_ms).c_str(),
      list(run.link_ms).c_str(), run.startup_ms, static_cast<unsigned long long>(run.compiled),
      static_cast<unsigned long long>(run.from_disk));
  return 0;
}

std::map<std::string, std::string> run_child(const std::string& exe, const std::string& cache_dir) {
  std::string cmd = fmt::format("TESSEL_CACHE_DIR='{}' '{}' --child", cache_dir, exe);
  FILE* p = popen(cmd.c_str(), "r");
  std::map<std::string, std::string> kv;
  if (!p) return kv;
  char buf[1 << 14];
  while (std::fgets(buf, sizeof buf, p)) {
    if (std::strncmp(buf, "compile_child ", 14) != 0) continue;
    std::stringstream ss(buf + 14);
    for (std::string w; ss >> w;)
      if (auto eq = w.find('='); eq != std::string::npos) kv[w.substr(0, eq)] = w.substr(eq + 1);
  }
  pclose(p);
  return kv;
}

std::string loadavg() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

}  // namespace

int main(int argc, char** argv) {
  tessel::set_num_threads(1);  // as in run_benchmarks
  if (!tessel::cpu_jit_backend()) {
    std::fprintf(stderr, "compile_latency: built without LLVM, there is no compiled backend to measure\n");
    return 1;
  }
  int rounds = 5;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--child") return child();
    if (a.rfind("--rounds=", 0) == 0) {
      rounds = std::atoi(a.c_str() + 9);
      if (rounds < 1) {
        std::fprintf(stderr, "compile_latency: --rounds needs a whole number >= 1, got '%s'\n", a.c_str() + 9);
        return 2;
      }
    } else {
      std::fprintf(stderr, "usage: compile_latency [--rounds=N]   (unknown argument '%s')\n", a.c_str());
      return 2;
    }
  }
  const std::string exe = std::filesystem::read_symlink("/proc/self/exe").string();
  fmt::print("compile_latency: {} rounds, load average at start {}\n", rounds, loadavg());
  std::fflush(stdout);

  const std::vector<std::string> phases = {"emit", "target_machine", "optimize", "codegen", "link"};
  std::vector<double> round_median, round_cpu, round_llvm, round_hit, startups, all_kernels;
  std::map<std::string, std::vector<double>> all_phase;
  unsigned long long compiled = 0, hits = 0, recompiled = 0;
  for (int r = 0; r < rounds; ++r) {
    char tmpl[] = "/tmp/tessel-compile-latency-XXXXXX";
    if (!mkdtemp(tmpl)) return 1;
    auto cold = run_child(exe, tmpl);
    auto warm = run_child(exe, tmpl);  // the same kernels, now all on disk
    std::filesystem::remove_all(tmpl);
    if (cold.empty() || warm.empty()) {
      std::fprintf(stderr, "compile_latency: a child process failed (round %d)\n", r + 1);
      return 1;
    }
    auto per_kernel = parse_list(cold["per_kernel"]);
    auto hit = parse_list(warm["per_kernel"]);
    round_median.push_back(bench::median(per_kernel));
    round_cpu.push_back(bench::median(parse_list(cold["per_kernel_cpu"])));
    round_llvm.push_back(bench::median(parse_list(cold["llvm"])));
    round_hit.push_back(bench::median(hit));
    startups.push_back(std::stod(cold["startup"]));
    all_kernels.insert(all_kernels.end(), per_kernel.begin(), per_kernel.end());
    for (auto& ph : phases) {
      auto v = parse_list(cold[ph]);
      all_phase[ph].insert(all_phase[ph].end(), v.begin(), v.end());
    }
    compiled += std::stoull(cold["compiled"]);
    hits += std::stoull(warm["from_disk"]);
    recompiled += std::stoull(warm["compiled"]);
    fmt::print("round {}: median {:.2f} ms per kernel (CPU {:.2f} ms; {} kernels, LLVM {:.2f} ms), disk hit {:.3f} ms, "
               "JIT start-up {:.1f} ms\n",
               r + 1, round_median.back(), round_cpu.back(), cold["compiled"], round_llvm.back(), round_hit.back(),
               startups.back());
    std::fflush(stdout);
  }
  auto range = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return fmt::format("{:.2f}-{:.2f}", v.front(), v.back());
  };
  fmt::print("\ncompile, per new kernel:   median {:.2f} ms (rounds {}; all {} trees of all rounds pooled: {:.2f} ms)\n",
             bench::median(round_median), range(round_median), all_kernels.size(), bench::median(all_kernels));
  fmt::print("  in CPU time:              median {:.2f} ms (rounds {})\n", bench::median(round_cpu), range(round_cpu));
  fmt::print("  LLVM's own time:          median {:.2f} ms (rounds {})\n", bench::median(round_llvm),
             range(round_llvm));
  fmt::print("  by phase, median per compiled kernel over all rounds:");
  for (auto& ph : phases) fmt::print(" {} {:.2f},", ph, bench::median(all_phase[ph]));
  fmt::print(" ms\n");
  fmt::print("disk-cache hit:             median {:.3f} ms (rounds {}), {} loaded, {} recompiled\n",
             bench::median(round_hit), range(round_hit), hits, recompiled);
  fmt::print("JIT start-up (first kernel): median {:.1f} ms\n", bench::median(startups));
  fmt::print("{} kernels compiled in all; load average at end {}\n", compiled, loadavg());
  return recompiled == 0 ? 0 : 1;
}
