// FileStore: rendezvous through a folder every rank can see (a local temp dir,
// or a shared file system across machines). Each key is one file, published
// by an atomic rename, so a reader never sees half a value.
//
//   dist::init_process_group({.backend = "gloo", .init_method = "file:///tmp/run-42"});
#pragma once

#include <memory>

#include "runtime/dist/store.h"

namespace tessel::dist {

class FileStore : public Store {
 public:
  /// Creates `folder` if needed.
  explicit FileStore(std::string folder);
  void set(const std::string& key, const std::vector<char>& value) override;
  std::vector<char> get(const std::string& key, std::chrono::milliseconds timeout) override;
  std::optional<std::vector<char>> try_get(const std::string& key, std::chrono::milliseconds timeout) override;
  std::string describe() const override { return "file://" + folder_; }

 private:
  std::string path_of(const std::string& key) const;
  std::string folder_;
};

}  // namespace tessel::dist
