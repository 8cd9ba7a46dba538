// Store: the key-value board ranks meet on before they can talk directly
// (rendezvous), and where they leave word when a collective fails. Two kinds:
// TcpStore (a server on the master's address) and FileStore (a shared folder).
//
//   auto store = dist::FileStore::open("/tmp/run-42", std::chrono::seconds(30));
//   store->set("ready/1", {'y'});
//   auto v = store->get("ready/0");   // waits until rank 0 set it, or throws DistError
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace tessel::dist {

class Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const std::vector<char>& value) = 0;
  /// Waits for `key` up to `timeout`; throws DistError naming the key when it never comes.
  virtual std::vector<char> get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  /// The value if `key` is there within `timeout`, else nothing (no error).
  virtual std::optional<std::vector<char>> try_get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  /// Where the store lives, for error messages ("tcp://127.0.0.1:29500").
  virtual std::string describe() const = 0;
};

/// Keys under `prefix/`, so process groups sharing one store do not collide.
class PrefixStore : public Store {
 public:
  PrefixStore(std::string prefix, Store& base) : prefix_(std::move(prefix)), base_(base) {}
  void set(const std::string& key, const std::vector<char>& value) override { base_.set(prefix_ + "/" + key, value); }
  std::vector<char> get(const std::string& key, std::chrono::milliseconds timeout) override {
    return base_.get(prefix_ + "/" + key, timeout);
  }
  std::optional<std::vector<char>> try_get(const std::string& key, std::chrono::milliseconds timeout) override {
    return base_.try_get(prefix_ + "/" + key, timeout);
  }
  std::string describe() const override { return base_.describe(); }

 private:
  std::string prefix_;
  Store& base_;
};

}  // namespace tessel::dist
