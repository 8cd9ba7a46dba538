// Temp files of killed saves are swept: a dead writer's after a short grace
// time, anyone's after a day; a live writer's (this process) never before that.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>

#include "ckpt_test_util.h"
#include "runtime/atomic_file.h"

using namespace ckpt_test;
namespace fs = std::filesystem;

namespace {

void touch(const fs::path& p, std::chrono::seconds age) {
  std::ofstream(p) << "partial";
  fs::last_write_time(p, fs::file_time_type::clock::now() - age);
}

pid_t dead_pid() {
  pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return pid;  // reaped: no process has it (until the pid space wraps, which takes far longer than this test)
}

}  // namespace

TEST_CASE("stale temp files of killed saves are swept and live and foreign files are kept") {
  TempDir dir;
  const std::string me = std::to_string(::getpid()), dead = std::to_string(dead_pid());
  touch(dir.path / (".model.safetensors.tmp." + dead + ".1f"), std::chrono::seconds(60));       // dead, old: swept
  touch(dir.path / (".model.safetensors.tmp." + dead + ".2f"), std::chrono::seconds(0));        // dead, fresh: kept
  touch(dir.path / (".model.safetensors.tmp." + me + ".3f"), std::chrono::seconds(3600));       // live writer: kept
  touch(dir.path / (".model.safetensors.tmp." + me + ".4f"), std::chrono::seconds(2 * 86400));  // a day old: swept
  touch(dir.path / (".other.bin.tmp." + dead + ".5f"), std::chrono::seconds(60));               // another target
  touch(dir.path / "model.safetensors", std::chrono::seconds(86400 * 3));                       // not a temp file
  touch(dir.path / ".model.safetensors.tmp.notapid.6f", std::chrono::seconds(86400 * 3));       // not ours

  CHECK(tessel::sweep_stale_temp_files(dir.path, "model.safetensors") == 2);
  CHECK_FALSE(fs::exists(dir.path / (".model.safetensors.tmp." + dead + ".1f")));
  CHECK(fs::exists(dir.path / (".model.safetensors.tmp." + dead + ".2f")));
  CHECK(fs::exists(dir.path / (".model.safetensors.tmp." + me + ".3f")));
  CHECK_FALSE(fs::exists(dir.path / (".model.safetensors.tmp." + me + ".4f")));
  CHECK(fs::exists(dir.path / (".other.bin.tmp." + dead + ".5f")));
  CHECK(fs::exists(dir.path / "model.safetensors"));
  CHECK(fs::exists(dir.path / ".model.safetensors.tmp.notapid.6f"));

  // A whole-folder sweep (the kernel cache's) takes the other target's too.
  CHECK(tessel::sweep_stale_temp_files(dir.path) == 1);
  CHECK_FALSE(fs::exists(dir.path / (".other.bin.tmp." + dead + ".5f")));
  // A missing folder is no error.
  CHECK(tessel::sweep_stale_temp_files(dir.path / "absent") == 0);
}

TEST_CASE("a save sweeps its own target's stale temp files") {
  TempDir dir;
  const std::string dead = std::to_string(dead_pid());
  const fs::path left = dir.path / (".m.bin.tmp." + dead + ".7f");
  touch(left, std::chrono::seconds(120));
  tessel::write_file_atomically(dir.path / "m.bin", [](std::FILE* f) { std::fputs("new", f); });
  CHECK_FALSE(fs::exists(left));
  std::ifstream in(dir.path / "m.bin");
  std::string s;
  in >> s;
  CHECK(s == "new");
}
