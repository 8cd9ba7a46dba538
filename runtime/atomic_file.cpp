#include "runtime/atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <random>
#include <string>
#include <system_error>

#include <fmt/format.h>

#include "runtime/errors.h"

namespace tessel {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void fail(const fs::path& target, std::string_view what, const fs::path& path, int err) {
  throw CheckpointError(fmt::format("cannot save '{}': {} '{}': {}", target.string(), what,
                                    path.string(), std::generic_category().message(err)));
}

// A name no other writer (thread, process, earlier crashed save) will pick:
// pid + per-process counter + random bits, plus O_EXCL as the final guard.
fs::path temp_name(const fs::path& target) {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t salt = [] {
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }();
  uint64_t n = counter.fetch_add(1) ^ (salt << 7);
  return target.parent_path() /
         fmt::format(".{}.tmp.{}.{:x}", target.filename().string(), ::getpid(), n);
}

// Removes the temp file unless the save got as far as the rename.
struct TempFile {
  fs::path path;
  std::FILE* f = nullptr;
  int fd = -1;
  bool keep = false;
  ~TempFile() {
    if (f) std::fclose(f);
    else if (fd >= 0) ::close(fd);
    if (!keep) ::unlink(path.c_str());
  }
};

void fsync_folder(const fs::path& target, const fs::path& dir) {
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) fail(target, "cannot open folder", dir, errno);
  int rc = ::fsync(dfd);
  int err = errno;
  ::close(dfd);
  // Some file systems cannot fsync a folder (EINVAL); the rename is then as
  // durable as that file system makes it.
  if (rc != 0 && err != EINVAL) fail(target, "cannot fsync folder", dir, err);
}

}  // namespace

size_t sweep_stale_temp_files(const fs::path& dir, std::string_view target_name, std::chrono::seconds min_age) {
  size_t removed = 0;
  std::error_code ec;
  fs::directory_iterator it(dir, ec), end;
  const auto now = fs::file_time_type::clock::now();
  for (; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    // .NAME.tmp.PID.HEX
    size_t tag = name.rfind(".tmp.");
    if (name.size() < 2 || name[0] != '.' || tag == std::string::npos || tag < 1) continue;
    if (!target_name.empty() && std::string_view(name).substr(1, tag - 1) != target_name) continue;
    size_t dot = name.find('.', tag + 5);
    if (dot == std::string::npos || dot == tag + 5) continue;
    pid_t pid = 0;
    bool digits = true;
    for (size_t i = tag + 5; i < dot && digits; ++i) {
      digits = name[i] >= '0' && name[i] <= '9';
      pid = pid * 10 + (name[i] - '0');
    }
    if (!digits || pid <= 0) continue;
    std::error_code tec;
    auto mtime = fs::last_write_time(it->path(), tec);
    if (tec) continue;
    auto age = now - mtime;
    bool writer_gone = ::kill(pid, 0) != 0 && errno == ESRCH;
    bool stale = (writer_gone && age >= min_age) || age >= std::chrono::hours(24);
    std::error_code rec;
    if (stale && it->is_regular_file(rec) && fs::remove(it->path(), rec)) ++removed;
  }
  return removed;
}

void write_file_atomically(const fs::path& target, const std::function<void(std::FILE*)>& write) {
  if (target.filename().empty()) fail(target, "not a file name", target, EISDIR);
  fs::path dir = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  sweep_stale_temp_files(dir, target.filename().string());

  struct stat old {};
  bool had_old = ::stat(target.c_str(), &old) == 0;

  TempFile tmp;
  for (int attempt = 0; attempt < 100 && tmp.fd < 0; ++attempt) {
    tmp.path = temp_name(target);
    // 0644 is narrowed by the umask, as for any newly created file.
    tmp.fd = ::open(tmp.path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (tmp.fd < 0 && errno != EEXIST) {
      tmp.keep = true;  // nothing was created
      fail(target, "cannot create temp file", tmp.path, errno);
    }
  }
  if (tmp.fd < 0) {
    tmp.keep = true;
    fail(target, "cannot create temp file", tmp.path, EEXIST);
  }
  if (had_old && ::fchmod(tmp.fd, old.st_mode & 07777) != 0)
    fail(target, "cannot set mode of", tmp.path, errno);

  tmp.f = ::fdopen(tmp.fd, "wb");
  if (!tmp.f) fail(target, "cannot open stream on", tmp.path, errno);

  errno = 0;
  write(tmp.f);
  if (std::ferror(tmp.f)) fail(target, "cannot write", tmp.path, errno ? errno : EIO);
  if (std::fflush(tmp.f) != 0) fail(target, "cannot write", tmp.path, errno);
  if (::fsync(::fileno(tmp.f)) != 0) fail(target, "cannot fsync", tmp.path, errno);
  std::FILE* f = tmp.f;
  tmp.f = nullptr;
  tmp.fd = -1;
  if (std::fclose(f) != 0) fail(target, "cannot close", tmp.path, errno);

  if (::rename(tmp.path.c_str(), target.c_str()) != 0)
    fail(target, "cannot rename temp file", tmp.path, errno);
  tmp.keep = true;
  fsync_folder(target, dir);
}

void write_file_atomically(const fs::path& target,
                           std::span<const std::span<const std::byte>> chunks) {
  write_file_atomically(target, [&](std::FILE* f) {
    for (auto c : chunks)
      if (!c.empty() && std::fwrite(c.data(), 1, c.size(), f) != c.size()) return;
  });
}

}  // namespace tessel
