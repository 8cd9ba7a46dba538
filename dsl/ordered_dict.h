// An insertion-ordered string map: what state_dict() returns and load() reads.
//   OrderedDict<Tensor> sd = net.state_dict();
//   for (auto& [name, t] : sd) fmt::print("{} {}\n", name, t.shape());
#pragma once

#include <fmt/format.h>

#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "runtime/errors.h"

namespace tessel {

template <class V>
class OrderedDict {
 public:
  using Item = std::pair<std::string, V>;
  OrderedDict() = default;
  OrderedDict(std::initializer_list<Item> items) {
    for (auto& it : items) insert(it.first, it.second);
  }

  /// Adds `key`; ValueError if it is already there.
  V& insert(std::string key, V value) {
    if (index_.count(key)) throw ValueError(fmt::format("OrderedDict: key '{}' is already present", key));
    index_.emplace(key, items_.size());
    items_.emplace_back(std::move(key), std::move(value));
    return items_.back().second;
  }
  /// Adds or replaces `key` (keeping its position when present).
  V& set(const std::string& key, V value) {
    auto it = index_.find(key);
    if (it == index_.end()) return insert(key, std::move(value));
    return items_[it->second].second = std::move(value);
  }
  bool contains(const std::string& key) const { return index_.count(key) != 0; }
  const V* find(const std::string& key) const {
    auto it = index_.find(key);
    return it == index_.end() ? nullptr : &items_[it->second].second;
  }
  const V& at(const std::string& key) const {
    const V* v = find(key);
    if (!v) throw ValueError(fmt::format("OrderedDict: no key '{}'", key));
    return *v;
  }
  const V& operator[](const std::string& key) const { return at(key); }
  std::vector<std::string> keys() const {
    std::vector<std::string> k;
    for (auto& it : items_) k.push_back(it.first);
    return k;
  }
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }
  auto begin() { return items_.begin(); }
  auto end() { return items_.end(); }
  const Item& item(size_t i) const { return items_.at(i); }

 private:
  std::vector<Item> items_;
  std::unordered_map<std::string, size_t> index_;
};

}  // namespace tessel
