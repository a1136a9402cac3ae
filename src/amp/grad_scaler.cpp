#include "ember/amp/grad_scaler.hpp"
#include "ember/core/profile.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "amp/scaler_state.hpp"
#include "ember/core/denormals.hpp"
#include "ember/core/error.hpp"
#include "ember/ops/elementwise.hpp"

#if EMBER_WITH_CUDA
#include <cuda_runtime.h>

#include "amp/cuda/grad_scaler_cuda.hpp"
#include "ember/core/check_cuda.hpp"
#endif

namespace ember::amp {

using detail::ScaleRecord;
using detail::ScalerState;
using detail::ScaleRule;

namespace {
// Updates whose outcome can be in flight at once (CUDA): past that, update() waits for the
// oldest, which only a host running this many steps ahead of the device notices.
constexpr int64_t kSlots = 64;

enum class Stage { ready, unscaled, stepped };

ScalerState* state_of_tensor(const Tensor& t) {
  return reinterpret_cast<ScalerState*>(t.data());
}
ScaleRecord* record_of_tensor(const Tensor& t) {
  return reinterpret_cast<ScaleRecord*>(static_cast<char*>(t.data()) + sizeof(ScalerState));
}

std::string join_names(const std::vector<std::string>& names, size_t most) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < most; ++i) {
    if (i > 0) out += ", ";
    out += "'" + names[i] + "'";
  }
  if (names.size() > most) out += fmt::format(" and {} more", names.size() - most);
  return out;
}
}  // namespace

// Pinned host memory (CUDA) or plain host memory, freed with the last user.
struct HostBuffer {
  void* data = nullptr;
  bool pinned = false;
  explicit HostBuffer(size_t bytes, bool use_pinned) : pinned(use_pinned) {
#if EMBER_WITH_CUDA
    if (pinned) {
      EMBER_CUDA_CHECK(cudaMallocHost(&data, bytes));
      std::memset(data, 0, bytes);
      return;
    }
#endif
    pinned = false;
    data = std::calloc(bytes, 1);
  }
  ~HostBuffer() {
#if EMBER_WITH_CUDA
    if (pinned) {
      cudaFreeHost(data);
      return;
    }
#endif
    std::free(data);
  }
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
};

struct GradScaler::OptimizerState {
  Stage stage = Stage::ready;
  size_t parameters = 0;
  Tensor found_inf;  // f32 [1]: what the optimizer's step reads
  Tensor flags;      // i32 [parameters]: 1 where unscale_ found a non-finite gradient
  std::shared_ptr<std::vector<std::string>> names;
  std::shared_ptr<HostBuffer> flag_slots;  // kSlots copies of flags, for the log (CUDA)
};

// An update whose outcome is on its way to the host (CUDA).
struct GradScaler::Pending {
  int64_t update = 0;
  Event done;
  // The flags of each optimizer unscaled in that iteration: their slot copies and names.
  std::vector<std::pair<std::shared_ptr<HostBuffer>, std::shared_ptr<std::vector<std::string>>>>
      flags;
  explicit Pending(Device device) : done(device) {}
};

