// A fresh folder per test, removed with everything in it at scope exit.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

namespace tessel::testing {

struct TempDir {
  std::filesystem::path path;

  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "tessel_jit_test_XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  /// Regular files directly in the folder.
  std::vector<std::filesystem::path> files() const {
    std::vector<std::filesystem::path> out;
    for (const auto& e : std::filesystem::directory_iterator(path))
      if (e.is_regular_file()) out.push_back(e.path());
    return out;
  }
};

}  // namespace tessel::testing
