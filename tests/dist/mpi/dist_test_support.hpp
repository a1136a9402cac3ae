// The multi-process tests (run under mpirun by ctest): one communicator over every rank, shared
// by the tests of a binary, and helpers that compare values across ranks. The device parameter
// is the op tests' (ops/device_cases.hpp): each binary defines test_devices().
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "ember/dist/communicator.hpp"
#include "ops/device_cases.hpp"

namespace ember::testing {

dist::Communicator& world();  // made by main()

// Every rank's `mine` (the same length on every rank), in rank order, through the CPU.
std::vector<std::vector<float>> gather_all(const std::vector<float>& mine);

class DistOnDevice : public OnDevice {
 protected:
  int rank() const { return world().rank(); }
  int ranks() const { return world().world_size(); }
};

}  // namespace ember::testing

#define INSTANTIATE_DIST_DEVICES(suite) INSTANTIATE_EMBER_DEVICES(suite)
