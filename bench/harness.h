// Shared by the benchmark figures: timing, medians, and the results table.
// Only standard C++ here, so the LibTorch side and the tessel side (compiled
// as separate translation units) can both include it.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace bench {

inline double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// One contestant of a figure: a name ("tessel", "hand", "libtorch_eager") and
/// one call of the work being timed.
struct Contestant {
  std::string name;
  std::function<void()> call;
};

/// The figures' results: figure -> field -> value, written as JSON and a table.
struct Results {
  std::map<std::string, std::map<std::string, double>> numbers;
  std::map<std::string, std::map<std::string, std::string>> notes;  // e.g. "tessel_backend": "cpu"
  void set(const std::string& fig, const std::string& key, double v) { numbers[fig][key] = v; }
  void note(const std::string& fig, const std::string& key, const std::string& v) { notes[fig][key] = v; }
  /// Adds `<prefix>vs_<peer>` = numbers[fig][tessel_key] / numbers[fig][<peer>_ms] for each peer.
  void ratios(const std::string& fig, const std::string& tessel_key, const std::string& prefix,
              const std::vector<std::string>& peers);
};

}  // namespace bench
