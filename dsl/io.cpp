#include "dsl/io.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <map>
#include <tuple>
#include <unordered_map>

#include "runtime/safetensors.h"

namespace tessel {
namespace {

constexpr const char* kKind = "tessel.kind";
constexpr const char* kKeys = "tessel.keys";
constexpr const char* kAliases = "tessel.aliases";

void write_entries(const std::vector<std::pair<std::string, Tensor>>& items, CheckpointKind kind,
                   const std::filesystem::path& path) {
  std::vector<Tensor> host;  // keeps the contiguous host copies alive while writing
  std::vector<safetensors::TensorView> views;
  // Tied names share memory: the same view of the same storage is stored once.
  std::map<std::tuple<const void*, int64_t, Strides, std::vector<int64_t>, DType>, std::string> stored;
  nlohmann::json aliases = nlohmann::json::object(), keys = nlohmann::json::array();
  for (const auto& [name, t] : items) {
    if (!t.defined() || t.impl()->kind == TensorImpl::Kind::uninitialized_parameter)
      throw CheckpointError(fmt::format("save '{}': tensor '{}' is {}; run a forward pass first so lazy layers have "
                                        "shapes", path.string(), name, t.defined() ? "an uninitialized parameter" : "undefined"));
    keys.push_back(name);
    const ir::BufferView& b = t.buffer();
    auto [it, fresh] = stored.try_emplace(std::make_tuple(static_cast<const void*>(b.storage.get()), b.offset, b.strides,
                                                          t.shape().dims, t.dtype()),
                                          name);
    if (!fresh) {
      aliases[name] = it->second;
      continue;
    }
    Tensor c = t.detach().cpu().contiguous();
    host.push_back(c);
    views.push_back({name, c.dtype(), c.shape().dims, c.buffer().bytes(c.dtype()),
                     static_cast<size_t>(c.numel()) * dtype_size(c.dtype())});
  }
  std::map<std::string, std::string> meta;
  meta[kKind] = kind == CheckpointKind::tensor ? "tensor" : kind == CheckpointKind::list ? "list" : "dict";
  meta[kKeys] = keys.dump();
  if (!aliases.empty()) meta[kAliases] = aliases.dump();
  safetensors::write_file(path, views, meta);
}

}  // namespace

void save(const Tensor& t, const std::filesystem::path& path) { write_entries({{"0", t}}, CheckpointKind::tensor, path); }

void save(const std::vector<Tensor>& ts, const std::filesystem::path& path) {
  std::vector<std::pair<std::string, Tensor>> items;
  for (size_t i = 0; i < ts.size(); ++i) items.emplace_back(std::to_string(i), ts[i]);
  write_entries(items, CheckpointKind::list, path);
}

void save(const OrderedDict<Tensor>& dict, const std::filesystem::path& path) {
  std::vector<std::pair<std::string, Tensor>> items(dict.begin(), dict.end());
  write_entries(items, CheckpointKind::dict, path);
}

void save(const std::map<std::string, Tensor>& dict, const std::filesystem::path& path) {
  std::vector<std::pair<std::string, Tensor>> items(dict.begin(), dict.end());
  write_entries(items, CheckpointKind::dict, path);
}

Checkpoint load(const std::filesystem::path& path, Device device) {
  safetensors::File f = safetensors::open(path);
  Checkpoint ck;
  const auto& meta = f.metadata();
  if (auto it = meta.find(kKind); it != meta.end()) {
    if (it->second == "tensor") ck.kind = CheckpointKind::tensor;
    else if (it->second == "list") ck.kind = CheckpointKind::list;
    else if (it->second != "dict")
      throw CheckpointError(fmt::format("checkpoint '{}': metadata {} is '{}', expected tensor, list or dict (rule: "
                                        "metadata)", path.string(), kKind, it->second));
  }
  std::unordered_map<std::string, Tensor> by_name;
  for (const auto& e : f.entries()) {
    Tensor t = empty(Shape(e.shape), e.dtype);
    if (e.nbytes) std::memcpy(t.buffer().bytes(e.dtype), e.data, e.nbytes);
    by_name.emplace(e.name, device.is_cpu() ? t : t.to(device));
  }
  nlohmann::json aliases = nlohmann::json::object();
  if (auto it = meta.find(kAliases); it != meta.end()) {
    aliases = nlohmann::json::parse(it->second, nullptr, false);
    if (!aliases.is_object())
      throw CheckpointError(fmt::format("checkpoint '{}': metadata {} is not a JSON object (rule: metadata)",
                                        path.string(), kAliases));
    for (auto& [alias, target] : aliases.items()) {
      if (!target.is_string() || !by_name.count(target.get<std::string>()))
        throw CheckpointError(fmt::format("checkpoint '{}': alias '{}' points to a tensor that is not in the file "
                                          "(rule: metadata)", path.string(), alias));
      if (by_name.count(alias))
        throw CheckpointError(fmt::format("checkpoint '{}': alias '{}' is also stored as a tensor (rule: metadata)",
                                          path.string(), alias));
    }
  }
  auto resolve = [&](const std::string& name) -> Tensor {
    if (auto it = by_name.find(name); it != by_name.end()) return it->second;
    if (aliases.contains(name)) return by_name.at(aliases[name].get<std::string>());
    throw CheckpointError(fmt::format("checkpoint '{}': key '{}' listed in {} is not in the file (rule: metadata)",
                                      path.string(), name, kKeys));
  };
  std::vector<std::string> order;
  if (auto it = meta.find(kKeys); it != meta.end()) {
    auto keys = nlohmann::json::parse(it->second, nullptr, false);
    if (!keys.is_array())
      throw CheckpointError(fmt::format("checkpoint '{}': metadata {} is not a JSON array (rule: metadata)",
                                        path.string(), kKeys));
    for (auto& k : keys) {
      if (!k.is_string())
        throw CheckpointError(fmt::format("checkpoint '{}': {} holds a non-string (rule: metadata)", path.string(), kKeys));
      order.push_back(k.get<std::string>());
    }
  } else {
    for (const auto& e : f.entries()) order.push_back(e.name);  // files from other tools: data order
  }
  for (const auto& name : order) {
    if (ck.entries.contains(name))
      throw CheckpointError(fmt::format("checkpoint '{}': key '{}' appears twice in {} (rule: metadata)", path.string(),
                                        name, kKeys));
    ck.entries.insert(name, resolve(name));
  }
  if (ck.entries.size() < by_name.size())
    throw CheckpointError(fmt::format("checkpoint '{}': {} lists {} keys but the file stores {} tensors (rule: metadata)",
                                      path.string(), kKeys, ck.entries.size(), by_name.size()));
  return ck;
}

Tensor Checkpoint::tensor() const {
  if (kind != CheckpointKind::tensor || entries.size() != 1)
    throw CheckpointError("load: this checkpoint holds a list or a dict, not one tensor; use load_list or load_dict");
  return entries.item(0).second;
}

std::vector<Tensor> Checkpoint::list() const {
  if (kind != CheckpointKind::list) throw CheckpointError("load: this checkpoint is not a list; use load_dict or load_tensor");
  std::vector<Tensor> out;
  for (auto& [k, v] : entries) out.push_back(v);
  return out;
}

Tensor load_tensor(const std::filesystem::path& path, Device device) { return load(path, device).tensor(); }
std::vector<Tensor> load_list(const std::filesystem::path& path, Device device) { return load(path, device).list(); }
OrderedDict<Tensor> load_dict(const std::filesystem::path& path, Device device) { return load(path, device).entries; }

}  // namespace tessel
