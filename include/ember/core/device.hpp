// Device: where a tensor lives and an op runs ("cpu" or "cuda:N").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace ember {

enum class DeviceType : uint8_t { cpu, cuda };

class Device {
 public:
  constexpr Device() = default;  // the CPU
  static constexpr Device cpu() { return Device(); }
  static constexpr Device cuda(int index = 0) { return Device(DeviceType::cuda, index); }

  // Accepts "cpu", "cuda" (meaning cuda:0) and "cuda:N"; throws ember::Error otherwise.
  static Device parse(std::string_view text);

  DeviceType type() const { return type_; }
  int index() const { return index_; }
  bool is_cpu() const { return type_ == DeviceType::cpu; }
  bool is_cuda() const { return type_ == DeviceType::cuda; }
  std::string to_string() const;

  friend constexpr bool operator==(Device a, Device b) {
    return a.type_ == b.type_ && a.index_ == b.index_;
  }

 private:
  constexpr Device(DeviceType type, int index) : type_(type), index_(index) {}
  DeviceType type_ = DeviceType::cpu;
  int index_ = 0;
};

// True when ember was compiled with its CUDA backend.
bool built_with_cuda();

// Number of usable CUDA devices: 0 without the CUDA build, a driver, or a GPU.
int cuda_device_count();

// Throws ember::Error explaining why `device` cannot be used (no CUDA build,
// no driver, no GPU, index out of range). Does nothing for the CPU.
void require_available(Device device);

// The device examples train on: cuda:0 when ember can train there, else the CPU.
// `reason` (optional) receives one line saying why the CPU was chosen.
Device default_device(std::string* reason = nullptr);

}  // namespace ember
