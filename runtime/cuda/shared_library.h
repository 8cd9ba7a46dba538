// Opening a CUDA library at run time (cuBLASLt, cuDNN): the one place that
// tries the candidates in order, honours the override variable and words
// the error that says what was tried and how to fix it.
//
//   SharedLibrary l = open_shared_library({"cuDNN", "TESSEL_CUDNN", "libcudnn.so.9"}, {"libcudnn.so.9"});
//   std::string missing;
//   bind_symbol(l.handle, api.Create, "cudnnCreate", missing);
#pragma once

#include <dlfcn.h>

#include <string>
#include <vector>

namespace tessel::cuda {

struct LibrarySpec {
  const char* name;      // "cuDNN", in messages
  const char* env;       // "TESSEL_CUDNN": when set, the only path tried
  const char* filename;  // "libcudnn.so.9": what the user is told to point at
};

struct SharedLibrary {
  void* handle = nullptr;   // null when none loaded
  std::string path;         // as given to dlopen
  std::string override;     // "TESSEL_CUDNN=..." when the variable chose it
  std::string error;        // why none loaded ("" when one did)
};

/// The first of `defaults` that dlopen accepts, or only $env when it is set.
SharedLibrary open_shared_library(const LibrarySpec& spec, std::vector<std::string> defaults);

/// fn = the symbol, or its name appended to `missing` (comma-separated).
template <class F> void bind_symbol(void* handle, F& fn, const char* symbol, std::string& missing) {
  fn = reinterpret_cast<F>(dlsym(handle, symbol));
  if (!fn) missing += missing.empty() ? symbol : std::string(", ") + symbol;
}

}  // namespace tessel::cuda
