#include "ember/train/lr_schedule.hpp"

#include <cmath>
#include <limits>
#include <numbers>

#include "ember/core/error.hpp"

namespace ember::train {
namespace {
void check_rate(const char* schedule, const char* what, double value) {
  EMBER_CHECK(std::isfinite(value) && value >= 0 && value <= std::numeric_limits<float>::max(),
              "LRSchedule::{}: {} must be finite, >= 0 and within float, not {}", schedule, what,
              value);
}
}  // namespace

LRSchedule LRSchedule::constant(double lr) {
  check_rate("constant", "lr", lr);
  return LRSchedule(Kind::constant, lr);
}

LRSchedule LRSchedule::step(double lr, int64_t step_size, double gamma) {
  check_rate("step", "lr", lr);
  EMBER_CHECK(step_size >= 1, "LRSchedule::step: step_size must be >= 1, not {}", step_size);
  EMBER_CHECK(std::isfinite(gamma) && gamma > 0,
              "LRSchedule::step: gamma must be finite and > 0, not {}", gamma);
  LRSchedule s(Kind::step, lr);
  s.step_size_ = step_size;
  s.gamma_ = gamma;
  return s;
}

LRSchedule LRSchedule::linear_warmup(double lr, int64_t warmup_steps) {
  check_rate("linear_warmup", "lr", lr);
  EMBER_CHECK(warmup_steps >= 1, "LRSchedule::linear_warmup: warmup_steps must be >= 1, not {}",
              warmup_steps);
  LRSchedule s(Kind::linear_warmup, lr);
  s.warmup_ = warmup_steps;
  return s;
}

LRSchedule LRSchedule::cosine(double lr, int64_t total_steps, int64_t warmup_steps, double min_lr) {
  check_rate("cosine", "lr", lr);
  check_rate("cosine", "min_lr", min_lr);
  EMBER_CHECK(total_steps >= 1, "LRSchedule::cosine: total_steps must be >= 1, not {}",
              total_steps);
  EMBER_CHECK(warmup_steps >= 0 && warmup_steps <= total_steps,
              "LRSchedule::cosine: warmup_steps must be in [0, total_steps = {}], not {}",
              total_steps, warmup_steps);
  EMBER_CHECK(min_lr <= lr, "LRSchedule::cosine: min_lr ({}) must not exceed lr ({})", min_lr, lr);
  LRSchedule s(Kind::cosine, lr);
  s.total_ = total_steps;
  s.warmup_ = warmup_steps;
  s.min_lr_ = min_lr;
  return s;
}

double LRSchedule::at(int64_t step) const {
  EMBER_CHECK(step >= 0, "LRSchedule::at: the step must be >= 0, not {}", step);
  const auto warmup = [&] {
    return lr_ * static_cast<double>(step + 1) / static_cast<double>(warmup_);
  };
  switch (kind_) {
    case Kind::constant:
      return lr_;
    case Kind::step:
      return lr_ * std::pow(gamma_, static_cast<double>(step / step_size_));
    case Kind::linear_warmup:
      return step < warmup_ ? warmup() : lr_;
    case Kind::cosine: {
      if (step < warmup_) return warmup();
      if (step >= total_) return min_lr_;
      const double progress =
          static_cast<double>(step - warmup_) / static_cast<double>(total_ - warmup_);
      return min_lr_ + (lr_ - min_lr_) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
    }
  }
  return lr_;
}

void LRSchedule::apply(Optimizer& optimizer) const {
  optimizer.set_lr(static_cast<float>(at(optimizer.steps())));
}

void LRSchedule::apply(Optimizer& optimizer, size_t group) const {
  optimizer.set_lr(group, static_cast<float>(at(optimizer.steps())));
}

}  // namespace ember::train
