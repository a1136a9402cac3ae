// train::StepProfiler: where a training step's time goes, phase by phase (data wait, forward,
// backward, optimizer, communication wait, other), for the examples' progress lines.
//
//   profiler.begin_step();
//   profiler.phase(StepPhase::data);      batch = loader.next(stream);
//   profiler.phase(StepPhase::forward);   ...
//   profiler.end_step();
//   ... every log interval: fmt::print("{}\n", profiler.take().describe());
//
// The time from one phase() to the next (or to end_step()) is the phase's; time inside a step
// outside any phase is "other", so the phases sum to the steps' time. On the CPU it is the host's
// clock. On a GPU each switch records an event on the stream, and a step is read once its events
// have completed (the next step's begin_step or take() queries them; nothing waits): the phases
// are device time, a starved GPU's idle time falling to the phase the host was in (the data
// wait). take() returns the steps read so far; on a GPU the last one or two may come with the
// next interval's. In CUDA builds each step and each phase is also an NVTX range ("step",
// "data", "forward", ...), which Nsight Systems shows on the timeline.
#pragma once

#include <array>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "ember/core/stream.hpp"

namespace ember::train {

enum class StepPhase { data, forward, backward, optimizer, communication, other };
inline constexpr int kStepPhases = 6;
const char* step_phase_name(StepPhase phase);

struct StepBreakdown {
  std::array<double, kStepPhases> seconds{};  // per phase, summed over the steps
  double step_seconds = 0;                    // the steps' time, begin_step to end_step
  int64_t steps = 0;
  double seconds_of(StepPhase p) const { return seconds[static_cast<size_t>(p)]; }
  double fraction(StepPhase p) const { return step_seconds > 0 ? seconds_of(p) / step_seconds : 0; }
  // "data 0.4 ms (1%) | forward 20.1 ms (38%) | ..." per step, phases without time left out, and
  // a hint when the data wait passes 10 % of the step.
  std::string describe() const;
};

class StepProfiler {
 public:
  explicit StepProfiler(const Stream& stream);
  ~StepProfiler();
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;

  void begin_step();
  void phase(StepPhase phase);  // an Error outside a step
  void end_step();
  StepBreakdown take();  // the steps read since the last take()

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace ember::train
