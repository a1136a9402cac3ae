#include "dist_test_support.hpp"

namespace ember::testing {
std::vector<Device> test_devices() {
  return {Device::cpu()};
}
}  // namespace ember::testing
