#include "runtime/dist/tcp_store.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "runtime/errors.h"

namespace tessel::dist {

namespace {

// Wire format, one request at a time per connection:
//   'S' u32 klen key u32 vlen value      -> 'K'
//   'G' u32 klen key i64 timeout_ms      -> 'V' u32 vlen value | 'T'
bool write_all(int fd, const void* p, size_t n) {
  auto* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = ::send(fd, c, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    c += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool read_all(int fd, void* p, size_t n) {
  auto* c = static_cast<char*>(p);
  while (n > 0) {
    ssize_t r = ::recv(fd, c, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    c += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool write_blob(int fd, const char* p, uint32_t n) { return write_all(fd, &n, 4) && write_all(fd, p, n); }

bool read_blob(int fd, std::vector<char>& out) {
  uint32_t n = 0;
  if (!read_all(fd, &n, 4)) return false;
  out.resize(n);
  return read_all(fd, out.data(), n);
}

// Resolves host (a name or a numeric address) to an IPv4/IPv6 socket address.
addrinfo* resolve(const std::string& host, int port, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  std::string service = std::to_string(port);
  int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0)
    throw DistError(fmt::format("tcp store: cannot resolve the master address '{}' ({}); set MASTER_ADDR to a host "
                                "name or address every rank can reach",
                                host, gai_strerror(rc)));
  return res;
}

}  // namespace

TcpStoreServer::TcpStoreServer(const std::string& host, int port) {
  addrinfo* res = resolve(host, port, true);
  std::string why;
  for (addrinfo* a = res; a && listen_fd_ < 0; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 128) == 0) {
      listen_fd_ = fd;
      sockaddr_storage bound{};
      socklen_t len = sizeof bound;
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
      port_ = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                          : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    } else {
      why = std::strerror(errno);
      ::close(fd);
    }
  }
  ::freeaddrinfo(res);
  if (listen_fd_ < 0)
    throw DistError(fmt::format("tcp store: cannot listen on {}:{} ({}); is another run using MASTER_PORT {}? pick "
                                "another port",
                                host, port, why, port));
  acceptor_ = std::thread([this] { accept_loop(); });
}

TcpStoreServer::~TcpStoreServer() {
  stopping_ = true;
  ::shutdown(listen_fd_, SHUT_RDWR);  // wakes accept()
  {
    std::lock_guard lock(mu_);
    for (int fd : client_fds_) ::shutdown(fd, SHUT_RDWR);  // wakes recv()
  }
  changed_.notify_all();
  acceptor_.join();
  for (auto& t : threads_) t.join();
  ::close(listen_fd_);
}

void TcpStoreServer::accept_loop() {
  while (!stopping_) {
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;
    }
    std::lock_guard lock(mu_);
    if (stopping_) {
      ::close(fd);
      return;
    }
    client_fds_.push_back(fd);
    threads_.emplace_back([this, fd] { serve(fd); });
  }
}

void TcpStoreServer::serve(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  std::vector<char> key, value;
  for (;;) {
    char op = 0;
    if (!read_all(fd, &op, 1) || !read_blob(fd, key)) break;
    std::string k(key.begin(), key.end());
    if (op == 'S') {
      if (!read_blob(fd, value)) break;
      {
        std::lock_guard lock(mu_);
        values_[k] = value;
      }
      changed_.notify_all();
      if (!write_all(fd, "K", 1)) break;
    } else if (op == 'G') {
      int64_t timeout_ms = 0;
      if (!read_all(fd, &timeout_ms, 8)) break;
      std::unique_lock lock(mu_);
      bool found = changed_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                                     [&] { return stopping_ || values_.count(k) > 0; });
      if (stopping_) break;
      if (found) {
        value = values_[k];
        lock.unlock();
        if (!write_all(fd, "V", 1) || !write_blob(fd, value.data(), static_cast<uint32_t>(value.size()))) break;
      } else {
        lock.unlock();
        if (!write_all(fd, "T", 1)) break;
      }
    } else {
      break;  // not a store client: drop it
    }
  }
  std::lock_guard lock(mu_);
  std::erase(client_fds_, fd);
  ::close(fd);
}

TcpStore::TcpStore(std::string host, int port, std::chrono::milliseconds connect_timeout)
    : host_(std::move(host)), port_(port) {
  auto deadline = std::chrono::steady_clock::now() + connect_timeout;
  std::string why;
  auto pause = std::chrono::milliseconds(1);
  while (fd_ < 0) {
    addrinfo* res = resolve(host_, port_, false);
    for (addrinfo* a = res; a && fd_ < 0; a = a->ai_next) {
      int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) continue;
      if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
        fd_ = fd;
      } else {
        why = std::strerror(errno);
        ::close(fd);
      }
    }
    ::freeaddrinfo(res);
    if (fd_ >= 0) break;
    if (std::chrono::steady_clock::now() >= deadline)
      throw DistError(fmt::format("tcp store: no server at {}:{} after {} ms ({}); is rank 0 (or tessel-run) "
                                  "running, and are MASTER_ADDR and MASTER_PORT the same on every rank?",
                                  host_, port_, connect_timeout.count(), why));
    // The server (rank 0) may still be starting: retry soon, backing off to 50 ms.
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
  int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

TcpStore::~TcpStore() {
  if (fd_ >= 0) ::close(fd_);
}

std::string TcpStore::describe() const { return fmt::format("tcp://{}:{}", host_, port_); }

void TcpStore::set(const std::string& key, const std::vector<char>& value) {
  std::lock_guard lock(mu_);
  char ack = 0;
  if (!write_all(fd_, "S", 1) || !write_blob(fd_, key.data(), static_cast<uint32_t>(key.size())) ||
      !write_blob(fd_, value.data(), static_cast<uint32_t>(value.size())) || !read_all(fd_, &ack, 1) || ack != 'K')
    throw DistError(fmt::format("tcp store {}: lost the connection to the store while setting '{}'; the process "
                                "hosting it (rank 0 or tessel-run) has exited",
                                describe(), key));
}

std::optional<std::vector<char>> TcpStore::try_get(const std::string& key, std::chrono::milliseconds timeout) {
  std::lock_guard lock(mu_);
  int64_t ms = timeout.count();
  char reply = 0;
  if (!write_all(fd_, "G", 1) || !write_blob(fd_, key.data(), static_cast<uint32_t>(key.size())) ||
      !write_all(fd_, &ms, 8) || !read_all(fd_, &reply, 1))
    throw DistError(fmt::format("tcp store {}: lost the connection to the store while waiting for '{}'; the process "
                                "hosting it (rank 0 or tessel-run) has exited",
                                describe(), key));
  if (reply == 'T') return std::nullopt;
  std::vector<char> value;
  if (reply != 'V' || !read_blob(fd_, value))
    throw DistError(fmt::format("tcp store {}: a malformed reply while reading '{}'", describe(), key));
  return value;
}

std::vector<char> TcpStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  if (auto v = try_get(key, timeout)) return *v;
  throw DistError(fmt::format("tcp store {}: key '{}' was not set within {} ms; a rank that should have set it has "
                              "not started, has died or hangs",
                              describe(), key, timeout.count()));
}

}  // namespace tessel::dist
