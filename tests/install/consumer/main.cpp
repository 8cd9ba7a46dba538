#include "dsl/tessel.h"
using namespace tessel;
int main() {
  nn::Sequential net(nn::LazyLinear(4), nn::ReLU(), nn::LazyLinear(2));
  fmt::print("{}\n", net(rand({3, 5})).shape());
}
