#include "dist_test_support.hpp"

namespace ember::testing {
// Emulated cuda:0 in every rank's process: the NCCL communicator, over ember's NCCL shim.
std::vector<Device> test_devices() {
  return {Device::cuda(0)};
}
}  // namespace ember::testing
