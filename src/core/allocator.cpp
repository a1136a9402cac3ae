#include "ember/core/allocator.hpp"

#include <cstdlib>
#include <map>
#include <mutex>

#include "cuda_backend.hpp"
#include "ember/core/error.hpp"

namespace ember {
namespace {

// 64-byte aligned host memory: a cache line, and enough for AVX-512 loads.
class HostAllocator final : public Allocator {
 public:
  void* allocate(size_t bytes) override {
    constexpr size_t kAlign = 64;
    const size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
    void* ptr = std::aligned_alloc(kAlign, rounded == 0 ? kAlign : rounded);
    EMBER_CHECK(ptr != nullptr, "host allocation of {} bytes failed: out of memory", bytes);
    return ptr;
  }
  void deallocate(void* ptr, size_t) noexcept override { std::free(ptr); }
};

class CudaAllocator final : public Allocator {
 public:
  explicit CudaAllocator(int device) : device_(device) {}
  void* allocate(size_t bytes) override {
    return cuda_backend::malloc(bytes == 0 ? 1 : bytes, device_);
  }
  void deallocate(void* ptr, size_t) noexcept override { cuda_backend::free(ptr, device_); }

 private:
  int device_;
};

struct Registry {
  std::mutex mutex;
  std::map<std::pair<int, int>, std::shared_ptr<Allocator>> allocators;
};
Registry& registry() {
  static Registry r;
  return r;
}
std::pair<int, int> key_of(Device d) { return {static_cast<int>(d.type()), d.index()}; }

}  // namespace

std::shared_ptr<Allocator> allocator_for(Device device) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  auto& slot = r.allocators[key_of(device)];
  if (!slot) {
    if (device.is_cpu()) {
      slot = std::make_shared<HostAllocator>();
    } else {
      require_available(device);
      slot = std::make_shared<CudaAllocator>(device.index());
    }
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
