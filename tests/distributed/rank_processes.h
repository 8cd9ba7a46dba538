// Starts the ranks of a distributed test as separate processes (loopback,
// one thread each) and collects what each printed and how it ended, killing
// whatever still runs at the deadline so no test can hang.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace tessel::test {

struct RankResult {
  int exit_code = -1;  // -1 when killed by a signal
  int signal = 0;
  std::string output;  // stdout and stderr
  double seconds = 0;  // from start to exit
};

struct RankRun {
  std::vector<std::string> argv;            // program and arguments (the same for every rank)
  int world_size = 2;
  std::map<std::string, std::string> env;   // added to each rank's environment
  std::chrono::seconds deadline{60};        // everything still running then is killed
  std::vector<int> linger_ok;               // ranks that may still run when the others are done (hung on purpose)
};

/// A fresh temporary folder (for a file store); removed by the caller if wanted.
std::string fresh_temp_dir(const std::string& tag);
/// RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR=127.0.0.1 and TESSEL_NUM_THREADS=1 are set for each rank.
std::vector<RankResult> run_ranks(const RankRun& run);
/// run_ranks with the file:// URL of a fresh folder (where the ranks meet)
/// appended to run.argv, then `after_store`; the folder is removed afterwards.
std::vector<RankResult> run_ranks_with_file_store(RankRun run, std::vector<std::string> after_store = {});

/// How often `what` occurs in `s` (a rank's "ok ..." and "FAIL" lines).
int count(const std::string& s, const std::string& what);

}  // namespace tessel::test