GradScaler::GradScaler(Device device, GradScalerOptions options)
    : device_(device), options_(std::move(options)), last_stream_(current_stream(device)) {
  const GradScalerOptions& o = options_;
  // PyTorch's two checks, with its messages; the rest are ember's.
  EMBER_CHECK(o.growth_factor > 1.0, "The growth factor must be > 1.0. (GradScaler: {})",
              o.growth_factor);
  EMBER_CHECK(o.backoff_factor < 1.0, "The backoff factor must be < 1.0. (GradScaler: {})",
              o.backoff_factor);
  EMBER_CHECK(std::isfinite(o.growth_factor) && o.backoff_factor > 0.0,
              "GradScaler: growth_factor must be finite and backoff_factor > 0, not {} and {}",
              o.growth_factor, o.backoff_factor);
  EMBER_CHECK(o.growth_interval > 0 && o.growth_interval <= std::numeric_limits<int32_t>::max(),
              "GradScaler: growth_interval must be in [1, 2^31), not {}", o.growth_interval);
  EMBER_CHECK(o.hysteresis >= 1, "GradScaler: hysteresis must be >= 1, not {}", o.hysteresis);
  EMBER_CHECK(std::isfinite(o.min_scale) && o.min_scale >= 0.0 && !std::isnan(o.max_scale) &&
                  o.max_scale >= o.min_scale && o.max_scale > 0.0,
              "GradScaler: need 0 <= min_scale <= max_scale, max_scale > 0, not {} and {}",
              o.min_scale, o.max_scale);
  // A subnormal f32 scale (1e-45) makes 1 / scale inf: every parameter nan on the first step.
  EMBER_CHECK(std::isfinite(o.init_scale) &&
                  static_cast<float>(o.init_scale) >= std::numeric_limits<float>::min() &&
                  static_cast<float>(o.init_scale) <= std::numeric_limits<float>::max(),
              "GradScaler: init_scale must be a finite, normal f32 ({} to {}), not {}",
              std::numeric_limits<float>::min(), std::numeric_limits<float>::max(), o.init_scale);
  EMBER_CHECK(o.init_scale >= o.min_scale && o.init_scale <= o.max_scale,
              "GradScaler: init_scale {} is outside [min_scale, max_scale] = [{}, {}]",
              o.init_scale, o.min_scale, o.max_scale);
  EMBER_CHECK(o.error_after_overflows_at_min_scale >= 0 && o.collapse_backoffs >= 0 &&
                  o.collapse_window >= 0,
              "GradScaler: error_after_overflows_at_min_scale, collapse_backoffs and "
              "collapse_window must be >= 0");
  if (!options_.warn) {
    options_.warn = [](const std::string& line) {
      std::fprintf(stderr, "ember: %s\n", line.c_str());
    };
  }
  const Stream& stream = last_stream_;
  scale_ = Tensor::full({1}, options_.enabled ? o.init_scale : 1.0, DType::f32, stream);
  std::vector<uint8_t> bytes(sizeof(ScalerState) + sizeof(ScaleRecord), 0);
  ScalerState initial{0, o.hysteresis, 0, 0.0f};
  std::memcpy(bytes.data(), &initial, sizeof initial);
  state_ = Tensor::from_vector(bytes, {static_cast<int64_t>(bytes.size())}, stream);
  if (device_.is_cuda()) {
#if EMBER_WITH_CUDA
    EMBER_CUDA_CHECK(cudaMallocHost(&pinned_, kSlots * sizeof(ScaleRecord)));
#endif
  }
}

GradScaler::~GradScaler() {
  pending_.clear();
#if EMBER_WITH_CUDA
  if (pinned_ != nullptr) {
    // Copies into it may still be queued: let them land first.
    try {
      last_stream_.synchronize();
    } catch (...) {
    }
    cudaFreeHost(pinned_);
  }
#endif
}

void GradScaler::check_stream(const Stream& stream, const char* what) const {
  EMBER_CHECK(stream.device() == device_,
              "GradScaler::{}: the stream is on {}, but the scaler's state is on {}", what,
              stream.device().to_string(), device_.to_string());
}

Tensor GradScaler::scale(Stream& stream, const Tensor& x) const {
  if (!options_.enabled) return x;
  check_stream(stream, "scale");
  EMBER_CHECK(x.defined(), "GradScaler::scale: the tensor is undefined");
  if (!(stream == last_stream_)) stream.wait(last_stream_);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), stream);
  ops::scale_by(stream, out, x, scale_);
  // The scaler's next write of the scale comes after this read.
  if (!(stream == last_stream_)) last_stream_.wait(stream);
  return out;
}

void GradScaler::keep_scale_ordered() const {
  // Readers on the scale's own stream (item(), to_vector) see the scaler's last write.
  if (!(scale_.stream() == last_stream_)) scale_.stream().wait(last_stream_);
}

