// Performance experiment: what fusion buys, by size. Runs each workload with
// fusion on and with TESSEL_FUSION=off (one kernel per node), over sizes from
// 1K to 16M elements, and writes perf_experiments.csv plus a gnuplot PNG.
//
//   build/samples/perf_experiments [out_dir]
//
// The "off" half runs in a child process (the switch is read once per process).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <tuple>
#include <vector>

#include "dsl/functional.h"
#include "dsl/tessel.h"

using namespace tessel;

namespace {

double median_ms(const std::function<void()>& f, int reps) {
  f();  // compile and warm up
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Prints "workload,elements,ms" rows for the current process's fusion mode.
void run_child() {
  manual_seed(0);
  for (int64_t n : {int64_t{1} << 10, int64_t{1} << 14, int64_t{1} << 18, int64_t{1} << 22, int64_t{1} << 24}) {
    int reps = n >= (int64_t{1} << 22) ? 5 : 21;
    Tensor a = rand({n}), b = rand({n}), c = rand({n}), d = rand({n});
    double chain = median_ms([&] { Tensor y = relu(a * b + c) * d; y.eval(); }, reps);
    std::printf("chain relu(a*b+c)*d,%lld,%.6f\n", static_cast<long long>(n), chain);
    int64_t rows = std::max<int64_t>(1, n / 1024);
    Tensor x = randn({rows, 1024});
    double sm = median_ms([&] { Tensor y = softmax(x, 1); y.eval(); }, reps);
    std::printf("softmax rows x 1024,%lld,%.6f\n", static_cast<long long>(rows * 1024), sm);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--child") {
    run_child();
    return 0;
  }
  std::filesystem::path out = argc > 1 ? argv[1] : ".";
  std::filesystem::create_directories(out);
  std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  std::vector<std::string> rows;
  for (const char* mode : {"on", "off"}) {
    std::string cmd = std::string("TESSEL_FUSION=") + mode + " '" + self + "' --child";
    std::FILE* p = popen(cmd.c_str(), "r");
    if (!p) return 1;
    char line[256];
    while (std::fgets(line, sizeof line, p)) {
      std::string l(line);
      if (!l.empty() && l.back() == '\n') l.pop_back();
      rows.push_back(std::string(mode) + "," + l);
      std::printf("fusion %-3s %s\n", mode, l.c_str());
      std::fflush(stdout);
    }
    if (pclose(p) != 0) {
      std::fprintf(stderr, "perf_experiments: the child run with fusion %s failed\n", mode);
      return 1;
    }
  }
  // One series after another (fusion, workload, size), so gnuplot draws each as one line.
  auto key = [](const std::string& r) {
    size_t a = r.find(','), b = r.find(',', a + 1), c = r.find(',', b + 1);
    return std::make_tuple(r.substr(0, a), r.substr(a + 1, b - a - 1), std::stoll(r.substr(b + 1, c - b - 1)));
  };
  std::stable_sort(rows.begin(), rows.end(), [&](const std::string& x, const std::string& y) { return key(x) < key(y); });
  std::filesystem::path csv = out / "perf_experiments.csv";
  std::FILE* f = std::fopen(csv.c_str(), "w");
  std::fprintf(f, "fusion,workload,elements,ms\n");
  for (auto& r : rows) std::fprintf(f, "%s\n", r.c_str());
  std::fclose(f);
  std::printf("wrote %s\n", csv.c_str());
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    std::printf("note: gnuplot not installed, no plot (scripts/setup-deps.sh installs it)\n");
    return 0;
  }
  std::filesystem::path png = out / "perf_experiments.png";
  std::filesystem::path gp = out / "perf_experiments.gp";
  std::FILE* g = std::fopen(gp.c_str(), "w");
  std::fprintf(g,
               "set terminal png size 900,500\nset output '%s'\nset datafile separator ','\n"
               "set logscale xy\nset xlabel 'elements'\nset ylabel 'ns per element'\nset key top right\nset grid\n"
               "f(m, w) = (strcol(1) eq m && strcol(2) eq w) ? $4 * 1e6 / $3 : 1/0\n"
               "plot '%s' using 3:(f('on', 'chain relu(a*b+c)*d')) with linespoints title 'chain, fused', \\\n"
               "  '' using 3:(f('off', 'chain relu(a*b+c)*d')) with linespoints title 'chain, unfused', \\\n"
               "  '' using 3:(f('on', 'softmax rows x 1024')) with linespoints title 'softmax, fused', \\\n"
               "  '' using 3:(f('off', 'softmax rows x 1024')) with linespoints title 'softmax, unfused'\n",
               png.c_str(), csv.c_str());
  std::fclose(g);
  std::string cmd = "gnuplot '" + gp.string() + "'";
  if (std::system(cmd.c_str()) == 0) std::printf("wrote %s\n", png.c_str());
  return 0;
}
