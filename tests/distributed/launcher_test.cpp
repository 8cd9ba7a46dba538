// tessel-run: starts the ranks with the launcher's environment (env://
// rendezvous on a store it hosts), ends them all when one fails, passes
// signals on, and rejects bad command lines.
#include <catch2/catch.hpp>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include "rank_processes.h"

using namespace tessel::test;

namespace {

RankResult run_launcher(std::vector<std::string> args) {
  RankRun run;
  run.argv = {TESSEL_RUN};
  run.argv.insert(run.argv.end(), args.begin(), args.end());
  run.world_size = 1;
  run.deadline = std::chrono::seconds(60);
  return run_ranks(run)[0];
}

}  // namespace

TEST_CASE("tessel-run starts the ranks and they meet through env://", "[distributed]") {
  auto r = run_launcher({"--nproc-per-node", "2", TESSEL_COLLECTIVES_WORKER, "collectives", "env://"});
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK(count(r.output, "FAIL") == 0);
  CHECK(count(r.output, "ok all_reduce sum f64 [100, 102, 104, 106, 108]") == 2);
}

TEST_CASE("tessel-run ends every rank when one fails and exits with its code", "[distributed]") {
  auto t0 = std::chrono::steady_clock::now();
  auto r = run_launcher({"--nproc-per-node", "2", "--grace", "2", TESSEL_COLLECTIVES_WORKER, "exit_rank1", "env://"});
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(r.output);
  CHECK(r.exit_code == 7);
  CHECK(r.output.find("tessel-run: rank 1 exited with code 7; stopping the other 1 rank") != std::string::npos);
  CHECK(seconds < 10);  // rank 0 would sleep 60 s
}

TEST_CASE("tessel-run passes SIGTERM on to every rank", "[distributed]") {
  std::string dir = fresh_temp_dir("launcher");
  std::string log = dir + "/out.log";
  std::vector<std::string> args = {TESSEL_RUN, "--nproc-per-node", "2", TESSEL_COLLECTIVES_WORKER,
                                   "wait_for_signal", "env://"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = -1;
  REQUIRE(posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ) == 0);
  posix_spawn_file_actions_destroy(&fa);
  auto read_log = [&] {
    std::ifstream in(log);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (count(read_log(), "ready") < 2 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(count(read_log(), "ready") == 2);
  auto t0 = std::chrono::steady_clock::now();
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(read_log());
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 128 + SIGTERM);  // the ranks died of the SIGTERM passed on
  CHECK(read_log().find("was killed by signal 15") != std::string::npos);
  CHECK(seconds < 5);
  std::filesystem::remove_all(dir);
}

TEST_CASE("tessel-run rejects a command line it cannot run", "[distributed][error]") {
  auto none = run_launcher({"--nproc-per-node", "2"});
  CHECK(none.exit_code == 2);
  CHECK(none.output.find("tessel-run: no program to run; usage: tessel-run --nproc-per-node N PROGRAM [ARGS...]") !=
        std::string::npos);
  auto nodes = run_launcher({"--nproc-per-node", "2", "--nnodes", "2", "true"});
  CHECK(nodes.exit_code == 2);
  CHECK(nodes.output.find("tessel-run: --nnodes 2 needs --master ADDR:PORT (node 0's address, the same on every "
                          "node)") != std::string::npos);
  auto master = run_launcher({"--master", "nohost", "true"});
  CHECK(master.exit_code == 2);
  CHECK(master.output.find("tessel-run: --master 'nohost' is not ADDR:PORT (e.g. 10.0.0.1:29500)") !=
        std::string::npos);
  auto missing = run_launcher({"--nproc-per-node", "1", "/nonexistent/program"});
  CHECK(missing.exit_code == 127);
  CHECK(missing.output.find("tessel-run: cannot start '/nonexistent/program'") != std::string::npos);
}