GradScaler::OptimizerState& GradScaler::state_of(const train::Optimizer& optimizer,
                                                 const char* what) {
  const std::vector<nn::Parameter*>& params = optimizer.parameters();
  auto& slot = optimizers_[optimizer.id()];
  if (slot) return *slot;
  auto st = std::make_unique<OptimizerState>();
  st->parameters = params.size();
  st->names = std::make_shared<std::vector<std::string>>();
  for (const nn::Parameter* p : params) st->names->push_back(p->name);
  const auto n = static_cast<int64_t>(params.size());
  st->found_inf = Tensor::zeros({1}, DType::f32, last_stream_);
  st->flags = Tensor::zeros({std::max<int64_t>(n, 1)}, DType::i32, last_stream_);
  st->flag_slots = std::make_shared<HostBuffer>(
      static_cast<size_t>(kSlots) * std::max<size_t>(params.size(), 1) * sizeof(int32_t),
      device_.is_cuda());
  (void)what;
  slot = std::move(st);
  return *slot;
}

void GradScaler::unscale_(Stream& stream, train::Optimizer& optimizer) {
  EMBER_OP_RANGE("grad_scaler_unscale");
  if (!options_.enabled) return;
  constexpr const char* kWhat = "unscale_";
  check_stream(stream, kWhat);
  OptimizerState& st = state_of(optimizer, kWhat);
  // PyTorch's messages.
  EMBER_CHECK(st.stage != Stage::unscaled,
              "unscale_() has already been called on this optimizer since the last update().");
  EMBER_CHECK(st.stage != Stage::stepped, "unscale_() is being called after step().");
  std::vector<std::pair<float*, int64_t>> grads;
  const std::vector<nn::Parameter*>& params = optimizer.parameters();
  for (nn::Parameter* p : params) {
    const Tensor& g = p->materialized_grad();  // a pending zero_grad's zeros, if no backward came
    EMBER_CHECK(g.defined(), "GradScaler::unscale_: the gradient of '{}' is undefined", p->name);
    EMBER_CHECK(g.dtype() != DType::f16, "Attempting to unscale FP16 gradients. ('{}' is {})",
                p->name, g.view().describe());
    EMBER_CHECK(g.dtype() == DType::f32,
                "GradScaler::unscale_: the gradient of '{}' is {}: "
                "gradients must be f32",
                p->name, g.view().describe());
    EMBER_CHECK(g.device() == device_,
                "GradScaler::unscale_: the gradient of '{}' is on {}, but the scaler is on {}",
                p->name, g.device().to_string(), device_.to_string());
    mark_written(g);
    grads.emplace_back(const_cast<Tensor&>(g).data<float>(), g.numel());
  }
  ScalerState* state = state_of_tensor(state_);
  if (device_.is_cpu()) {
    auto* flags = st.flags.data<int32_t>();
    float* found = st.found_inf.data<float>();
    *found = 0.0f;
    const float inv = detail::inverse_scale(*scale_.data<float>());
    for (size_t t = 0; t < grads.size(); ++t) {
      float* g = grads[t].first;
      const int64_t n = grads[t].second;
      int bad = 0;
      const bool flush_mode = ember::detail::flush_denormals_now();
#pragma omp parallel if (n > 65536)
      {
        const ember::detail::CpuFloatScope float_scope(flush_mode);
#pragma omp for simd schedule(static) reduction(| : bad)
        for (int64_t i = 0; i < n; ++i) {
          const float v = g[i];
          bad |= detail::finite_float(v) ? 0 : 1;
          g[i] = v * inv;
        }
      }
      flags[t] = bad;
      if (bad) {
        *found = 1.0f;
        state->found_any = 1.0f;
      }
    }
  } else {
#if EMBER_WITH_CUDA
    // After the scaler's last work and the gradients' pending work on their own streams; later
    // work there sees the unscaled gradients.
    std::vector<Stream> others;
    auto order_after = [&](const Stream& s) {
      if (s == stream || std::find(others.begin(), others.end(), s) != others.end()) return;
      stream.wait(s);
      others.push_back(s);
    };
    order_after(last_stream_);
    for (const nn::Parameter* p : params) order_after(p->grad.stream());
    EMBER_CUDA_CHECK(cudaSetDevice(device_.index()));
    cuda::unscale(grads, scale_.data<float>(), st.flags.data<int32_t>(), st.found_inf.data<float>(),
                  state, static_cast<cudaStream_t>(stream.native()));
    // Every stream that holds the gradients or the scaler's state, the scaler's last one
    // included, sees the unscaled gradients from here on.
    for (const Stream& s : others) s.wait(stream);
#else
    EMBER_THROW("GradScaler: {} needs a build with CUDA", device_.to_string());
#endif
  }
  if (options_.sync_found_inf) {
    // Data parallelism: every rank's flag becomes the maximum over ranks, so that all skip the
    // same steps and back off alike.
    options_.sync_found_inf(stream, st.found_inf);
    if (device_.is_cpu()) {
      if (*st.found_inf.data<float>() != 0.0f) state->found_any = 1.0f;
    } else {
#if EMBER_WITH_CUDA
      cuda::merge_found(st.found_inf.data<float>(), state,
                        static_cast<cudaStream_t>(stream.native()));
#endif
    }
  }
  last_stream_ = stream;
  keep_scale_ordered();
  st.stage = Stage::unscaled;
  // PyTorch records no inf check for an optimizer without parameters.
  if (st.parameters > 0) unscaled_order_.push_back(optimizer.id());
}

