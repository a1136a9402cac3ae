// Op tests written once and run on every device a test binary has: ember_tests runs them on
// the CPU (test_devices_cpu.cpp), ember_emulated_tests on emulated cuda:0
// (simt/emulated_backend/test_devices_emulated.cpp). A case file, tests/ops/<op>_cases.cpp,
// holds TEST_P(OnDevice..., ...) bodies and one INSTANTIATE_EMBER_DEVICES(suite). Every op of a
// case runs on stream(), the device's current stream, where its tensors are allocated: ember's
// contract leaves ordering across streams to the caller (docs/streams.md), and the emulated
// binary runs each case with lazy and deferred streams and the race checker.
#pragma once

#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <vector>

#include "ember/core/denormals.hpp"
#include "ember/core/device.hpp"
#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"

namespace ember {
// gtest prints a Device parameter by name.
inline void PrintTo(const Device& device, std::ostream* os) {
  *os << device.to_string();
}
}  // namespace ember

namespace ember::testing {

std::vector<Device> test_devices();  // defined once per test binary

class OnDevice : public ::testing::TestWithParam<Device> {
 protected:
  Device device() const { return GetParam(); }
  // The CPU's stream, or the device's current stream.
  Stream stream() const { return device().is_cpu() ? Stream() : current_stream(device()); }
  // t on device(). On the CPU that is t itself (the same storage): clone before on(...) a tensor
  // an op will write when another result is to be compared with it.
  Tensor on(const Tensor& t) const { return t.to(device()); }
  // Whether device() runs transcendental math (exp, GELU) with the host's own code: the CPU, and
  // the emulator, where device code takes the host path. There cases demand the host's bits; a
  // real GPU's expf and contractions differ by an ulp or two, which they allow there.
  // The absolute error a result near f32's underflow may carry: on the CPU, which flushes
  // subnormals to zero by default (core/denormals.hpp), a result whose computation passes through
  // a subnormal (silu(-88) = -88 * exp(-88) / ..., exp(-88) being subnormal) may come out zero
  // while the exact one is as large as ~100 * 2^-126; a GPU keeps subnormals.
  double underflow_slack() const { return device().is_cpu() && flush_denormals() ? 1e-35 : 1e-37; }
  bool host_math() const {
#if defined(EMBER_SIMT)
    return true;
#else
    return device().is_cpu();
#endif
  }
};

inline std::string device_test_name(const ::testing::TestParamInfo<Device>& info) {
  return info.param.is_cpu() ? "cpu" : "cuda" + std::to_string(info.param.index());
}

}  // namespace ember::testing

#define INSTANTIATE_EMBER_DEVICES(suite)                                                        \
  INSTANTIATE_TEST_SUITE_P(Devices, suite, ::testing::ValuesIn(ember::testing::test_devices()), \
                           ember::testing::device_test_name)
