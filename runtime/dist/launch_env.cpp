#include "runtime/dist/launch_env.h"

#include <fmt/format.h>

#include <charconv>
#include <cstdlib>

#include "runtime/errors.h"

namespace tessel::dist {

namespace {

std::optional<int> int_var(const char* name) {
  const char* v = std::getenv(name);
  if (!v) return std::nullopt;
  std::string s(v);
  int out = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  if (s.empty() || ec != std::errc{} || end != s.data() + s.size())
    throw ValueError(fmt::format("distributed launch: {}='{}' is not a whole number", name, s));
  return out;
}

std::optional<std::string> str_var(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  return std::string(v);
}

}  // namespace

LaunchEnv read_launch_env() {
  LaunchEnv env;
  struct Family {
    const char* source;
    const char *rank, *size, *local;
  };
  static constexpr Family families[] = {
      {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
      {"mpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
      {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
  };
  for (const Family& f : families) {
    auto rank = int_var(f.rank);
    auto size = int_var(f.size);
    if (!rank && !size) continue;
    if (!rank || !size)
      throw ValueError(fmt::format("distributed launch: {} is set but {} is not; a launcher sets both", rank ? f.rank : f.size,
                                   rank ? f.size : f.rank));
    if (*size < 1 || *rank < 0 || *rank >= *size)
      throw ValueError(fmt::format("distributed launch: {}={} is not a rank of {}={} (ranks are 0..{})", f.rank, *rank,
                                   f.size, *size, *size - 1));
    env.rank = *rank;
    env.world_size = *size;
    env.local_rank = int_var(f.local).value_or(0);
    env.source = f.source;
    break;
  }
  env.master_addr = str_var("MASTER_ADDR");
  env.master_port = int_var("MASTER_PORT");
  env.store_hosted_by_launcher = str_var("TESSEL_RUN_STORE").value_or("") == "1";
  return env;
}

}  // namespace tessel::dist
