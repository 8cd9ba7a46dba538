// When a collective fails (a peer's connection dropped, or nothing arrived
// within the timeout) the transport's message names an address, not a rank.
// Every rank that sees a failure leaves word on the store; the ranks that
// leave none by the deadline are the ones that died or hang, and the error
// names them.
#pragma once

#include <chrono>
#include <string>

#include "runtime/dist/store.h"

namespace tessel::dist {

/// Throws the DistError for collective `seq` (`call`, e.g. "all_reduce") that failed on
/// `rank` with `cause`, after waiting until `deadline` for the other ranks' word.
[[noreturn]] void raise_collective_failure(Store& store, int rank, int size, uint64_t seq, std::string_view call,
                                           const std::string& cause, std::chrono::steady_clock::time_point deadline);

}  // namespace tessel::dist
