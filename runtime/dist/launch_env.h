// LaunchEnv: who this process is in a distributed run, read from what the
// launcher set. tessel-run and torchrun set RANK, WORLD_SIZE, LOCAL_RANK,
// MASTER_ADDR, MASTER_PORT; Open MPI's mpirun sets OMPI_COMM_WORLD_RANK/_SIZE/
// _LOCAL_RANK; Slurm's srun sets SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID.
// The first family present wins, in that order.
//
//   dist::LaunchEnv env = dist::read_launch_env();   // env.rank, env.world_size, env.source
#pragma once

#include <optional>
#include <string>

namespace tessel::dist {

struct LaunchEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::optional<std::string> master_addr;  // MASTER_ADDR (any family may set it)
  std::optional<int> master_port;          // MASTER_PORT
  std::string source;                      // "torchrun", "mpi", "slurm" or "" (none found)
  bool store_hosted_by_launcher = false;   // TESSEL_RUN_STORE=1: rank 0 must not host it
};

/// Throws ValueError (naming the variable) when a variable is set but not a whole
/// number, or when RANK is not in [0, WORLD_SIZE).
LaunchEnv read_launch_env();

}  // namespace tessel::dist