void GradScaler::step(Stream& stream, train::Optimizer& optimizer) {
  if (!options_.enabled) {
    optimizer.step(stream);
    return;
  }
  check_stream(stream, "step");
  OptimizerState& st = state_of(optimizer, "step");
  EMBER_CHECK(st.stage != Stage::stepped,
              "step() has already been called since the last update().");
  if (st.stage == Stage::ready) unscale_(stream, optimizer);
  EMBER_CHECK(st.parameters > 0, "No inf checks were recorded for this optimizer.");
  // The gradients are unscaled already: the step reads only the flag, and skips on the device.
  if (!(stream == last_stream_)) stream.wait(last_stream_);  // after the unscale and its flag
  optimizer.step(stream, st.found_inf, Tensor());
  last_stream_ = stream;
  st.stage = Stage::stepped;
}

void GradScaler::update(Stream& stream) {
  if (!options_.enabled) return;
  check_stream(stream, "update");
  EMBER_CHECK(!unscaled_order_.empty(), "No inf checks were recorded prior to update.");
  ScaleRule rule{options_.growth_factor,
                 options_.backoff_factor,
                 static_cast<int32_t>(options_.growth_interval),
                 options_.hysteresis,
                 static_cast<float>(options_.min_scale),
                 static_cast<float>(
                     std::min<double>(options_.max_scale, std::numeric_limits<float>::infinity())),
                 std::numeric_limits<float>::quiet_NaN()};
  run_update(stream, rule);
}

void GradScaler::update(Stream& stream, float new_scale) {
  if (!options_.enabled) return;
  check_stream(stream, "update");
  EMBER_CHECK(std::isfinite(new_scale) && new_scale > 0.0f,
              "GradScaler::update: new_scale must be finite and > 0, not {}", new_scale);
  EMBER_CHECK(new_scale >= options_.min_scale && new_scale <= options_.max_scale,
              "GradScaler::update: new_scale {} is outside this scaler's [min_scale, max_scale] "
              "= [{}, {}]",
              new_scale, options_.min_scale, options_.max_scale);
  ScaleRule rule{};
  rule.forced = new_scale;
  run_update(stream, rule);
}

