// memory::stats(device) and friends: the device's caching allocator without a cast.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "ember/core/allocator.hpp"
#include "ember/core/tensor.hpp"
#include "ember/memory/device_memory.hpp"
#include "ember/memory/trace_recording_adaptor.hpp"
#include "test_support.hpp"

namespace {

using ember::Device;
using ember::Tensor;
namespace memory = ember::memory;

TEST(DeviceMemory, StatsSummaryAndSnapshotOfTheCpuAllocator) {
  const Device cpu = Device::cpu();
  memory::reset_peak_stats(cpu);
  const int64_t before = memory::stats(cpu).allocated.current;
  {
    const Tensor t = Tensor::empty({1 << 20});  // 4 MiB
    EXPECT_GE(memory::stats(cpu).allocated.current - before, int64_t{4} << 20);
    EXPECT_GE(memory::stats(cpu).allocated.peak, before + (int64_t{4} << 20));
    EXPECT_NE(memory::snapshot(cpu).find("\"segments\""), std::string::npos);
    EXPECT_FALSE(memory::memory_summary(cpu).empty());
  }
  EXPECT_EQ(memory::stats(cpu).allocated.current, before);
  const int64_t reserved = memory::stats(cpu).reserved.current;
  memory::empty_cache(cpu);  // the freed 4 MiB went back
  EXPECT_LE(memory::stats(cpu).reserved.current, reserved - (int64_t{4} << 20));
  EXPECT_EQ(&memory::caching_allocator(cpu), &memory::caching_allocator(cpu));
}

TEST(DeviceMemory, ReleaseUnusedReturnsFreePagesAndKeepsLiveTensors) {
  const Device cpu = Device::cpu();
  memory::release_unused(cpu);
  const Tensor kept = Tensor::full({1 << 18}, 3.0);             // 1 MiB, live throughout
  { const Tensor phase = Tensor::zeros({int64_t{12} << 20}); }  // 48 MiB, freed at once
  const int64_t reserved = memory::stats(cpu).reserved.current;
  const size_t returned = memory::release_unused(cpu);
  EXPECT_GE(returned, size_t{32} << 20);
  EXPECT_EQ(memory::stats(cpu).reserved.current, reserved - static_cast<int64_t>(returned));
  EXPECT_EQ(memory::release_unused(cpu), 0u);  // nothing more to give
  EXPECT_EQ(kept.to_vector<float>()[(1 << 18) - 1], 3.0f);
}

TEST(DeviceMemory, LooksThroughARecorderAndRefusesOtherAllocators) {
  const Device cpu = Device::cpu();
  const auto previous = ember::allocator_for(cpu);
  memory::CachingAllocator& caching = memory::caching_allocator(cpu);
  const std::string path =
      (std::filesystem::temp_directory_path() / "ember_device_memory.trace").string();
  {
    auto recorder = memory::record_allocations(cpu, path);
    EXPECT_EQ(&memory::caching_allocator(cpu), &caching);
    ember::set_allocator(cpu, recorder->inner());
  }
  std::filesystem::remove(path);

  class Plain final : public ember::Allocator {
   public:
    void* allocate(size_t bytes, ember::StreamId) override { return std::malloc(bytes + 1); }
    void deallocate(void* p, size_t, ember::StreamId) noexcept override { std::free(p); }
    void record_stream(void*, ember::StreamId) override {}
  };
  ember::set_allocator(cpu, std::make_shared<Plain>());
  ember::testing::expect_error([&] { memory::stats(cpu); },
                               {"memory statistics of cpu", "not ember's CachingAllocator"});
  ember::set_allocator(cpu, previous);
  EXPECT_EQ(&memory::caching_allocator(cpu), &caching);
}

}  // namespace
