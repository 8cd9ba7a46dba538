// Where a tensor's memory lives. Tensors are created on the CPU unless a
// device is given; transfers between devices are always explicit.
#pragma once

#include <string>
#include <vector>

namespace tessel {

/// A device: the host CPU, or one CUDA GPU.
///   Tensor x = ones({2, 3}, try_gpu());   // GPU 0 when there is one, else CPU
struct Device {
  enum class Kind : unsigned char { cpu, cuda };
  Kind kind = Kind::cpu;
  int index = 0;

  bool is_cpu() const { return kind == Kind::cpu; }
  bool is_cuda() const { return kind == Kind::cuda; }
  /// "cpu" or "cuda:1" (PyTorch's spelling).
  std::string str() const;
  friend bool operator==(const Device&, const Device&) = default;
};

/// The host CPU.
Device cpu();
/// GPU `i`; names a device even when it is absent (using it raises DeviceError).
Device gpu(int i = 0);
/// How many CUDA GPUs this process can use (0 without a driver or a GPU).
int num_gpus();
/// GPU `i` if it exists, else the CPU.
Device try_gpu(int i = 0);
/// All GPUs, or `{cpu()}` when there are none.
std::vector<Device> try_all_gpus();

/// Throws DeviceError unless `d` exists on this machine.
void check_device_exists(const Device& d);

}  // namespace tessel
