// Rendezvous stores and the launcher environment, in one process.
#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <stdlib.h>

#include <thread>

#include "rank_processes.h"
#include "tests/support/temp_dir.h"
#include "runtime/dist/file_store.h"
#include "runtime/dist/launch_env.h"
#include "runtime/dist/tcp_store.h"
#include "runtime/errors.h"

using namespace tessel;
using namespace std::chrono_literals;

TEST_CASE("a TCP store hands values between clients and waits for missing keys", "[distributed]") {
  dist::TcpStoreServer server("127.0.0.1", 0);
  REQUIRE(server.port() > 0);
  dist::TcpStore a("127.0.0.1", server.port(), 5s), b("127.0.0.1", server.port(), 5s);
  a.set("x", {'4', '2'});
  CHECK(b.get("x", 1s) == std::vector<char>{'4', '2'});
  CHECK_FALSE(b.try_get("missing", 20ms).has_value());
  std::thread late([&] {
    std::this_thread::sleep_for(30ms);
    a.set("late", {'y'});
  });
  CHECK(b.get("late", 5s) == std::vector<char>{'y'});
  late.join();
  CHECK_THROWS_MATCHES(b.get("never", 10ms), DistError,
                       Catch::Message(fmt::format("tcp store tcp://127.0.0.1:{}: key 'never' was not set within 10 ms; "
                                                  "a rank that should have set it has not started, has died or hangs",
                                                  server.port())));
}

TEST_CASE("a TCP store client without a server fails after its timeout", "[distributed][error]") {
  int port = 0;
  {
    dist::TcpStoreServer probe("127.0.0.1", 0);  // a port nobody listens on once it is gone
    port = probe.port();
  }
  CHECK_THROWS_WITH(dist::TcpStore("127.0.0.1", port, 50ms),
                    Catch::StartsWith(fmt::format("tcp store: no server at 127.0.0.1:{} after 50 ms", port)));
}

TEST_CASE("a file store hands values between instances on one folder", "[distributed]") {
  testing::TempDir dir("tessel-fstore");
  dist::FileStore a(dir.path.string()), b(dir.path.string());
  a.set("rank/0", {'a', 'b'});
  CHECK(b.get("rank/0", 1s) == std::vector<char>{'a', 'b'});
  CHECK_FALSE(b.try_get("rank/1", 5ms).has_value());
}

TEST_CASE("the launch environment is read from torchrun, Open MPI or Slurm variables", "[distributed]") {
  for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                        "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "MASTER_ADDR",
                        "MASTER_PORT"})
    ::unsetenv(v);
  CHECK(dist::read_launch_env().source == "");
  ::setenv("SLURM_PROCID", "3", 1);
  ::setenv("SLURM_NTASKS", "8", 1);
  ::setenv("SLURM_LOCALID", "1", 1);
  auto slurm = dist::read_launch_env();
  CHECK((slurm.source == "slurm" && slurm.rank == 3 && slurm.world_size == 8 && slurm.local_rank == 1));
  ::setenv("OMPI_COMM_WORLD_RANK", "2", 1);
  ::setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  auto mpi = dist::read_launch_env();
  CHECK((mpi.source == "mpi" && mpi.rank == 2 && mpi.world_size == 4 && mpi.local_rank == 0));
  ::setenv("RANK", "1", 1);
  ::setenv("WORLD_SIZE", "2", 1);
  ::setenv("MASTER_ADDR", "10.0.0.1", 1);
  ::setenv("MASTER_PORT", "29500", 1);
  auto torchrun = dist::read_launch_env();
  CHECK((torchrun.source == "torchrun" && torchrun.rank == 1 && torchrun.world_size == 2));
  CHECK(torchrun.master_addr == "10.0.0.1");
  CHECK(torchrun.master_port == 29500);
  ::setenv("RANK", "2", 1);
  CHECK_THROWS_MATCHES(dist::read_launch_env(), ValueError,
                       Catch::Message("distributed launch: RANK=2 is not a rank of WORLD_SIZE=2 (ranks are 0..1)"));
  ::setenv("RANK", "one", 1);
  CHECK_THROWS_MATCHES(dist::read_launch_env(), ValueError,
                       Catch::Message("distributed launch: RANK='one' is not a whole number"));
  ::unsetenv("WORLD_SIZE");
  ::setenv("RANK", "0", 1);
  CHECK_THROWS_MATCHES(dist::read_launch_env(), ValueError,
                       Catch::Message("distributed launch: RANK is set but WORLD_SIZE is not; a launcher sets both"));
}
