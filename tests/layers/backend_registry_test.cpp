// Backends register themselves (codegen/backend.h). This program names none
// of them -- it includes only backend.h and the DSL -- so it checks that
// linking tessel brings in every backend built, registration included.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include "codegen/backend.h"
#include "dsl/tessel.h"
#include "runtime/errors.h"
#include "tessel/config.h"

using namespace tessel;

TEST_CASE("every backend built is registered in a program that names none", "[unit]") {
  const char* e = std::getenv("TESSEL_BACKEND");
  const bool ref_forced = e && std::string(e) == "ref";
  CHECK(cpu_backend().name() == (TESSEL_HAS_LLVM && !ref_forced ? "cpu" : "ref"));
  CHECK(backend_for(cpu()).name() == cpu_backend().name());
  CHECK((ones({3}) + 1).sum().item() == 6.0);
  // The CUDA backend is in every build; without a GPU it reports the device absent.
  if (num_gpus() == 0) CHECK_THROWS_AS(backend_for(gpu(0)), DeviceError);
  else CHECK(backend_for(gpu(0)).name() == "cuda:0");
}

TEST_CASE("BackendOverride wins over the registered choice", "[unit]") {
  BackendOverride o(ref_backend());
  CHECK(cpu_backend().name() == "ref");
  CHECK(backend_for(cpu()).name() == "ref");
}