void GradScaler::run_update(Stream& stream, const ScaleRule& rule) {
  EMBER_OP_RANGE("grad_scaler_update");
  const int64_t update = updates_;
  if (device_.is_cpu()) {
    detail::update_scale(rule, scale_.data<float>(), state_of_tensor(state_),
                         record_of_tensor(state_));
    std::vector<std::string> names;
    for (uint64_t opt : unscaled_order_) {
      const OptimizerState& st = *optimizers_.at(opt);
      const auto* flags = st.flags.data<int32_t>();
      for (size_t i = 0; i < st.parameters; ++i) {
        if (flags[i] != 0) names.push_back((*st.names)[i]);
      }
    }
    record_outcome(update, *record_of_tensor(state_), names);
  } else {
#if EMBER_WITH_CUDA
    if (!(stream == last_stream_)) stream.wait(last_stream_);
    // In a CUDA graph (ember::Graph) the update runs on the device at each replay; the host's
    // record of it (history(), skipped_steps(), the collapse checks) follows eager updates only:
    // an event recorded in a capture cannot be waited for.
    const bool capturing = stream.capturing();
    while (!capturing && static_cast<int64_t>(pending_.size()) >= kSlots) drain_one(true);
    const auto handle = static_cast<cudaStream_t>(stream.native());
    EMBER_CUDA_CHECK(cudaSetDevice(device_.index()));
    cuda::update(rule, scale_.data<float>(), state_of_tensor(state_), record_of_tensor(state_),
                 handle);
    if (capturing) {
      last_stream_ = stream;
      keep_scale_ordered();
      for (auto& [opt, st] : optimizers_) st->stage = Stage::ready;
      unscaled_order_.clear();
      ++updates_;
      return;
    }
    const int64_t slot = update % kSlots;
    auto pending = std::make_unique<Pending>(device_);
    pending->update = update;
    EMBER_CUDA_CHECK(cudaMemcpyAsync(static_cast<ScaleRecord*>(pinned_) + slot,
                                     record_of_tensor(state_), sizeof(ScaleRecord),
                                     cudaMemcpyDeviceToHost, handle));
    for (uint64_t opt : unscaled_order_) {
      const OptimizerState& st = *optimizers_.at(opt);
      auto* dst = static_cast<int32_t*>(st.flag_slots->data) +
                  static_cast<size_t>(slot) * std::max<size_t>(st.parameters, 1);
      EMBER_CUDA_CHECK(cudaMemcpyAsync(dst, st.flags.data(), st.parameters * sizeof(int32_t),
                                       cudaMemcpyDeviceToHost, handle));
      pending->flags.emplace_back(st.flag_slots, st.names);
    }
    pending->done.record(stream);
    pending_.push_back(std::move(pending));
#else
    EMBER_THROW("GradScaler: {} needs a build with CUDA", device_.to_string());
#endif
  }
  last_stream_ = stream;
  keep_scale_ordered();
  for (auto& [opt, st] : optimizers_) st->stage = Stage::ready;
  unscaled_order_.clear();
  ++updates_;
  while (!pending_.empty() && drain_one(/*wait=*/false)) {
  }
  if (failure_update_ >= 0) {
    const int64_t at = failure_update_;
    failure_update_ = -1;
    EMBER_THROW(
        "GradScaler: {} consecutive updates (the last: update {}) found inf or nan gradients with "
        "the loss scale at its minimum {}; scaling cannot fix this, the loss or its gradients are "
        "non-finite by themselves: a learning rate too high, a layer that needs f32, or bad data "
        "(inf or nan in the inputs).{}",
        options_.error_after_overflows_at_min_scale, at, options_.min_scale, last_nonfinite_);
  }
}

bool GradScaler::drain_one(bool wait) {
#if EMBER_WITH_CUDA
  Pending& p = *pending_.front();
  if (wait) {
    p.done.synchronize();
  } else if (!p.done.query()) {
    return false;
  }
  const int64_t slot = p.update % kSlots;
  const ScaleRecord record = static_cast<const ScaleRecord*>(pinned_)[slot];
  std::vector<std::string> names;
  if (record.found != 0) {
    for (const auto& [buffer, opt_names] : p.flags) {
      const size_t n = opt_names->size();
      const auto* flags = static_cast<const int32_t*>(buffer->data) +
                          static_cast<size_t>(slot) * std::max<size_t>(n, 1);
      for (size_t i = 0; i < n; ++i) {
        if (flags[i] != 0) names.push_back((*opt_names)[i]);
      }
    }
  }
  const int64_t update = p.update;
  pending_.pop_front();
  record_outcome(update, record, names);
  return true;
#else
  (void)wait;
  return false;
#endif
}

