// Test hook: checks a CachingAllocator's internal invariants (blocks tile their
// segments, pools hold exactly the free blocks, no free neighbours, stats match
// the blocks). Throws ember::Error naming the first broken invariant.
#pragma once

namespace ember::memory {
class CachingAllocator;
namespace detail {
void verify_invariants(const CachingAllocator& allocator);
}  // namespace detail
}  // namespace ember::memory
