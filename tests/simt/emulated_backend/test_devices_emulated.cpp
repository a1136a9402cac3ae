// ember_emulated_tests runs the device cases (tests/ops/*_cases.cpp) on emulated cuda:0.
#include "ops/device_cases.hpp"

namespace ember::testing {
std::vector<Device> test_devices() {
  return {Device::cuda(0)};
}
}  // namespace ember::testing