void GradScaler::drain_all() {
  while (!pending_.empty()) drain_one(/*wait=*/true);
}

void GradScaler::record_outcome(int64_t update, const ScaleRecord& record,
                                const std::vector<std::string>& names) {
  const bool skipped = record.found != 0;
  if (skipped) {
    ++skipped_;
    last_nonfinite_ = names.empty() ? std::string()
                                    : " Non-finite gradients (update " + std::to_string(update) +
                                          "): " + join_names(names, 8) + ".";
  }
  if (skipped || record.scale_after != record.scale_before) {
    history_.push_back(ScaleEvent{update, record.scale_before, record.scale_after, skipped, names});
  }
  if (record.scale_after < record.scale_before && options_.collapse_backoffs > 0) {
    recent_backoffs_.push_back(update);
    while (!recent_backoffs_.empty() &&
           recent_backoffs_.front() <= update - options_.collapse_window) {
      recent_backoffs_.pop_front();
    }
    if (!warned_ && static_cast<int64_t>(recent_backoffs_.size()) >= options_.collapse_backoffs) {
      warned_ = true;
      options_.warn(fmt::format(
          "GradScaler: the loss scale collapsed: it backed off {} times in {} updates and is now "
          "{:g} (update {}). Likely causes: a learning rate too high, a layer that needs f32 "
          "(keep it out of autocast), or bad data (inf or nan in inputs or labels).{}",
          recent_backoffs_.size(), options_.collapse_window, record.scale_after, update,
          last_nonfinite_));
    }
  }
  const int64_t limit = options_.error_after_overflows_at_min_scale;
  if (limit > 0 && record.overflows_at_min >= limit && failure_update_ < 0) {
    failure_update_ = update;
  }
}

namespace {
template <class T>
T read_from(const Tensor& t, size_t offset, const Stream& stream) {
  T value;
  if (t.device().is_cpu()) {
    std::memcpy(&value, static_cast<const char*>(t.data()) + offset, sizeof(T));
    return value;
  }
  copy_bytes(&value, Device::cpu(), static_cast<const char*>(t.data()) + offset, t.device(),
             sizeof(T), stream);
  stream.synchronize();
  return value;
}
}  // namespace

float GradScaler::get_scale() const {
  if (!options_.enabled) return 1.0f;
  return read_from<float>(scale_, 0, last_stream_);
}

int32_t GradScaler::growth_tracker() const {
  return read_from<ScalerState>(state_, 0, last_stream_).growth_tracker;
}

std::vector<ScaleEvent> GradScaler::history() {
  drain_all();
  return history_;
}

int64_t GradScaler::skipped_steps() {
  drain_all();
  return skipped_;
}

std::vector<std::string> GradScaler::nonfinite_parameters(const train::Optimizer& optimizer) const {
  auto it = optimizers_.find(optimizer.id());
  if (it == optimizers_.end()) return {};
  const OptimizerState& st = *it->second;
  std::vector<int32_t> flags(st.parameters);
  if (st.parameters > 0) {
    if (device_.is_cpu()) {
      std::memcpy(flags.data(), st.flags.data(), st.parameters * sizeof(int32_t));
    } else {
      copy_bytes(flags.data(), Device::cpu(), st.flags.data(), device_,
                 st.parameters * sizeof(int32_t), last_stream_);
      last_stream_.synchronize();
    }
  }
  std::vector<std::string> names;
  for (size_t i = 0; i < st.parameters; ++i) {
    if (flags[i] != 0) names.push_back((*st.names)[i]);
  }
  return names;
}

