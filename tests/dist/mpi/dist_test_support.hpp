// The multi-process tests (run under mpirun by ctest): one communicator over every rank, shared
// by the tests of a binary, and helpers that compare values across ranks.
#pragma once

#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <vector>

#include "ember/core/device.hpp"
#include "ember/core/tensor.hpp"
#include "ember/dist/communicator.hpp"

namespace ember {
// gtest prints a Device parameter by name.
inline void PrintTo(const Device& device, std::ostream* os) {
  *os << device.to_string();
}
}  // namespace ember

namespace ember::testing {

std::vector<Device> test_devices();  // defined once per test binary: where the cases run
dist::Communicator& world();         // made by main()

// Every rank's `mine` (the same length on every rank), in rank order, through the CPU.
std::vector<std::vector<float>> gather_all(const std::vector<float>& mine);

class DistOnDevice : public ::testing::TestWithParam<Device> {
 protected:
  Device device() const { return GetParam(); }
  Stream stream() const { return device().is_cpu() ? Stream() : current_stream(device()); }
  int rank() const { return world().rank(); }
  int ranks() const { return world().world_size(); }
};

inline std::string dist_device_name(const ::testing::TestParamInfo<Device>& info) {
  return info.param.is_cpu() ? "cpu" : "cuda" + std::to_string(info.param.index());
}

}  // namespace ember::testing

#define INSTANTIATE_DIST_DEVICES(suite)                                                         \
  INSTANTIATE_TEST_SUITE_P(Devices, suite, ::testing::ValuesIn(ember::testing::test_devices()), \
                           ember::testing::dist_device_name)
