// The "gloo" backend: collectives on CPU memory through Gloo's TCP transport,
// the library PyTorch's CPU backend uses. Gloo's own rendezvous runs over
// tessel's Store (TCP or file).
#pragma once

#include <memory>

#include "runtime/dist/process_group.h"
#include "runtime/dist/store.h"

namespace tessel::dist {

/// Connects `rank` of `size` through `store`; `host` is the address the other ranks reach
/// this one on (an interface name when `iface` is true). Throws DistError on timeout.
std::shared_ptr<ProcessGroup> make_gloo_process_group(std::shared_ptr<Store> store, int rank, int size,
                                                      std::chrono::milliseconds timeout, const std::string& host,
                                                      bool iface);

}  // namespace tessel::dist
