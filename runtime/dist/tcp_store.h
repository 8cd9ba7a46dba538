// TcpStore: rendezvous through a small key-value server on the master's
// address (MASTER_ADDR:MASTER_PORT), as torchrun does. Rank 0 hosts the
// server unless the launcher (tessel-run) already does; every rank,
// rank 0 included, talks to it as a client.
//
//   dist::TcpStoreServer server("127.0.0.1", 0);           // port 0: any free port
//   dist::TcpStore store("127.0.0.1", server.port(), std::chrono::seconds(30));
//   store.set("k", {'v'});
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/dist/store.h"

namespace tessel::dist {

class TcpStoreServer {
 public:
  /// Listens on host:port (port 0 picks a free one; see port()). Throws DistError if it cannot bind.
  TcpStoreServer(const std::string& host, int port);
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;
  int port() const { return port_; }

 private:
  void accept_loop();
  void serve(int fd);
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, std::vector<char>> values_;
  std::vector<int> client_fds_;
  std::vector<std::thread> threads_;
  std::thread acceptor_;
};

class TcpStore : public Store {
 public:
  /// Connects to host:port, retrying until `connect_timeout` (the server may start later).
  TcpStore(std::string host, int port, std::chrono::milliseconds connect_timeout);
  ~TcpStore() override;
  void set(const std::string& key, const std::vector<char>& value) override;
  std::vector<char> get(const std::string& key, std::chrono::milliseconds timeout) override;
  std::optional<std::vector<char>> try_get(const std::string& key, std::chrono::milliseconds timeout) override;
  std::string describe() const override;
  /// Keeps a server alive as long as this client (rank 0 hosting the store).
  void own_server(std::unique_ptr<TcpStoreServer> server) { server_ = std::move(server); }

 private:
  std::string host_;
  int port_;
  int fd_ = -1;
  std::mutex mu_;  // one request at a time on the connection
  std::unique_ptr<TcpStoreServer> server_;
};

}  // namespace tessel::dist
