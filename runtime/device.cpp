#include "runtime/device.h"

#include <fmt/format.h>

#include "runtime/cuda/driver.h"
#include "runtime/errors.h"

namespace tessel {

std::string Device::str() const { return is_cpu() ? std::string("cpu") : fmt::format("cuda:{}", index); }

Device cpu() { return Device{}; }
Device gpu(int i) { return Device{Device::Kind::cuda, i}; }

int num_gpus() { return cuda::device_count(); }

Device try_gpu(int i) { return num_gpus() >= i + 1 ? gpu(i) : cpu(); }

std::vector<Device> try_all_gpus() {
  std::vector<Device> out;
  for (int i = 0; i < num_gpus(); ++i) out.push_back(gpu(i));
  if (out.empty()) out.push_back(cpu());
  return out;
}

void check_device_exists(const Device& d) {
  if (d.is_cpu()) return;
  int n = num_gpus();
  if (d.index < 0 || d.index >= n)
    throw DeviceError(fmt::format("device {} does not exist: this machine has {} GPU(s); use try_gpu({}) to fall back to the CPU",
                                  d.str(), n, d.index));
}

}  // namespace tessel
