#include "runtime/errors.h"

#include <fmt/format.h>

namespace tessel {

void internal_failure(const char* pass, const char* cond, const char* file, int line) {
  throw InternalError(fmt::format("tessel internal error in pass '{}': {} failed ({}:{})", pass, cond,
                                  file, line));
}

}  // namespace tessel
