#include "ember/core/allocator.hpp"
#include "ember/core/threads.hpp"

#include <cstdlib>
#include <map>
#include <mutex>

#include "cuda_backend.hpp"
#include "default_allocator_hook.hpp"
#include "ember/core/error.hpp"

namespace ember {
namespace {

struct Registry {
  std::mutex mutex;
  std::map<std::pair<int, int>, std::shared_ptr<Allocator>> allocators;
};
Registry& registry() {
  static Registry r;
  return r;
}
std::pair<int, int> key_of(Device d) {
  return {static_cast<int>(d.type()), d.index()};
}

}  // namespace

std::shared_ptr<Allocator> allocator_for(Device device) {
  detail::apply_thread_environment();  // the thread count, on each thread that allocates
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  auto& slot = r.allocators[key_of(device)];
  if (!slot) {
    if (!device.is_cpu()) require_available(device);
    slot = detail::make_device_allocator(device);
  }
  return slot;
}

void set_allocator(Device device, std::shared_ptr<Allocator> allocator) {
  EMBER_CHECK(allocator != nullptr, "set_allocator: the allocator for {} is null",
              device.to_string());
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.allocators[key_of(device)] = std::move(allocator);
}

}  // namespace ember
