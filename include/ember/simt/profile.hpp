// The device profile the emulator validates launches against (limits CUDA
// enforces at launch time), which the runtime shim also reports
// (cudaGetDeviceProperties, cudaDeviceGetAttribute, cudaMemGetInfo).
// Default: one H100 SXM (80 GB HBM3, compute capability 9.0).
#pragma once

#include <cstddef>
#include <string>

namespace ember::simt {

struct DeviceProfile {
  std::string name = "NVIDIA H100 80GB HBM3";
  unsigned max_threads_per_block = 1024;
  unsigned max_block_x = 1024, max_block_y = 1024, max_block_z = 64;
  unsigned max_grid_x = 2147483647u, max_grid_y = 65535, max_grid_z = 65535;
  // Dynamic shared memory a launch may ask for without cudaFuncSetAttribute.
  size_t shared_bytes_per_block = 48 * 1024;
  unsigned warp_size = 32;

  // ---- reported by the runtime shim (include/ember/simt/shim/cuda_runtime.h) ----
  int device_count = 1;  // cudaGetDeviceCount; 0 makes it return cudaErrorNoDevice
  int major = 9, minor = 0;
  // What cudaMalloc may hand out per device. Emulated device memory is host
  // memory, so tests shrink this to provoke out-of-memory.
  size_t total_global_mem = size_t{81559} * 1024 * 1024;
  int multiprocessor_count = 132;
  // The most dynamic shared memory cudaFuncSetAttribute may allow a kernel.
  size_t shared_bytes_per_block_optin = 227 * 1024;
  size_t shared_bytes_per_multiprocessor = 228 * 1024;
  size_t reserved_shared_bytes_per_block = 1024;
  int regs_per_block = 65536;
  int regs_per_multiprocessor = 65536;
  int max_threads_per_multiprocessor = 2048;
  int max_blocks_per_multiprocessor = 32;
  size_t total_const_mem = 64 * 1024;
  int l2_cache_size = 50 * 1024 * 1024;
  int persisting_l2_cache_max_size = 30 * 1024 * 1024;
  int memory_bus_width = 5120;  // bits
  int clock_rate_khz = 1980000;
  int memory_clock_rate_khz = 2619000;
  int async_engine_count = 3;
};

const DeviceProfile& device_profile();
void set_device_profile(const DeviceProfile& profile);

}  // namespace ember::simt