StateDict GradScaler::state_dict() const {
  if (!options_.enabled) return {};
  const ScalerState s = read_from<ScalerState>(state_, 0, last_stream_);
  StateDict out;
  out.insert("scale", Tensor::from_vector(std::vector<float>{get_scale()}, {1}, Device::cpu()));
  out.insert("growth_tracker",
             Tensor::from_vector(std::vector<int32_t>{s.growth_tracker}, {1}, Device::cpu()));
  out.insert("hysteresis_tracker",
             Tensor::from_vector(std::vector<int32_t>{s.hysteresis_left}, {1}, Device::cpu()));
  out.insert("overflows_at_min_scale",
             Tensor::from_vector(std::vector<int32_t>{s.overflows_at_min}, {1}, Device::cpu()));
  return out;
}

// The hysteresis tracker counts down by one per overflow and goes below 0 in a long run of them
// (its own state may hold -199); far below that (INT32_MIN) its next decrement would overflow.
constexpr int32_t kLowestHysteresisTracker = -(1 << 30);

void GradScaler::load_state_dict(const StateDict& state) {
  if (!options_.enabled) return;  // as PyTorch: a disabled scaler keeps its scale of 1
  EMBER_CHECK(!state.empty(),
              "The source state dict is empty, possibly because it was saved from a disabled "
              "instance of GradScaler.");
  EMBER_CHECK(std::none_of(optimizers_.begin(), optimizers_.end(),
                           [](const auto& entry) { return entry.second->stage != Stage::ready; }),
              "GradScaler::load_state_dict: an iteration is in progress (unscale_ or step without "
              "update()); load between iterations");
  const StateDict expected = state_dict();
  const StateDictMismatch mismatch = compare_state_dicts(expected, state);
  EMBER_CHECK(mismatch.empty(), "GradScaler::load_state_dict: {}", mismatch.describe());
  const auto scalar = [&](const char* key) { return state.at(key).to(Device::cpu()); };
  const float scale = scalar("scale").data<float>()[0];
  ScalerState s{scalar("growth_tracker").data<int32_t>()[0],
                scalar("hysteresis_tracker").data<int32_t>()[0],
                scalar("overflows_at_min_scale").data<int32_t>()[0], 0.0f};
  // 0 is a scale that underflowed (as PyTorch's can): it loads, as its own state must.
  EMBER_CHECK(std::isfinite(scale) && scale >= 0.0f && !std::signbit(scale),
              "GradScaler::load_state_dict: the scale must be finite and >= 0, not {}", scale);
  EMBER_CHECK(scale >= options_.min_scale && scale <= options_.max_scale,
              "GradScaler::load_state_dict: the scale {} is outside this scaler's [min_scale, "
              "max_scale] = [{}, {}]",
              scale, options_.min_scale, options_.max_scale);
  EMBER_CHECK(s.growth_tracker >= 0 && s.growth_tracker < options_.growth_interval &&
                  s.overflows_at_min >= 0 && s.hysteresis_left >= kLowestHysteresisTracker &&
                  s.hysteresis_left <= options_.hysteresis,
              "GradScaler::load_state_dict: growth_tracker {} (growth_interval {}), "
              "hysteresis_tracker {} (hysteresis {}) or overflows_at_min_scale {} is out of range",
              s.growth_tracker, options_.growth_interval, s.hysteresis_left, options_.hysteresis,
              s.overflows_at_min);
  drain_all();
  Tensor host_scale = Tensor::from_vector(std::vector<float>{scale}, {1}, Device::cpu());
  std::vector<uint8_t> bytes(state_.nbytes(), 0);
  std::memcpy(bytes.data(), &s, sizeof s);
  Tensor host_state =
      Tensor::from_vector(bytes, {static_cast<int64_t>(bytes.size())}, Device::cpu());
  last_stream_.synchronize();
  scale_.copy_(host_scale);
  state_.copy_(host_state);
  if (!(scale_.stream() == last_stream_)) last_stream_.wait(scale_.stream());
  if (!(state_.stream() == last_stream_)) last_stream_.wait(state_.stream());
  // The log goes on from here; the flags of a loaded iteration are gone.
  last_nonfinite_.clear();
}

}  // namespace ember::amp
