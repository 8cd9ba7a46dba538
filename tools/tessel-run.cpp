// tessel-run: starts the processes of a data-parallel run (torchrun's job).
//
//   tessel-run --nproc-per-node 2 ./train --epochs 3                 one machine, 2 ranks
//   tessel-run --nproc-per-node 2 --nnodes 2 --node-rank 0 --master 10.0.0.1:29500 ./train
//   tessel-run --nproc-per-node 2 --nnodes 2 --node-rank 1 --master 10.0.0.1:29500 ./train
//
// Each rank gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and
// MASTER_PORT, which dist::init_process_group() reads. Node 0's tessel-run hosts
// the rendezvous store itself (TESSEL_RUN_STORE=1 tells rank 0 not to), so a
// rank's death never takes the store with it. SIGINT, SIGTERM and SIGHUP are
// passed on to every rank. When a rank fails the others get SIGTERM, then
// SIGKILL after --grace seconds; tessel-run then exits with the failed rank's
// code (128 + signal for a rank killed by a signal). Without --master a
// one-machine run listens on 127.0.0.1 on a free port.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/dist/tcp_store.h"
#include "runtime/errors.h"

extern char** environ;

namespace {

struct Rank {
  int rank = 0;
  pid_t pid = -1;
  bool done = false;
  int code = 0;  // exit code, or 128 + signal
};

int parse_port(const std::string& s) {
  int port = -1;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), port);
  if (s.empty() || ec != std::errc{} || end != s.data() + s.size() || port < 0 || port > 65535) return -1;
  return port;
}

pid_t spawn_rank(const std::vector<std::string>& cmd, const std::vector<std::pair<std::string, std::string>>& vars) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string kv(*e);
    bool replaced = false;
    for (auto& [k, v] : vars) replaced |= kv.rfind(k + "=", 0) == 0;
    if (!replaced) env.push_back(kv);
  }
  for (auto& [k, v] : vars) env.push_back(k + "=" + v);
  std::vector<char*> envp, argv;
  for (auto& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = cmd;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  // Each rank in a process group of its own: a Ctrl-C reaches it through
  // tessel-run once, not twice, and ending a rank ends its children too.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK);
  posix_spawnattr_setpgroup(&attr, 0);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  pid_t pid = -1;
  int rc = posix_spawnp(&pid, argv[0], nullptr, &attr, argv.data(), envp.data());
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    fmt::print(stderr, "tessel-run: cannot start '{}': {}\n", cmd[0], std::strerror(rc));
    return -1;
  }
  return pid;
}

