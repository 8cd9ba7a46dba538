#include "codegen/cpu/dump.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <system_error>

namespace tessel::cpujit {

std::string dump_dir() {
  const char* e = std::getenv("TESSEL_DUMP");
  return e ? e : "";
}
// Read once: a cached realization must not scan the environment. (Paths that
// compile or schedule still read TESSEL_DUMP live, so setting it at run time
// dumps every kernel compiled from then on.)
bool dump_at_start() {
  static const bool on = !dump_dir().empty();
  return on;
}

void dump_file(const std::string& name, const std::string& text) {
  std::error_code ec;
  std::filesystem::create_directories(dump_dir(), ec);
  std::ofstream(std::filesystem::path(dump_dir()) / name) << text;
}

}  // namespace tessel::cpujit
