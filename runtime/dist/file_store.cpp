#include "runtime/dist/file_store.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>
#include <unistd.h>

#include "runtime/errors.h"

namespace tessel::dist {

namespace fs = std::filesystem;

FileStore::FileStore(std::string folder) : folder_(std::move(folder)) {
  std::error_code ec;
  fs::create_directories(folder_, ec);
  if (ec || !fs::is_directory(folder_))
    throw DistError(fmt::format("file store: cannot create or open the folder '{}' ({}); give a folder every rank "
                                "can write (init_method file:///path)",
                                folder_, ec ? ec.message() : "not a folder"));
}

std::string FileStore::path_of(const std::string& key) const {
  // Keys hold '/', file names must not: hex keeps them distinct and portable.
  std::string name;
  for (unsigned char c : key) name += fmt::format("{:02x}", c);
  return folder_ + "/" + name;
}

void FileStore::set(const std::string& key, const std::vector<char>& value) {
  std::string path = path_of(key);
  std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(value.data(), static_cast<std::streamsize>(value.size()));
    if (!out) throw DistError(fmt::format("file store {}: cannot write key '{}'", describe(), key));
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) throw DistError(fmt::format("file store {}: cannot publish key '{}' ({})", describe(), key, ec.message()));
}

std::optional<std::vector<char>> FileStore::try_get(const std::string& key, std::chrono::milliseconds timeout) {
  std::string path = path_of(key);
  auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::microseconds(200);
  for (;;) {
    std::ifstream in(path, std::ios::binary);
    if (in) return std::vector<char>(std::istreambuf_iterator<char>(in), {});
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    // A file system has no wake-up call: poll, backing off to 10 ms.
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(10));
  }
}

std::vector<char> FileStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  if (auto v = try_get(key, timeout)) return *v;
  throw DistError(fmt::format("file store {}: key '{}' did not appear within {} ms; a rank that should have set it "
                              "has not started, has died or uses another folder",
                              describe(), key, timeout.count()));
}

}  // namespace tessel::dist
