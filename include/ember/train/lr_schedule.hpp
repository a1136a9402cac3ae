// Learning-rate schedules: the learning rate as a pure function of the step index, so that a
// resumed run (Optimizer::load_state_dict restores the step count) continues on the same curve.
//
//   auto schedule = train::LRSchedule::cosine(3e-4, total_steps, /*warmup_steps=*/200);
//   for (...) { schedule.apply(optimizer); ...; optimizer.step(stream); }
//
// Steps are numbered from 0 (the first optimizer step). Bad settings (negative, inf or nan
// rates, zero lengths) are Errors at construction.
#pragma once

#include <cstdint>

#include "ember/train/optimizer.hpp"

namespace ember::train {

class LRSchedule {
 public:
  // lr at every step.
  static LRSchedule constant(double lr);
  // lr * gamma^floor(step / step_size) (torch.optim.lr_scheduler.StepLR).
  static LRSchedule step(double lr, int64_t step_size, double gamma);
  // lr * (step + 1) / warmup_steps for the first warmup_steps steps, then lr.
  static LRSchedule linear_warmup(double lr, int64_t warmup_steps);
  // Linear warmup over warmup_steps, then a half cosine from lr down to min_lr at total_steps,
  // and min_lr after that.
  static LRSchedule cosine(double lr, int64_t total_steps, int64_t warmup_steps = 0,
                           double min_lr = 0.0);

  double at(int64_t step) const;  // the learning rate of step `step`
  // Sets the optimizer's learning rate for its next step (number optimizer.steps()): of every
  // parameter group, or of one (a schedule per group).
  void apply(Optimizer& optimizer) const;
  void apply(Optimizer& optimizer, size_t group) const;

 private:
  enum class Kind { constant, step, linear_warmup, cosine };
  LRSchedule(Kind kind, double lr) : kind_(kind), lr_(lr) {}
  Kind kind_;
  double lr_;
  int64_t step_size_ = 1, warmup_ = 0, total_ = 1;
  double gamma_ = 1.0, min_lr_ = 0.0;
};

}  // namespace ember::train
