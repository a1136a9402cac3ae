// Save and resume on every test device: N steps, save, a fresh process state, resume, M more
// steps: bitwise the parameters, optimizer moments and loss scale of N + M uninterrupted steps,
// with f16 autocast (the GradScaler mid-trajectory, steps skipped), dropout and checkpointed
// blocks.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <vector>

#include "ember/amp/grad_scaler.hpp"
#include "ember/nn/loss.hpp"
#include "ember/train/adamw.hpp"
#include "ember/train/lr_schedule.hpp"
#include "ember/train/residual_mlp.hpp"
#include "ember/train/training_state.hpp"
#include "ops/device_cases.hpp"
#include "test_support.hpp"

namespace ember::testing {
namespace {

class TrainingStateResume : public OnDevice {};

// One training run's objects, built the same way every time.
struct Run {
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<train::AdamW> opt;
  std::unique_ptr<amp::GradScaler> scaler;
  train::TrainingState state;
  Stream stream;

  Run(Device device, Stream s, bool f16) : stream(s) {
    model = train::make_residual_mlp({.inputs = 6,
                                      .width = 16,
                                      .depth = 2,
                                      .expansion = 2,
                                      .outputs = 5,
                                      .dropout = 0.2f,
                                      .checkpoint = true,
                                      .seed = 7,
                                      .device = device});
    opt = std::make_unique<train::AdamW>(model->parameters(), train::AdamWOptions{.lr = 1e-2f});
    amp::GradScalerOptions so;
    so.enabled = f16;
    so.init_scale = 1 << 24;  // overflows at first: steps skipped, the scale backs off
    so.growth_interval = 3;   // and grows again within the run
    scaler = std::make_unique<amp::GradScaler>(device, so);
    state.add_module("model", *model);
    state.add_optimizer("optimizer", *opt);
    state.add_state(
        "scaler", [this] { return scaler->state_dict(); },
        [this](const StateDict& d) { scaler->load_state_dict(d); });
  }

  // Trains until state.progress.step == until.
  void train_to(int64_t until, Device device, bool f16) {
    const auto schedule = train::LRSchedule::cosine(1e-2, 12, 2, 1e-3);
    nn::Context ctx{stream, true, f16 ? nn::Precision::f16 : nn::Precision::f32};
    ctx.step = state.progress.micro_step;
    nn::SoftmaxCrossEntropy loss;
    for (int64_t step = state.progress.step; step < until; ++step) {
      Tensor x = Tensor::empty({8, 6});
      x.uniform_(50 + static_cast<uint64_t>(step), -2, 2);
      std::vector<int32_t> y(8);
      for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<int32_t>((i + step) % 5);
      schedule.apply(*opt);
      opt->zero_grad();
      loss.forward(ctx, model->forward(ctx, x.to(device)), Tensor::from_vector(y, {8}).to(device));
      model->backward(ctx, loss.backward(ctx, scaler->scale()));
      scaler->step(stream, *opt);
      scaler->update(stream);
      ++ctx.step;
      state.progress.step = step + 1;
      state.progress.micro_step = ctx.step;
    }
  }

  std::vector<float> values() {
    std::vector<float> out;
    for (const auto& [k, t] : opt->state_dict()) {
      if (t.dtype() != DType::f32) continue;
      const auto v = t.to(Device::cpu()).to_vector<float>();
      out.insert(out.end(), v.begin(), v.end());
    }
    for (nn::Parameter* p : model->parameters()) {
      const auto v = p->value.to(Device::cpu()).to_vector<float>();
      out.insert(out.end(), v.begin(), v.end());
    }
    out.push_back(scaler->get_scale());
    return out;
  }
};

std::string fresh_dir(const char* name) {
  const auto dir =
      std::filesystem::temp_directory_path() / fmt::format("ember_{}_{}", name, ::getpid());
  std::filesystem::remove_all(dir);
  return dir.string();
}

void check_resume(Device device, Stream s, bool f16, const char* name, bool async = false) {
  constexpr int64_t kFirst = 5, kTotal = 12;
  Run straight(device, s, f16);
  straight.train_to(kTotal, device, f16);
  const std::vector<float> expected = straight.values();
  const int64_t expected_skips = f16 ? straight.scaler->skipped_steps() : 0;

  const std::string dir = fresh_dir(name);
  {
    Run first(device, s, f16);
    first.train_to(kFirst, device, f16);
    first.state.metadata["note"] = "halfway";
    train::TrainingStateStore store(train::StateStoreOptions{.dir = dir, .async = async});
    store.save(first.state);
    first.train_to(kFirst + 2, device, f16);  // goes on while an asynchronous save is written
  }
  Run second(device, s, f16);
  train::TrainingStateStore store(train::StateStoreOptions{.dir = dir});
  ASSERT_EQ(store.resume(second.state), std::optional<int64_t>(kFirst));
  EXPECT_EQ(second.state.progress.step, kFirst);
  EXPECT_EQ(second.state.progress.micro_step, static_cast<uint64_t>(kFirst));
  EXPECT_EQ(second.state.metadata.at("note"), "halfway");
  second.train_to(kTotal, device, f16);
  EXPECT_EQ(second.values(), expected);
  // The control: the same progress without the saved state does not give those values.
  Run unsaved(device, s, f16);
  unsaved.state.progress = {.step = kFirst, .micro_step = kFirst};
  unsaved.train_to(kTotal, device, f16);
  EXPECT_NE(unsaved.values(), expected);
  if (f16) {
    EXPECT_GT(expected_skips, 0);  // the scaler was mid-trajectory at the save
    EXPECT_EQ(second.scaler->get_scale(), straight.scaler->get_scale());
  }
  std::filesystem::remove_all(dir);
}

TEST_P(TrainingStateResume, BitwiseWithDropoutAndCheckpointing) {
  check_resume(device(), stream(), false, "resume_f32");
}

TEST_P(TrainingStateResume, BitwiseWithF16AndTheScalerMidTrajectory) {
  check_resume(device(), stream(), true, "resume_f16");
}

// The asynchronous save: device tensors copied into pinned memory on their streams at the step
// boundary, written by a thread while training goes on.
TEST_P(TrainingStateResume, BitwiseFromAnAsynchronousSave) {
  check_resume(device(), stream(), true, "resume_async", /*async=*/true);
}

INSTANTIATE_EMBER_DEVICES(TrainingStateResume);

}  // namespace
}  // namespace ember::testing
