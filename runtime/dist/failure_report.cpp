#include "runtime/dist/failure_report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <vector>

#include "runtime/errors.h"

namespace tessel::dist {

void raise_collective_failure(Store& store, int rank, int size, uint64_t seq, std::string_view call,
                              const std::string& cause, std::chrono::steady_clock::time_point deadline) {
  std::vector<int> silent;
  std::string store_trouble;
  try {
    store.set(fmt::format("failed/{}/{}", seq, rank), {'1'});
    for (int r = 0; r < size; ++r) {
      if (r == rank) continue;
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (!store.try_get(fmt::format("failed/{}/{}", seq, r), std::max(left, std::chrono::milliseconds(0))))
        silent.push_back(r);
    }
  } catch (const DistError& e) {
    store_trouble = e.what();
  }
  std::string who;
  if (!store_trouble.empty())
    who = fmt::format("the rendezvous store is gone too ({}), so the process hosting it (rank 0, or tessel-run) has "
                      "likely died",
                      store_trouble);
  else if (silent.empty())
    who = "every rank saw it: the connection between them failed";
  else
    who = fmt::format("rank{} {} did not reach it or died (no word from {} within the timeout)",
                      silent.size() > 1 ? "s" : "", fmt::join(silent, ", "), silent.size() > 1 ? "them" : "it");
  throw DistError(fmt::format("{} (collective #{}) failed on rank {}: {}. The transport said: {}", call, seq, rank, who, cause));
}

}  // namespace tessel::dist