void signal_all(std::vector<Rank>& ranks, int sig) {
  for (auto& r : ranks)
    if (!r.done && r.pid > 0) ::kill(-r.pid, sig);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tessel-run: start the ranks of a distributed run (like torchrun)"};
  int nproc = 1, nnodes = 1, node_rank = 0;
  double grace = 5;
  std::string master;
  std::vector<std::string> cmd;
  app.add_option("--nproc-per-node", nproc, "processes (ranks) on this machine")->check(CLI::Range(1, 1024));
  app.add_option("--nnodes", nnodes, "machines in the run")->check(CLI::Range(1, 65536));
  app.add_option("--node-rank", node_rank, "this machine's index, 0..nnodes-1")->check(CLI::NonNegativeNumber);
  app.add_option("--master", master, "ADDR:PORT of node 0, where the rendezvous store listens");
  app.add_option("--grace", grace, "seconds the other ranks get to exit after one failed, before SIGKILL");
  // Everything from the program's name on belongs to the program.
  app.prefix_command();
  app.footer("  tessel-run [options] PROGRAM [ARGS...]");
  CLI11_PARSE(app, argc, argv);
  cmd = app.remaining();
  if (cmd.empty()) {
    fmt::print(stderr, "tessel-run: no program to run; usage: tessel-run --nproc-per-node N PROGRAM [ARGS...]\n");
    return 2;
  }

  if (node_rank >= nnodes) {
    fmt::print(stderr, "tessel-run: --node-rank {} is not a node of --nnodes {} (0..{})\n", node_rank, nnodes,
               nnodes - 1);
    return 2;
  }
  std::string addr = "127.0.0.1";
  int port = 0;
  if (!master.empty()) {
    auto colon = master.rfind(':');
    port = colon == std::string::npos ? -1 : parse_port(master.substr(colon + 1));
    if (colon == std::string::npos || colon == 0 || port < 0) {
      fmt::print(stderr, "tessel-run: --master '{}' is not ADDR:PORT (e.g. 10.0.0.1:29500)\n", master);
      return 2;
    }
    addr = master.substr(0, colon);
  } else if (nnodes > 1) {
    fmt::print(stderr, "tessel-run: --nnodes {} needs --master ADDR:PORT (node 0's address, the same on every node)\n",
               nnodes);
    return 2;
  }
  if (nnodes > 1 && port == 0) {
    fmt::print(stderr, "tessel-run: --master needs a fixed port (not 0) when there are several nodes\n");
    return 2;
  }

  // Signals are taken synchronously (sigtimedwait) from here on.
  sigset_t watched;
  sigemptyset(&watched);
  for (int s : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) sigaddset(&watched, s);
  sigprocmask(SIG_BLOCK, &watched, nullptr);

  std::unique_ptr<tessel::dist::TcpStoreServer> store;
  if (node_rank == 0) {
    try {
      store = std::make_unique<tessel::dist::TcpStoreServer>(master.empty() ? "127.0.0.1" : "0.0.0.0", port);
    } catch (const tessel::DistError& e) {
      fmt::print(stderr, "tessel-run: {}\n", e.what());
      return 2;
    }
    port = store->port();
  }

  int world = nnodes * nproc;
  int threads = std::max(1u, std::thread::hardware_concurrency() / static_cast<unsigned>(nproc));
  std::vector<Rank> ranks;
  for (int local = 0; local < nproc; ++local) {
    Rank r;
    r.rank = node_rank * nproc + local;
    std::vector<std::pair<std::string, std::string>> vars = {
        {"RANK", std::to_string(r.rank)},           {"WORLD_SIZE", std::to_string(world)},
        {"LOCAL_RANK", std::to_string(local)},      {"LOCAL_WORLD_SIZE", std::to_string(nproc)},
        {"MASTER_ADDR", addr},                      {"MASTER_PORT", std::to_string(port)},
        {"TESSEL_RUN_STORE", "1"}};
    // Ranks share the machine's cores unless told otherwise.
    if (!std::getenv("TESSEL_NUM_THREADS")) vars.push_back({"TESSEL_NUM_THREADS", std::to_string(threads)});
    r.pid = spawn_rank(cmd, vars);
    if (r.pid < 0) {
      signal_all(ranks, SIGKILL);
      return 127;
    }
    ranks.push_back(r);
  }

  int result = 0;
  std::string first_failure;
  std::optional<std::chrono::steady_clock::time_point> kill_at;
  size_t running = ranks.size();
  while (running > 0) {
    timespec wait{0, 100'000'000};
    if (kill_at) {
      auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(*kill_at - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        signal_all(ranks, SIGKILL);
        kill_at.reset();
      } else if (left < std::chrono::milliseconds(100)) {
        wait = {0, static_cast<long>(left.count())};
      }
    }
    siginfo_t info;
    int sig = sigtimedwait(&watched, &info, &wait);
    if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
      signal_all(ranks, sig);  // the ranks decide how to end; a second Ctrl-C is passed on too
      continue;
    }
    // SIGCHLD, or a periodic look: reap every rank that ended.
    for (auto& r : ranks) {
      if (r.done) continue;
      int status = 0;
      if (::waitpid(r.pid, &status, WNOHANG) != r.pid) continue;
      r.done = true;
      --running;
      r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      if (r.code != 0 && result == 0) {
        result = r.code;
        std::string how = WIFEXITED(status) ? fmt::format("exited with code {}", r.code)
                                            : fmt::format("was killed by signal {}", WTERMSIG(status));
        if (running > 0)
          fmt::print(stderr, "tessel-run: rank {} {}; stopping the other {} rank{}\n", r.rank, how, running,
                     running > 1 ? "s" : "");
        else
          fmt::print(stderr, "tessel-run: rank {} {}\n", r.rank, how);
        signal_all(ranks, SIGTERM);
        kill_at = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(grace * 1000));
      }
    }
  }
  return result;
}
