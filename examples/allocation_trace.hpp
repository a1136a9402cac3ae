// --record-allocations FILE, shared by the training examples: every Tensor allocation on the
// training device, from before the model is made to the end of the run, as an allocation trace
// (docs/memory.md; a name ending in .gz is compressed) that bench_allocator replays.
#pragma once

#include <cstdio>
#include <exception>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "ember/core/allocator.hpp"
#include "ember/core/device.hpp"
#include "ember/memory/trace_recording_adaptor.hpp"

namespace example {

constexpr const char* kRecordUsage =
    R"(  --record-allocations FILE  write every allocation on the device to FILE (an allocation
                     trace for bench_allocator; .gz compresses; under mpirun, rank N > 0 writes
                     FILE with .rankN before its .trace)
)";

// A program's command line, one string (for a trace's header).
inline std::string command_line(int argc, char** argv) {
  std::vector<std::string> words(argv, argv + argc);
  if (!words.empty()) words[0] = std::filesystem::path(words[0]).filename().string();
  std::string line;
  for (const std::string& w : words) line += (line.empty() ? "" : " ") + w;
  return line;
}

// Rank r > 0 of several records into its own file: ".rank<r>" goes into the file name (not a
// directory's), before ".trace" when the name has it, else before a final ".gz" (so the file
// stays compressed), else at the end.
inline std::string rank_trace_path(const std::string& path, int rank, int ranks) {
  if (ranks <= 1 || rank == 0) return path;
  const std::filesystem::path p(path);
  std::string name = p.filename().string();
  const std::string tag = fmt::format(".rank{}", rank);
  size_t at = name.rfind(".trace");
  if (at == std::string::npos && name.ends_with(".gz")) at = name.size() - 3;
  if (at == std::string::npos) at = name.size();
  name.insert(at, tag);
  return (p.parent_path() / name).string();
}

// Declared before the model, so that it outlives every tensor of the run: on destruction the
// device's allocator is restored and the trace is complete (the tensors' frees included).
class AllocationRecording {
 public:
  // `description`: the run, for the trace's header (the program and its options).
  AllocationRecording(const std::string& path, ember::Device device, int rank, int ranks,
                      const std::string& description)
      : device_(device) {
    if (path.empty()) return;
    recorder_ = ember::memory::record_allocations(
        device, rank_trace_path(path, rank, ranks),
        fmt::format("rank {} of {}, {}", rank, ranks, description));
  }
  ~AllocationRecording() {
    if (!recorder_) return;
    ember::set_allocator(device_, recorder_->inner());
    try {
      recorder_->writer()->flush();
    } catch (const std::exception& e) {  // a full disk: the run itself succeeded
      std::fprintf(stderr, "warning: the allocation trace is incomplete: %s\n", e.what());
    }
  }
  AllocationRecording(const AllocationRecording&) = delete;
  AllocationRecording& operator=(const AllocationRecording&) = delete;

 private:
  ember::Device device_;
  std::shared_ptr<ember::memory::TraceRecordingAllocator> recorder_;
};

}  // namespace example
