// TESSEL_PERF_MAP=1 (set for this test by its CMake entry): a compiled kernel
// is named in /tmp/perf-<pid>.map, the file `perf report` reads to put names
// on generated code.
#include "tests/support/tensor_testing.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <regex>
#include <string>

#include "runtime/perf_map.h"

using namespace tessel;

TEST_CASE("TESSEL_PERF_MAP names each compiled kernel in /tmp/perf-<pid>.map", "[.perf_map]") {
  REQUIRE(detail::perf_map_enabled());
  const std::string path = "/tmp/perf-" + std::to_string(::getpid()) + ".map";
  Tensor x = arange(100, DType::f64);
  Tensor y = (x * 0.8125 + 3.5).sqrt();
  y.eval();
  std::ifstream in(path);
  REQUIRE(in.good());
  const std::regex line(R"(([0-9a-f]+) ([0-9a-f]+) tessel_k_[0-9a-f]{32})");
  int named = 0;
  for (std::string l; std::getline(in, l);) {
    std::smatch m;
    if (!std::regex_match(l, m, line)) continue;
    CHECK(std::stoull(m[1].str(), nullptr, 16) != 0);
    CHECK(std::stoull(m[2].str(), nullptr, 16) > 0);
    ++named;
  }
  CHECK(named >= 1);
  std::remove(path.c_str());
}
