#include "runtime/storage.h"

#include <fmt/format.h>

#include "runtime/errors.h"
#include "runtime/host_allocator.h"

namespace tessel {
namespace {
DeviceMemoryHooks g_hooks;
}

void set_device_memory_hooks(DeviceMemoryHooks hooks) { g_hooks = hooks; }

std::shared_ptr<Storage> Storage::allocate(size_t nbytes, Device device) {
  std::shared_ptr<Storage> s(new Storage);
  s->nbytes_ = nbytes;
  s->device_ = device;
  if (device.is_cpu()) {
    s->data_ = host_allocate(nbytes);
    void* p = s->data_;
    s->release_ = [p, nbytes] { host_free(p, nbytes); };
  } else {
    check_device_exists(device);
    if (!g_hooks.allocate)
      throw DeviceError(fmt::format("cannot allocate on {}: the CUDA runtime is not initialized", device.str()));
    s->data_ = g_hooks.allocate(nbytes, device.index);
    void* p = s->data_;
    int idx = device.index;
    auto free_fn = g_hooks.free;
    s->release_ = [p, nbytes, idx, free_fn] { free_fn(p, nbytes, idx); };
  }
  return s;
}

std::shared_ptr<Storage> Storage::wrap(void* data, size_t nbytes, Device device, std::function<void()> release) {
  std::shared_ptr<Storage> s(new Storage);
  s->data_ = data;
  s->nbytes_ = nbytes;
  s->device_ = device;
  s->release_ = std::move(release);
  return s;
}

Storage::~Storage() {
  if (release_) release_();
}

}  // namespace tessel
