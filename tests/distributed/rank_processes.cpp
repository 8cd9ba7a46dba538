#include "rank_processes.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace tessel::test {

std::string fresh_temp_dir(const std::string& tag) {
  std::string tmpl = "/tmp/tessel-" + tag + "-XXXXXX";
  if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
  return tmpl;
}

std::vector<RankResult> run_ranks(const RankRun& run) {
  std::string dir = fresh_temp_dir("ranks");
  std::vector<pid_t> pids(static_cast<size_t>(run.world_size), -1);
  std::vector<RankResult> results(pids.size());
  auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < run.world_size; ++r) {
    std::map<std::string, std::string> env;
    for (char** e = environ; *e; ++e) {
      std::string kv(*e);
      auto eq = kv.find('=');
      if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    env["RANK"] = std::to_string(r);
    env["WORLD_SIZE"] = std::to_string(run.world_size);
    env["LOCAL_RANK"] = std::to_string(r);
    env["MASTER_ADDR"] = "127.0.0.1";
    env["TESSEL_NUM_THREADS"] = "1";
    for (auto& [k, v] : run.env) env[k] = v;
    std::vector<std::string> kvs;
    for (auto& [k, v] : env) kvs.push_back(k + "=" + v);
    std::vector<char*> envp, argv;
    for (auto& s : kvs) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::vector<std::string> args = run.argv;
    for (auto& s : args) argv.push_back(s.data());
    argv.push_back(nullptr);
    std::string out = dir + "/rank" + std::to_string(r) + ".log";
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    pid_t pid = -1;
    int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) throw std::runtime_error("posix_spawn failed for " + run.argv[0]);
    pids[static_cast<size_t>(r)] = pid;
  }
  auto deadline = start + run.deadline;
  size_t running = pids.size();
  auto may_linger = [&](int r) {
    return std::find(run.linger_ok.begin(), run.linger_ok.end(), r) != run.linger_ok.end();
  };
  auto pause = std::chrono::milliseconds(1);
  while (running > 0) {
    bool only_lingerers = true;
    for (size_t r = 0; r < pids.size(); ++r) {
      if (pids[r] < 0) continue;
      int status = 0;
      pid_t got = ::waitpid(pids[r], &status, WNOHANG);
      if (got == pids[r]) {
        results[r].seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (WIFEXITED(status)) results[r].exit_code = WEXITSTATUS(status);
        if (WIFSIGNALED(status)) results[r].signal = WTERMSIG(status);
        pids[r] = -1;
        --running;
      } else if (!may_linger(static_cast<int>(r))) {
        only_lingerers = false;
      }
    }
    if (running == 0) break;
    if (only_lingerers || std::chrono::steady_clock::now() >= deadline) {
      for (pid_t p : pids)
        if (p > 0) ::kill(p, SIGKILL);
      deadline = std::chrono::steady_clock::now();  // reap what was killed
    }
    std::this_thread::sleep_for(pause);  // child exits have no fd to wait on here: poll, backing off to 20 ms
    pause = std::min(pause * 2, std::chrono::milliseconds(20));
  }
  for (size_t r = 0; r < pids.size(); ++r) {
    std::ifstream in(dir + "/rank" + std::to_string(r) + ".log");
    results[r].output.assign(std::istreambuf_iterator<char>(in), {});
  }
  std::string cmd = "rm -rf '" + dir + "'";
  (void)!std::system(cmd.c_str());
  return results;
}

std::vector<RankResult> run_ranks_with_file_store(RankRun run, std::vector<std::string> after_store) {
  const std::string store = fresh_temp_dir("store");
  run.argv.push_back("file://" + store);
  run.argv.insert(run.argv.end(), after_store.begin(), after_store.end());
  auto results = run_ranks(run);
  std::filesystem::remove_all(store);
  return results;
}

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

}  // namespace tessel::test
