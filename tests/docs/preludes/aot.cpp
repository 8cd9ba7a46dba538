// What the README's ahead-of-time snippet assumes: the export API (dsl/aot.h,
// which the README names) next to the DSL.
#include "dsl/tessel.h"
#include "dsl/aot.h"
using namespace tessel;
