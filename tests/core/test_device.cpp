#include <gtest/gtest.h>

#include <string>

#include "ember/core/device.hpp"
#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"
#include "test_support.hpp"

namespace {

using ember::testing::error_message;

using ember::Device;

TEST(DeviceParse, AcceptsCpuAndCuda) {
  EXPECT_EQ(Device::parse("cpu"), Device::cpu());
  EXPECT_TRUE(Device::parse("cpu").is_cpu());
  EXPECT_EQ(Device::parse("cuda"), Device::cuda(0));
  EXPECT_EQ(Device::parse("cuda:0"), Device::cuda(0));
  const Device d = Device::parse("cuda:1");
  EXPECT_TRUE(d.is_cuda());
  EXPECT_EQ(d.index(), 1);
  EXPECT_EQ(d.type(), ember::DeviceType::cuda);
  EXPECT_EQ(Device::parse("cuda:12").index(), 12);
}

TEST(DeviceParse, ToStringRoundTrips) {
  EXPECT_EQ(Device::cpu().to_string(), "cpu");
  EXPECT_EQ(Device().to_string(), "cpu");
  EXPECT_EQ(Device::cuda().to_string(), "cuda:0");
  EXPECT_EQ(Device::cuda(3).to_string(), "cuda:3");
  for (const Device d : {Device::cpu(), Device::cuda(0), Device::cuda(7)}) {
    EXPECT_EQ(Device::parse(d.to_string()), d);
  }
  EXPECT_FALSE(Device::cuda(0) == Device::cuda(1));
  EXPECT_FALSE(Device::cpu() == Device::cuda(0));
}

TEST(DeviceParse, RejectsOtherTextListingWhatIsAccepted) {
  for (const char* text : {"gpu", "cuda:", "cuda:-1", "cuda:-0", "cuda:1x", "CPU", "", " cpu",
                           "cuda:+1", "cuda:99999999999", "cpu:0"}) {
    const std::string message = error_message([&] { Device::parse(text); });
    EXPECT_NE(message.find(std::string("'") + text + "'"), std::string::npos) << message;
    for (const char* accepted : {"'cpu'", "'cuda'", "'cuda:N'"}) {
      EXPECT_NE(message.find(accepted), std::string::npos) << text << ": " << message;
    }
  }
}

TEST(DeviceAvailability, CpuIsAlwaysAvailable) {
  EXPECT_NO_THROW(ember::require_available(Device::cpu()));
  EXPECT_GE(ember::cuda_device_count(), 0);
  EXPECT_EQ(ember::built_with_cuda(), EMBER_WITH_CUDA != 0);
}

TEST(DeviceAvailability, NoGpuMeansCleanErrors) {
  if (ember::cuda_device_count() > 0) GTEST_SKIP() << "this machine has a usable GPU";
  EXPECT_EQ(ember::cuda_device_count(), 0);
  for (const Device d : {Device::cuda(0), Device::cuda(1)}) {
    const std::string message = error_message([&] { ember::require_available(d); });
    EXPECT_NE(message.find("device " + d.to_string() + " is not available"), std::string::npos)
        << message;
    EXPECT_NE(message.find("cpu"), std::string::npos) << "should suggest the cpu: " << message;
  }
  EXPECT_NE(error_message([] {
              ember::Tensor::empty({2}, ember::DType::f32, Device::cuda());
            }).find("not available"),
            std::string::npos);
  EXPECT_NE(error_message([] {
              ember::Tensor::zeros({2}, ember::DType::f16, Device::cuda());
            }).find("not available"),
            std::string::npos);
  EXPECT_NE(error_message([] { ember::Stream stream(Device::cuda()); }).find("not available"),
            std::string::npos);
  EXPECT_NE(error_message([] { ember::Event event(Device::cuda()); }).find("not available"),
            std::string::npos);
  const ember::Tensor host = ember::Tensor::zeros({3});
  EXPECT_NE(error_message([&] { (void)host.to(Device::cuda()); }).find("not available"),
            std::string::npos);
}

TEST(DeviceAvailability, DefaultDeviceFallsBackToCpuWithAReason) {
  if (ember::cuda_device_count() > 0) GTEST_SKIP() << "this machine has a usable GPU";
  std::string why;
  EXPECT_EQ(ember::default_device(&why), Device::cpu());
  EXPECT_FALSE(why.empty());
  EXPECT_EQ(ember::default_device(), Device::cpu());  // the reason is optional
}

}  // namespace
