// 4 threads allocate, write, record_stream and free at random on one
// CachingAllocator over host memory; built with -fsanitize=thread.
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "ember/memory/caching_allocator.hpp"
#include "ember/memory/detail/verify.hpp"
#include "ember/memory/host_upstream.hpp"

int main() {
  using namespace ember::memory;
  AllocatorConfig config;
  config.expandable_segments = false;
  auto allocator =
      std::make_shared<CachingAllocator>(std::make_shared<HostUpstream>(), nullptr, config);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t) + 1);
      std::vector<std::pair<unsigned char*, size_t>> live;
      for (int i = 0; i < 4000; ++i) {
        if (live.empty() || rng() % 3 != 0) {
          const size_t bytes = 1 + rng() % (rng() % 8 == 0 ? (3u << 20) : 4096u);
          auto* p = static_cast<unsigned char*>(allocator->allocate(bytes, t % 2));
          std::memset(p, t, bytes < 64 ? bytes : 64);
          if (rng() % 5 == 0) allocator->record_stream(p, 7);
          live.emplace_back(p, bytes);
        } else {
          const size_t k = rng() % live.size();
          if (live[k].first[0] != t) std::abort();
          allocator->free(live[k].first);
          live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
        }
        if (i % 1000 == 0) {
          (void)allocator->stats();
          (void)allocator->snapshot();
          if (t == 0) allocator->empty_cache();
        }
      }
      for (auto& [p, n] : live) allocator->free(p);
    });
  }
  for (auto& th : threads) th.join();
  allocator->empty_cache();
  ember::memory::detail::verify_invariants(*allocator);
  const AllocatorStats s = allocator->stats();
  if (s.allocated.current != 0 || s.reserved.current != 0) {
    std::fprintf(stderr, "expected everything freed, found %lld allocated, %lld reserved\n",
                 static_cast<long long>(s.allocated.current),
                 static_cast<long long>(s.reserved.current));
    return 1;
  }
  std::printf("finished: %lld allocations\n", static_cast<long long>(s.allocations));
  return 0;
}
