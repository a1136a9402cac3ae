// Runs one block of a grid on the calling OS thread. Private to src/simt.
#pragma once

#include <functional>

#include "ember/simt/runtime.hpp"

namespace ember::simt {
// Throws the block's first error, a deadlock or a barrier divergence as ember::Error.
void run_block(const LaunchConfig& config, const std::function<void()>& body, uint3 block_idx,
               void* dynamic_shared);
}  // namespace ember::simt
