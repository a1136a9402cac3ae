// ember_tests runs the device cases (tests/<layer>/*_cases.cpp) on the CPU and, in a CUDA build
// on a machine with a GPU, on the real cuda:0 too.
#include "ember/core/device.hpp"
#include "ops/device_cases.hpp"

namespace ember::testing {
std::vector<Device> test_devices() {
  std::vector<Device> devices = {Device::cpu()};
#if EMBER_WITH_CUDA
  if (cuda_device_count() > 0) devices.push_back(Device::cuda(0));
#endif
  return devices;
}
}  // namespace ember::testing
