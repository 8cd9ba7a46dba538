// The backends this build links into a program. A program takes from the
// tessel archive only the members it refers to, and nothing refers to a
// backend's object but its own static registration (backend.h): the registry
// calls link_backends() on first use, which calls each backend's anchor (an
// empty function, TESSEL_BACKEND_ANCHOR), so every program that realizes
// anything links every backend, and their registrations run. A program that
// never realizes (one that only uses the thread pool, say) links none of
// them. A new backend adds its anchor here.
#include "codegen/backend.h"

extern "C" {
void tessel_backend_anchor_ref();
void tessel_backend_anchor_cpu();
void tessel_backend_anchor_cuda();
}

namespace tessel::detail {

void link_backends() {
  tessel_backend_anchor_ref();
  tessel_backend_anchor_cpu();
  tessel_backend_anchor_cuda();
}

}  // namespace tessel::detail
