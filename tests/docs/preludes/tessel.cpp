// What a README snippet that is not a whole program assumes: the includes and
// using-directive of the README's complete example.
#include "dsl/tessel.h"
#include "dsl/io.h"
using namespace tessel;
