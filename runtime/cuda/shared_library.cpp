#include "runtime/cuda/shared_library.h"

#include <fmt/format.h>

#include <cstdlib>

namespace tessel::cuda {

SharedLibrary open_shared_library(const LibrarySpec& spec, std::vector<std::string> defaults) {
  SharedLibrary l;
  if (const char* e = std::getenv(spec.env); e && *e) {
    l.override = fmt::format("{}={}", spec.env, e);
    defaults = {e};
  }
  std::string tried;
  for (const std::string& path : defaults) {
    l.handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (l.handle) {
      l.path = path;
      return l;
    }
    const char* why = dlerror();
    tried += (tried.empty() ? "" : "; ") + (why ? std::string(why) : fmt::format("{}: cannot be loaded", path));
  }
  l.error = l.override.empty()
                ? fmt::format("{} could not be loaded (tried {}); set {} to the path of {}", spec.name, tried, spec.env,
                              spec.filename)
                : fmt::format("{} could not be loaded from {} ({}); unset {} or point it at {}", spec.name, l.override,
                              tried, spec.env, spec.filename);
  return l;
}

}  // namespace tessel::cuda
