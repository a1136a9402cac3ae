// simt_race_probe racy|fixed|cross_block|atomics|static_shared_oob: (atomics: threads that all
// use atomics, which must not race) a kernel that reads a neighbour's
// shared-memory slot without (racy) or with (fixed) __syncthreads, a block that reads what
// another block writes, with one worker thread (cross_block), or writes a static __shared__
// array out of bounds. Built with -fsanitize=thread (TSan reports the race between the two emulated
// threads) and -fsanitize=bounds (the race-checking build checks shared-memory bounds too).
#include "ember/simt/prelude.hpp"
// clang-format off
#include "kernels/faults.cuh"
// clang-format on

#include <cstdio>
#include <cstring>
#include <vector>

#include "ember/core/launch.hpp"

int main(int argc, char** argv) {
  const bool fixed = argc > 1 && std::strcmp(argv[1], "fixed") == 0;
  if (argc > 1 && std::strcmp(argv[1], "static_shared_oob") == 0) {
    ember::simt::set_worker_threads(1);
    int result = 0;
    ember::launch(static_shared_oob_kernel, dim3(1), dim3(8, 4), 0, nullptr, &result, 1);
    std::printf("finished\n");
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "cross_block") == 0) {
    ember::simt::set_worker_threads(1);  // blocks run one after the other, yet unordered
    std::vector<int> out(2);
    ember::launch(cross_block_kernel, dim3(2), dim3(32), 0, nullptr, out.data());
    std::printf("finished\n");
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "atomics") == 0) {
    ember::simt::set_worker_threads(2);
    int count = 0;
    ember::launch(atomic_count_kernel, dim3(4), dim3(64), 0, nullptr, &count);
    std::printf("finished: %d\n", count);
    return count == 256 ? 0 : 1;
  }
  ember::simt::set_worker_threads(2);
  std::vector<int> out(4 * 64);
  for (int launch = 0; launch < 3; ++launch)  // blocks reuse fibers and shared storage
    ember::launch(neighbour_kernel, dim3(4), dim3(64), 0, nullptr, out.data(), fixed);
  std::printf("finished\n");
  return 0;
}
