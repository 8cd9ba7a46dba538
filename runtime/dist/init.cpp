#include "runtime/dist/init.h"

#include <fmt/format.h>
#include <unistd.h>

#include <charconv>
#include <cstdlib>
#include <mutex>

#include "runtime/cuda/driver.h"
#include "runtime/dist/file_store.h"
#include "runtime/dist/gloo_process_group.h"
#include "runtime/dist/launch_env.h"
#include "runtime/dist/nccl_process_group.h"
#include "runtime/dist/tcp_store.h"
#include "runtime/errors.h"

namespace tessel::dist {

namespace {

std::mutex g_mu;
std::shared_ptr<ProcessGroup> g_default;

bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

std::chrono::milliseconds timeout_from_env(std::chrono::milliseconds given) {
  const char* v = std::getenv("TESSEL_DIST_TIMEOUT");
  if (!v) return given;
  std::string s(v);
  double seconds = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), seconds);
  if (s.empty() || ec != std::errc{} || end != s.data() + s.size() || !(seconds > 0))
    throw ValueError(fmt::format("TESSEL_DIST_TIMEOUT='{}' is not a positive number of seconds", s));
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

struct HostPort {
  std::string host;
  int port = 0;
};

HostPort parse_tcp(const std::string& rest, const std::string& method) {
  auto colon = rest.rfind(':');
  int port = -1;
  if (colon != std::string::npos) {
    std::string p = rest.substr(colon + 1);
    auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), port);
    if (p.empty() || ec != std::errc{} || end != p.data() + p.size()) port = -1;
  }
  if (colon == std::string::npos || colon == 0 || port < 0 || port > 65535)
    throw ValueError(fmt::format("init_process_group: init_method '{}' is not tcp://HOST:PORT", method));
  std::string host = rest.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return {host, port};
}

}  // namespace

std::shared_ptr<ProcessGroup> init_process_group(ProcessGroupOptions o) {
  {
    std::lock_guard lock(g_mu);
    if (g_default)
      throw ValueError("init_process_group: this process already joined a group; call destroy_process_group() "
                       "before joining another");
  }
  if (o.backend != "gloo" && o.backend != "nccl")
    throw ValueError(fmt::format("init_process_group: unknown backend '{}'; this build has \"gloo\" (CPU tensors) "
                                 "and \"nccl\" (GPU tensors)",
                                 o.backend));
  if ((o.rank >= 0) != (o.world_size >= 0))
    throw ValueError("init_process_group: give both .rank and .world_size, or neither (then the launcher's "
                     "RANK and WORLD_SIZE are read)");
  LaunchEnv env = read_launch_env();
  int rank = o.rank >= 0 ? o.rank : env.rank;
  int size = o.world_size >= 0 ? o.world_size : env.world_size;
  if (size < 1 || rank < 0 || rank >= size)
    throw ValueError(fmt::format("init_process_group: rank {} is not in a world of size {} (ranks are 0..{})", rank,
                                 size, size - 1));
  auto timeout = timeout_from_env(o.timeout);
  if (timeout.count() <= 0) throw ValueError("init_process_group: timeout must be positive");

  std::shared_ptr<Store> store;
  std::string gloo_host = "127.0.0.1";
  bool iface = false;
  const std::string& m = o.init_method;
  if (m.rfind("file://", 0) == 0) {
    store = std::make_shared<FileStore>(m.substr(7));
    if (env.master_addr && !is_loopback(*env.master_addr)) gloo_host = "";
  } else if (m == "env://" || m.rfind("tcp://", 0) == 0) {
    HostPort hp;
    if (m == "env://") {
      if (!env.master_addr || !env.master_port)
        throw ValueError(fmt::format("init_process_group: init_method env:// needs MASTER_ADDR and MASTER_PORT ({} "
                                     "unset); launch with tessel-run, or use init_method \"file:///a/fresh/folder\"",
                                     !env.master_addr ? "MASTER_ADDR" : "MASTER_PORT"));
      hp = {*env.master_addr, *env.master_port};
    } else {
      hp = parse_tcp(m.substr(6), m);
    }
    std::unique_ptr<TcpStoreServer> server;
    if (rank == 0 && !env.store_hosted_by_launcher) server = std::make_unique<TcpStoreServer>(hp.host, hp.port);
    auto tcp = std::make_shared<TcpStore>(hp.host, server ? server->port() : hp.port, timeout);
    if (server) tcp->own_server(std::move(server));
    store = tcp;
    if (!is_loopback(hp.host)) gloo_host = "";
  } else {
    throw ValueError(fmt::format("init_process_group: init_method '{}' is not env://, tcp://HOST:PORT or "
                                 "file:///FOLDER",
                                 m));
  }
  // The address other ranks reach this one on: loopback for a one-machine run,
  // else this machine's name, or the interface GLOO_SOCKET_IFNAME names.
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname) {
    gloo_host = ifname;
    iface = true;
  } else if (gloo_host.empty()) {
    char name[256] = {};
    ::gethostname(name, sizeof name - 1);
    gloo_host = name;
  }
  std::shared_ptr<ProcessGroup> pg;
  if (o.backend == "nccl") {
    // A barrier before any tensor needs a GPU: the launcher's convention, local rank i on GPU i.
    int gpus = cuda::device_count();
    pg = make_nccl_process_group(store, rank, size, timeout, gpus > 0 ? env.local_rank % gpus : -1);
  } else {
    pg = make_gloo_process_group(store, rank, size, timeout, gloo_host, iface);
  }
  std::lock_guard lock(g_mu);
  g_default = pg;
  return pg;
}

bool is_initialized() {
  std::lock_guard lock(g_mu);
  return g_default != nullptr;
}

std::shared_ptr<ProcessGroup> default_group() {
  std::lock_guard lock(g_mu);
  if (!g_default)
    throw ValueError("distributed: no process group; call dist::init_process_group() first (and start the program "
                     "with tessel-run)");
  return g_default;
}

void destroy_process_group() {
  std::shared_ptr<ProcessGroup> pg;
  std::lock_guard lock(g_mu);
  pg = std::move(g_default);
}

}  // namespace tessel::dist
