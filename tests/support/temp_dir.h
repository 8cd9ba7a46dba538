// Scratch folders for tests, removed with everything in it when they go out
// of scope, so no test run leaves files behind in the temp folder.
//
//   tessel::testing::TempDir dir("tessel-io");    // /tmp/tessel-io-Ab12Cd
//   save(arange(4), dir.path / "x");
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

  explicit TempDir(const std::string& prefix = "tessel_jit_test") {
    std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "_XXXXXX")).string();
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

/// One folder for the whole process, made on first use and removed when the
/// process exits normally: for tests whose helpers hand out paths.
inline const std::filesystem::path& process_temp_dir(const std::string& prefix) {
  static const TempDir dir(prefix);
  return dir.path;
}

}  // namespace tessel::testing
