// ember_tests runs the device cases (tests/ops/*_cases.cpp) on the CPU.
#include "ops/device_cases.hpp"

namespace ember::testing {
std::vector<Device> test_devices() {
  return {Device::cpu()};
}
}  // namespace ember::testing
