#include "ember/core/device.hpp"

#include <charconv>
#include <mutex>

#include "cuda_backend.hpp"
#include "ember/core/error.hpp"

namespace ember {

Device Device::parse(std::string_view text) {
  if (text == "cpu") return cpu();
  if (text == "cuda") return cuda(0);
  if (text.starts_with("cuda:") && text.size() > 5) {
    const std::string_view digits = text.substr(5);
    int index = -1;
    // Digits only: from_chars would take "-0" (and "+1" is not CUDA's spelling either).
    const bool all_digits = digits.find_first_not_of("0123456789") == std::string_view::npos;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (all_digits && ec == std::errc() && end == digits.data() + digits.size()) {
      return cuda(index);
    }
  }
  EMBER_THROW("unknown device '{}': expected 'cpu', 'cuda' or 'cuda:N' with N >= 0", text);
}

std::string Device::to_string() const {
  return is_cpu() ? std::string("cpu") : fmt::format("cuda:{}", index_);
}

bool built_with_cuda() {
  return EMBER_WITH_CUDA != 0;
}

namespace {
struct CudaProbe {
  int count = 0;
  std::string reason;
};
const CudaProbe& probe() {
  static const CudaProbe result = [] {
    CudaProbe p;
    p.count = cuda_backend::device_count(&p.reason);
    return p;
  }();
  return result;
}
}  // namespace

int cuda_device_count() {
  return probe().count;
}

void require_available(Device device) {
  if (device.is_cpu()) return;
  const CudaProbe& p = probe();
  EMBER_CHECK(p.count > 0, "device {} is not available: {}. Use Device::cpu() (\"cpu\") instead",
              device.to_string(), p.reason);
  EMBER_CHECK(device.index() < p.count, "device {} is not available: this machine has {} GPU(s)",
              device.to_string(), p.count);
}

Device default_device(std::string* reason) {
  const CudaProbe& p = probe();
  if (p.count == 0) {
    if (reason) *reason = p.reason;
    return Device::cpu();
  }
  return Device::cuda(0);
}

}  // namespace ember
