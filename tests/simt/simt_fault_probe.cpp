// simt_fault_probe <case>: runs a faulty kernel that must stop the process
// (UBSan bounds checks abort it); ctest checks the exit code and the message.
#include "ember/simt/prelude.hpp"
// clang-format off
#include "kernels/faults.cuh"
// clang-format on

#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <memory>

#include "ember/core/launch.hpp"
#include "ember/memory/caching_allocator.hpp"
#include "ember/memory/cuda_stream_events.hpp"
#include "ember/memory/cuda_upstream.hpp"

int main(int argc, char** argv) {
  ember::simt::set_worker_threads(1);
  int out = 0;
  const char* which = argc > 1 ? argv[1] : "";
  if (std::strcmp(which, "static_shared_oob") == 0) {
    ember::launch(static_shared_oob_kernel, dim3(1), dim3(8, 4), 0, nullptr, &out, 1);
  } else if (std::strcmp(which, "static_shared_ok") == 0) {
    ember::launch(static_shared_oob_kernel, dim3(1), dim3(8, 4), 0, nullptr, &out, 0);
  } else if (std::strcmp(which, "misaligned_vector") == 0 ||
             std::strcmp(which, "aligned_vector") == 0) {
    alignas(16) static float data[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    float sums[4] = {};
    const float* p = data + (std::strcmp(which, "misaligned_vector") == 0 ? 1 : 4);
    ember::launch(vector_load_kernel, dim3(1), dim3(4), 0, nullptr, p, sums);
    std::printf("sum %g\n", static_cast<double>(sums[0]));
  } else if (std::strcmp(which, "global_oob") == 0 || std::strcmp(which, "global_ok") == 0) {
    float* p = nullptr;
    if (cudaMalloc(&p, 1000 * sizeof(float)) != cudaSuccess) return 2;
    // 1000 floats fit; 5000 run thousands of bytes past the end, into the guard page.
    const int n = std::strcmp(which, "global_oob") == 0 ? 5000 : 1000;
    ember::launch(write_n_kernel, dim3(1), dim3(64), 0, nullptr, p, n);
    cudaFree(p);
  } else if (std::strcmp(which, "allocator_block_oob") == 0) {
    // A caching allocator with debug_guard: each block is a cudaMalloc allocation of its own.
    ember::memory::AllocatorConfig config;
    config.debug_guard = true;
    ember::memory::CachingAllocator cache(std::make_shared<ember::memory::CudaUpstream>(0), nullptr,
                                          config, ember::memory::make_cuda_stream_events(0));
    void* keep = cache.allocate(4096, 0);  // a neighbour: the overrun must not land in it
    auto* p = static_cast<float*>(cache.allocate(1024 * sizeof(float), 0));
    ember::launch(write_n_kernel, dim3(1), dim3(64), 0, nullptr, p, 1024 + 2048);
    cudaDeviceSynchronize();
    cache.free(p);
    cache.free(keep);
  } else {
    std::fprintf(stderr,
                 "usage: simt_fault_probe static_shared_oob|static_shared_ok|misaligned_vector|"
                 "aligned_vector|global_oob|global_ok|allocator_block_oob\n");
    return 2;
  }
  std::printf("finished\n");
  return 0;
}
