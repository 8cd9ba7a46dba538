#include "runtime/perf_map.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace tessel::detail {

bool perf_map_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("TESSEL_PERF_MAP");
    return e && *e && std::string_view(e) != "0";
  }();
  return on;
}

void perf_map_add(std::uintptr_t start, std::size_t size, std::string_view name) {
  if (!perf_map_enabled() || size == 0) return;
  static const int fd = ::open(fmt::format("/tmp/perf-{}.map", ::getpid()).c_str(),
                               O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;  // profiling aid only: a missing map never fails a kernel
  std::string line = fmt::format("{:x} {:x} {}\n", start, size, name);
  [[maybe_unused]] ssize_t n = ::write(fd, line.data(), line.size());
}

}  // namespace tessel::detail
