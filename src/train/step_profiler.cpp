// train::StepProfiler (ember/train/step_profiler.hpp).
#include "ember/train/step_profiler.hpp"

#include <fmt/format.h>

#include <chrono>
#include <iterator>
#include <utility>

#include "ember/core/enum_name.hpp"
#include "ember/core/error.hpp"
#include "ember/core/profile.hpp"

namespace ember::train {

using Clock = std::chrono::steady_clock;

namespace {

// A profile::Trace event of [start, now) on this thread, when a trace records.
void trace_event(const char* name, const char* category, Clock::time_point start) {
  profile::Trace* trace = profile::active();
  if (trace == nullptr) return;
  profile::Range::record(trace, name, category, start);
}

}  // namespace

const char* step_phase_name(StepPhase phase) {
  static constexpr const char* kNames[] = {"data",      "forward", "backward",
                                           "optimizer", "comm",    "other"};
  static_assert(std::size(kNames) == static_cast<size_t>(StepPhase::other) + 1);
  return enum_name(phase, kNames);
}

std::string StepBreakdown::describe() const {
  if (steps == 0 || step_seconds <= 0) return "time: no step measured yet";
  std::string out = "time/step:";
  const char* separator = " ";
  for (int p = 0; p < kStepPhases; ++p) {
    const auto phase = static_cast<StepPhase>(p);
    if (seconds_of(phase) <= 0) continue;
    out += fmt::format("{}{} {:.1f} ms ({:.0f}%)", separator, step_phase_name(phase),
                       1e3 * seconds_of(phase) / static_cast<double>(steps), 100 * fraction(phase));
    separator = " | ";
  }
  if (fraction(StepPhase::data) > 0.10) {
    out += fmt::format(" | the step waits for data {:.0f}% of its time: more --workers may help",
                       100 * fraction(StepPhase::data));
  }
  return out;
}

struct StepProfiler::Impl {
  Stream stream;
  bool in_step = false;
  bool phase_range = false;                                 // an NVTX range of a phase is open
  Clock::time_point host_step_start{}, host_phase_start{};  // for profile::Trace (host time)
  StepPhase current = StepPhase::other;
  StepBreakdown done;                              // read, not yet taken
  std::array<double, kStepPhases> step_seconds{};  // CPU: the open step's phases so far

  // CPU: the clock at the last switch.
  Clock::time_point last{};
  Clock::time_point step_start{};

  // GPU: one step's events, the phase each interval went to (the one before event i + 1).
  struct Marks {
    std::vector<Event> events;
    std::vector<StepPhase> phases;
  };
  Marks open;
  std::deque<Marks> pending;

  explicit Impl(const Stream& s) : stream(s) {}
  bool gpu() const { return stream.device().is_cuda(); }

  void mark(StepPhase next) {
    if (gpu()) {
      open.events.emplace_back(stream.device());
      open.events.back().record(stream);
      open.phases.push_back(next);
      return;
    }
    const Clock::time_point now = Clock::now();
    step_seconds[static_cast<size_t>(current)] += std::chrono::duration<double>(now - last).count();
    last = now;
  }

  // The pending steps whose last event has completed, oldest first; nothing waits.
  void read_completed() {
    while (!pending.empty() && pending.front().events.back().query()) {
      const Marks& m = pending.front();
      for (size_t i = 0; i + 1 < m.events.size(); ++i) {
        const double s = m.events[i + 1].elapsed_ms(m.events[i]) / 1e3;
        done.seconds[static_cast<size_t>(m.phases[i])] += s;
      }
      done.step_seconds += m.events.back().elapsed_ms(m.events.front()) / 1e3;
      ++done.steps;
      pending.pop_front();
    }
  }
};

StepProfiler::StepProfiler(const Stream& stream) : impl_(std::make_unique<Impl>(stream)) {}
StepProfiler::~StepProfiler() = default;

void StepProfiler::begin_step() {
  Impl& m = *impl_;
  EMBER_CHECK(!m.in_step, "StepProfiler::begin_step: the previous step did not end (end_step)");
  m.in_step = true;
  m.current = StepPhase::other;
  profile::nvtx_push("step");
  m.phase_range = false;
  m.host_step_start = m.host_phase_start = Clock::now();
  if (m.gpu()) {
    m.read_completed();
    m.open = {};
    m.mark(StepPhase::other);
  } else {
    m.last = m.step_start = Clock::now();
  }
}

void StepProfiler::phase(StepPhase phase) {
  Impl& m = *impl_;
  EMBER_CHECK(m.in_step, "StepProfiler::phase({}): not inside a step (begin_step)",
              step_phase_name(phase));
  m.mark(phase);  // the interval that ends here keeps the phase it began with
  trace_event(step_phase_name(m.current), "phase", m.host_phase_start);
  m.host_phase_start = Clock::now();
  m.current = phase;
  if (m.phase_range) profile::nvtx_pop();
  profile::nvtx_push(step_phase_name(phase));
  m.phase_range = true;
}

void StepProfiler::end_step() {
  Impl& m = *impl_;
  EMBER_CHECK(m.in_step, "StepProfiler::end_step: no step began (begin_step)");
  m.in_step = false;
  if (m.phase_range) profile::nvtx_pop();
  m.phase_range = false;
  profile::nvtx_pop();  // the step
  trace_event(step_phase_name(m.current), "phase", m.host_phase_start);
  trace_event("step", "step", m.host_step_start);
  if (m.gpu()) {
    m.mark(StepPhase::other);
    m.pending.push_back(std::move(m.open));
    m.open = {};
    m.read_completed();
  } else {
    m.mark(StepPhase::other);
    // Only whole steps reach take(): the phases and the step's time together.
    for (int p = 0; p < kStepPhases; ++p) m.done.seconds[p] += m.step_seconds[p];
    m.step_seconds = {};
    m.done.step_seconds += std::chrono::duration<double>(m.last - m.step_start).count();
    ++m.done.steps;
  }
  m.current = StepPhase::other;
}

StepBreakdown StepProfiler::take() {
  Impl& m = *impl_;
  if (m.gpu()) m.read_completed();
  return std::exchange(m.done, StepBreakdown{});
}

}  // namespace ember::train
