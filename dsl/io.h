// Saving and loading tensors and state dicts as safetensors files, which
// PyTorch and Hugging Face tools read (no pickle, no code in files).
//   save(net->state_dict(), "mlp.params");
//   auto fresh = make_mlp();                       // lazy layers are fine
//   fresh->load_state_dict(load_dict("mlp.params"));
// Writes are atomic (temp file, fsync, rename); reads validate every header
// field before allocating and raise CheckpointError naming the rule broken.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "dsl/ordered_dict.h"
#include "dsl/tensor.h"

namespace tessel {

/// What a checkpoint file holds, as recorded in its metadata.
enum class CheckpointKind { tensor, list, dict };

void save(const Tensor& t, const std::filesystem::path& path);
void save(const std::vector<Tensor>& ts, const std::filesystem::path& path);
/// Names sharing one tensor (tied parameters) are stored once; the other
/// names are recorded as aliases, and loading gives them back the same tensor.
void save(const OrderedDict<Tensor>& dict, const std::filesystem::path& path);
void save(const std::map<std::string, Tensor>& dict, const std::filesystem::path& path);

/// Everything in a checkpoint, in the order it was saved.
struct Checkpoint {
  CheckpointKind kind = CheckpointKind::dict;
  OrderedDict<Tensor> entries;
  Tensor tensor() const;              // kind tensor
  std::vector<Tensor> list() const;   // kind list
  const OrderedDict<Tensor>& dict() const { return entries; }
};

Checkpoint load(const std::filesystem::path& path, Device device = cpu());
Tensor load_tensor(const std::filesystem::path& path, Device device = cpu());
std::vector<Tensor> load_list(const std::filesystem::path& path, Device device = cpu());
OrderedDict<Tensor> load_dict(const std::filesystem::path& path, Device device = cpu());

}  // namespace tessel
