// profile::Trace on emulated cuda:0: the emulator's streams add each kernel, copy and library call
// that runs while the trace records as a device interval on its stream's track, named (a kernel by
// its name without template and parameter lists), one after another on each stream; the op
// that launched it is a host range. With streams lazy, a kernel runs when a host wait needs it,
// after its op's range has ended, as on a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "ember/core/profile.hpp"
#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"
#include "ember/ops/elementwise.hpp"
#include "ember/ops/matmul.hpp"

namespace {

using ember::Device;
using ember::DType;
using ember::Stream;
using ember::Tensor;
using ember::profile::Trace;

TEST(EmulatedTrace, KernelsAndCopiesAreDeviceIntervalsOnTheirStreams) {
  Stream stream(Device::cuda(0)), other(Device::cuda(0));
  const Tensor a = Tensor::full({32, 40}, 1.5, DType::f32, stream);
  const Tensor b = Tensor::full({40, 24}, 2.0, DType::f32, stream);
  Tensor c = Tensor::empty({32, 24}, DType::f32, stream);
  const Tensor x = Tensor::full({1000}, 3.0, DType::f32, other);
  Tensor y = Tensor::empty({1000}, DType::f32, other);
  stream.synchronize();
  other.synchronize();

  Trace trace;
  trace.start();
  EXPECT_EQ(trace.device_intervals(), "the SIMT emulator's streams");
  ember::ops::matmul(stream, c.view(), a.view(), b.view());
  ember::ops::gelu_forward(other, y.view(), x.view());
  const std::vector<float> host = c.to_vector<float>();  // a device-to-host copy, and a wait
  other.synchronize();
  trace.stop();
  EXPECT_EQ(host[0], 1.5f * 2.0f * 40);

  const auto events = trace.events();
  std::vector<Trace::Event> device, ops;
  for (const auto& e : events) (e.device ? device : ops).push_back(e);
  const auto op = [&](const std::string& name) {
    return std::find_if(ops.begin(), ops.end(), [&](const auto& e) { return e.name == name; });
  };
  ASSERT_NE(op("matmul"), ops.end());
  ASSERT_NE(op("gelu_forward"), ops.end());
  ASSERT_GE(device.size(), 3u);  // the product, GELU, the copy back
  uint64_t matmul_stream = 0, gelu_stream = 0;
  bool copy = false;
  for (const auto& e : device) {
    EXPECT_FALSE(e.name.empty());
    EXPECT_EQ(e.name.find('('), std::string::npos) << e.name;
    EXPECT_GE(e.start_ns, op("matmul")->start_ns) << e.name;  // ran after its launch
    if (std::string(e.category) == "copy") copy = true;
    if (e.name.find("gelu") != std::string::npos || e.name.find("map") != std::string::npos) {
      gelu_stream = e.thread;
    } else if (std::string(e.category) != "copy") {
      matmul_stream = e.thread;
    }
  }
  EXPECT_TRUE(copy);
  EXPECT_NE(matmul_stream, gelu_stream);  // each stream its own track
  // A stream runs its work one item after another.
  for (const uint64_t s : {matmul_stream, gelu_stream}) {
    std::vector<Trace::Event> on;
    for (const auto& e : device) {
      if (e.thread == s) on.push_back(e);
    }
    std::sort(on.begin(), on.end(), [](auto& l, auto& r) { return l.start_ns < r.start_ns; });
    for (size_t i = 1; i < on.size(); ++i) {
      EXPECT_LE(on[i - 1].start_ns + on[i - 1].duration_ns, on[i].start_ns);
    }
  }
}

TEST(EmulatedTrace, NothingIsRecordedWithoutATrace) {
  Stream stream(Device::cuda(0));
  const Tensor x = Tensor::full({64}, 1.0, DType::f32, stream);
  Tensor y = Tensor::empty({64}, DType::f32, stream);
  Trace trace;
  trace.start();
  trace.stop();
  ember::ops::gelu_forward(stream, y.view(), x.view());
  stream.synchronize();
  EXPECT_TRUE(trace.events().empty());
}

}  // namespace
