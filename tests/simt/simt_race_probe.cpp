// simt_race_probe racy|fixed: a kernel that reads a neighbour's shared-memory
// slot without (racy) or with (fixed) __syncthreads. Built with -fsanitize=thread:
// TSan reports the race between the two emulated threads (fibers).
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
  ember::simt::set_worker_threads(2);
  std::vector<int> out(4 * 64);
  for (int launch = 0; launch < 3; ++launch)  // blocks reuse fibers and shared storage
    ember::launch(neighbour_kernel, dim3(4), dim3(64), 0, nullptr, out.data(), fixed);
  std::printf("finished\n");
  return 0;
}
