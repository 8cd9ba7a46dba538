#include "runtime/trace.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include <fmt/format.h>

namespace tessel::detail {

bool trace_enabled(std::string_view topic) {
  static const std::string spec = [] {
    const char* v = std::getenv("TESSEL_TRACE");
    return std::string(v ? v : "");
  }();
  std::string_view rest = spec;
  while (!rest.empty()) {
    auto comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    if (item == topic || item == "all" || item == "1") return true;
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return false;
}

void trace_line(std::string_view topic, std::string_view message) {
  // One fwrite per line so lines from several threads do not interleave.
  std::string line = fmt::format("[tessel:{}] {}\n", topic, message);
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace tessel::detail
