#include "runtime/errors.h"

#include <fmt/format.h>

namespace tessel {

void internal_failure(const char* pass, const char* cond, const char* file, int line) {
  throw InternalError(fmt::format("tessel internal error in pass '{}': {} failed ({}:{})", pass, cond,
                                  file, line));
}

std::string format_bytes(std::size_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return fmt::format("{} B", bytes);
  double v = static_cast<double>(bytes);
  int unit = 0;
  while (v >= 1024.0 && unit < 5) {
    v /= 1024.0;
    ++unit;
  }
  return v < 10.0 ? fmt::format("{:.2f} {}", v, kUnits[unit]) : fmt::format("{:.1f} {}", v, kUnits[unit]);
}

}  // namespace tessel
