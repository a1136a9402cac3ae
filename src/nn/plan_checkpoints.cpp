#include "ember/nn/plan_checkpoints.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <numeric>
#include <optional>
#include <utility>

#include "ember/memory/device_memory.hpp"
#include "ember/nn/checkpoint.hpp"
#include "ember/nn/dropout.hpp"

namespace ember::nn {
namespace {

double mib(int64_t bytes) {
  return static_cast<double>(bytes) / (1 << 20);
}

// The plan's predicted peak (see the header). Backward visits the children last to first; when
// child i's backward runs, the children after it have freed what they kept, and a checkpointed
// child holds its recomputed activations.
int64_t predict(const CheckpointPlan& p, const std::vector<bool>& checkpointed) {
  const size_t n = p.kept_bytes.size();
  std::vector<int64_t> kept(n);
  for (size_t i = 0; i < n; ++i) kept[i] = checkpointed[i] ? p.output_bytes[i] : p.kept_bytes[i];
  int64_t before = 0;  // kept by the children before i
  int64_t backward = 0;
  for (size_t i = 0; i < n; ++i) {
    backward = std::max(backward, before + p.kept_bytes[i]);
    before += kept[i];
  }
  return p.base_bytes +
         std::max(before + p.forward_transient_bytes, backward + p.backward_transient_bytes);
}

}  // namespace

std::string CheckpointPlan::describe() const {
  std::string blocks;
  for (size_t i : checkpointed) blocks += (blocks.empty() ? "" : ", ") + std::to_string(i);
  return fmt::format(
      "checkpoint plan for a budget of {:.4g} MiB: checkpoint children [{}] ({} of {}); "
      "predicted peak {:.1f} MiB (without checkpointing {:.1f} MiB); recompute {:.0f}% of a "
      "forward",
      mib(budget_bytes), blocks, checkpointed.size(), kept_bytes.size(), mib(predicted_peak_bytes),
      mib(unplanned_peak_bytes), 100 * predicted_recompute);
}

CheckpointPlan plan_checkpoints(Sequential& model, const Tensor& sample_batch, int64_t budget_bytes,
                                const Context& context) {
  EMBER_CHECK(budget_bytes > 0, "plan_checkpoints: the budget must be positive, not {}",
              budget_bytes);
  EMBER_CHECK(sample_batch.defined(), "plan_checkpoints: the sample batch is undefined");
  EMBER_CHECK(!model.has_saved(),
              "plan_checkpoints: the model holds saved activations; run backward or drop_saved() "
              "first");
  const Device device = context.stream.device();
  Stream& stream = context.stream;
  Context ctx = context;
  ctx.training = true;
  // The measuring step must leave no trace: dropout layers get their step history back, and
  // grad-ready callbacks (data parallelism's hooks) are off while it runs.
  ctx.step = std::numeric_limits<uint64_t>::max();
  std::vector<std::pair<Dropout*, std::optional<uint64_t>>> dropouts;
  model.for_each_module([&](Module& m) {
    if (auto* d = dynamic_cast<Dropout*>(&m)) dropouts.emplace_back(d, d->finished_step());
  });
  struct Restore {
    Sequential& model;
    GradReadyCallback callback;
    std::vector<std::pair<Dropout*, std::optional<uint64_t>>>& dropouts;
    ~Restore() {
      for (auto& [d, step] : dropouts) d->set_finished_step(step);
      model.set_grad_ready_callback(callback);
    }
  } restore{model, model.grad_ready_callback(), dropouts};
  model.set_grad_ready_callback(nullptr);
  {
    // Working copies (autocast) and lazily created state exist before measuring, as in training.
    Context warm = ctx;
    warm.training = false;
    model.forward(warm, sample_batch);
  }
  // Gradients are accumulated into by the measuring backward: kept (outside the allocator, so
  // that they do not count) to restore.
  std::vector<std::vector<float>> grads;
  for (Parameter* p : model.parameters()) {
    p->materialized_grad();  // a pending zero_grad's zeros are what is kept and restored
    EMBER_CHECK(p->grad.dtype() == DType::f32 && p->grad.device() == device,
                "plan_checkpoints: the gradient of '{}' must be f32 on {}, not {}", p->name,
                device.to_string(), p->grad.view().describe());
    grads.push_back(p->grad.to_vector<float>());
  }

  CheckpointPlan plan;
  plan.budget_bytes = budget_bytes;
  const size_t n = model.size();
  stream.synchronize();
  memory::reset_peak_stats(device);
  plan.base_bytes = memory::stats(device).allocated.current;
  using Clock = std::chrono::steady_clock;
  Tensor h = sample_batch;
  int64_t current = plan.base_bytes;
  try {
    for (size_t i = 0; i < n; ++i) {
      const auto start = Clock::now();
      memory::reset_peak_stats(device);
      h = model[i].forward(ctx, h);
      stream.synchronize();
      plan.forward_seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
      const memory::AllocatorStats s = memory::stats(device);
      plan.forward_transient_bytes =
          std::max(plan.forward_transient_bytes, s.allocated.peak - s.allocated.current);
      plan.kept_bytes.push_back(s.allocated.current - current);
      plan.output_bytes.push_back(static_cast<int64_t>(h.nbytes()));
      current = s.allocated.current;
    }
    memory::reset_peak_stats(device);
    Tensor dy = Tensor::full(h.shape(), 1.0, h.dtype(), stream);
    const int64_t before_backward = memory::stats(device).allocated.current;
    h = Tensor();
    model.backward(ctx, dy);
    stream.synchronize();
    plan.backward_transient_bytes = memory::stats(device).allocated.peak - before_backward;
  } catch (...) {
    model.drop_saved();
    throw;
  }
  // Restored on the measuring stream, after its backward; the gradients' own streams then wait.
  std::vector<Parameter*> params = model.parameters();
  std::vector<Stream> others;
  for (size_t i = 0; i < params.size(); ++i) {
    Tensor& g = params[i]->grad;
    mark_written(g);
    copy_bytes(g.data(), g.device(), grads[i].data(), Device::cpu(), g.nbytes(), stream);
    if (!(g.stream() == stream) &&
        std::find(others.begin(), others.end(), g.stream()) == others.end()) {
      others.push_back(g.stream());
    }
  }
  stream.synchronize();  // the host copies of the gradients go now
  for (const Stream& other : others) other.wait(stream);
  grads.clear();

  // Greedy: the most memory saved per second of recompute first.
  std::vector<bool> chosen(n, false);
  plan.unplanned_peak_bytes = predict(plan, chosen);
  plan.least_peak_bytes = predict(plan, std::vector<bool>(n, true));
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  auto saved = [&](size_t i) { return plan.kept_bytes[i] - plan.output_bytes[i]; };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return static_cast<double>(saved(a)) * std::max(plan.forward_seconds[b], 1e-9) >
           static_cast<double>(saved(b)) * std::max(plan.forward_seconds[a], 1e-9);
  });
  int64_t peak = plan.unplanned_peak_bytes;
  for (size_t i : order) {
    if (peak <= budget_bytes) break;
    if (saved(i) <= 0) continue;
    chosen[i] = true;
    peak = predict(plan, chosen);
  }
  EMBER_CHECK(peak <= budget_bytes,
              "plan_checkpoints: no plan fits {:.4g} MiB: the least predicted peak is {:.4g} MiB "
              "(every child checkpointed; {:.4g} MiB without checkpointing). Use a smaller batch, "
              "gradient accumulation, or a larger budget",
              mib(budget_bytes), mib(peak), mib(plan.unplanned_peak_bytes));
  plan.predicted_peak_bytes = peak;
  const double total =
      std::accumulate(plan.forward_seconds.begin(), plan.forward_seconds.end(), 0.0);
  double recompute = 0;
  for (size_t i = 0; i < n; ++i) {
    if (chosen[i]) {
      plan.checkpointed.push_back(i);
      recompute += plan.forward_seconds[i];
    }
  }
  plan.predicted_recompute = total > 0 ? recompute / total : 0;
  return plan;
}

void apply_checkpoint_plan(Sequential& model, const CheckpointPlan& plan) {
  for (size_t i : plan.checkpointed) {  // checked first: nothing is wrapped when one is wrong
    EMBER_CHECK(i < model.size(),
                "apply_checkpoint_plan: the plan checkpoints child {}, but the model has {} "
                "children (a plan made for another model?)",
                i, model.size());
  }
  for (size_t i : plan.checkpointed) {
    EMBER_CHECK(dynamic_cast<Checkpoint*>(&model[i]) == nullptr,
                "apply_checkpoint_plan: child {} is checkpointed already", i);
    model.wrap_child(
        i, [](std::shared_ptr<Module> m) { return std::make_shared<Checkpoint>(std::move(m)); });
  }
}

}  // namespace ember::nn
