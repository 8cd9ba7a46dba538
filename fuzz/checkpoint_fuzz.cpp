// libFuzzer target for the checkpoint loader: any input must either parse
// into views that stay inside the input, or raise CheckpointError. Anything
// else (a crash, a sanitizer report, another exception) is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "runtime/errors.h"
#include "runtime/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    auto file = tessel::safetensors::parse(bytes, "fuzz");
    // Touch every byte the views claim, so ASan sees any view past the input.
    unsigned sum = 0;
    for (const auto& t : file.entries()) {
      for (size_t i = 0; i < t.nbytes; ++i) sum += std::to_integer<unsigned>(t.data[i]);
      if (t.nbytes && (t.data < bytes.data() || t.data + t.nbytes > bytes.data() + bytes.size())) std::abort();
      if (file.find(t.name) != &t) std::abort();
    }
    volatile unsigned sink = sum;
    (void)sink;
  } catch (const tessel::CheckpointError&) {
  }
  return 0;
}
