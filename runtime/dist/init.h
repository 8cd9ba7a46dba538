// init_process_group: joins this process to a distributed run and makes the
// group the default one that collectives, DistributedDataParallel and the
// Trainer use. Rank and world size come from the launcher's environment
// (tessel-run or torchrun: RANK/WORLD_SIZE; mpirun: OMPI_COMM_WORLD_*; srun:
// SLURM_PROCID/SLURM_NTASKS) unless given.
//
//   // tessel-run --nproc-per-node 2 ./train
//   auto pg = dist::init_process_group({.backend = "gloo"});
//   fmt::print("rank {} of {}\n", pg->rank(), pg->size());
//
// init_method: "env://" (MASTER_ADDR:MASTER_PORT; rank 0 hosts the store unless
// tessel-run does), "tcp://host:port", or "file:///a/fresh/folder" every rank sees.
// TESSEL_DIST_TIMEOUT (seconds) overrides `timeout` for a run. Backend "nccl"
// loads NCCL at run time (TESSEL_NCCL names the library; runtime/cuda/nccl.h).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "runtime/dist/process_group.h"

namespace tessel::dist {

struct ProcessGroupOptions {
  std::string backend = "gloo";          // "gloo" (CPU tensors) or "nccl" (GPU tensors, one GPU per rank)
  std::string init_method = "env://";
  int rank = -1;                         // -1: from the environment
  int world_size = -1;                   // -1: from the environment
  std::chrono::milliseconds timeout = std::chrono::minutes(5);  // a dead or hung rank fails the others after this
};

/// Throws ValueError for bad options or environment, DistError when rendezvous fails.
std::shared_ptr<ProcessGroup> init_process_group(ProcessGroupOptions options = {});
bool is_initialized();
/// The group init_process_group made; throws ValueError when there is none.
std::shared_ptr<ProcessGroup> default_group();
/// Leaves the run: the default group is released (its queued collectives finish first).
void destroy_process_group();

}  // namespace tessel::dist
