// Parameter groups (train::ParamGroup) on every test device: one optimizer with groups updates
// each group exactly as a separate optimizer with that group's settings would; learning rates
// are set per group; the state carries the grouping, and a state of another grouping is refused.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "ember/train/adamw.hpp"
#include "ember/train/lr_schedule.hpp"
#include "ember/train/sgd.hpp"
#include "ember/train/training_state.hpp"
#include "ops/device_cases.hpp"
#include "test_support.hpp"

namespace ember::testing {
namespace {

class ParamGroupsTest : public OnDevice {
 protected:
  // Parameters of ranks 2, 1, 2, 1 (a matrix, a bias, ...) with distinct values.
  std::vector<std::unique_ptr<nn::Parameter>> make_parameters() {
    std::vector<std::unique_ptr<nn::Parameter>> out;
    const std::vector<Shape> shapes = {Shape{3, 4}, Shape{4}, Shape{2, 5}, Shape{5}};
    for (size_t i = 0; i < shapes.size(); ++i) {
      Tensor v = Tensor::empty(shapes[i]).uniform_(10 + i, -1.0, 1.0);
      out.push_back(
          std::make_unique<nn::Parameter>(nn::make_parameter(fmt::format("p{}", i), on(v))));
    }
    return out;
  }
  // A gradient per parameter and step, the same for every copy of the parameters.
  void set_grads(const std::vector<std::unique_ptr<nn::Parameter>>& ps, int step) {
    for (size_t i = 0; i < ps.size(); ++i) {
      ps[i]->grad.copy_(on(Tensor::empty(ps[i]->value.shape()).uniform_(100 * step + i, -2, 2)));
    }
  }
  static std::vector<nn::Parameter*> pick(const std::vector<std::unique_ptr<nn::Parameter>>& ps,
                                          std::vector<size_t> which) {
    std::vector<nn::Parameter*> out;
    for (size_t i : which) out.push_back(ps[i].get());
    return out;
  }
};

TEST_P(ParamGroupsTest, GroupsUpdateAsSeparateOptimizersWould) {
  auto grouped = make_parameters();
  auto separate = make_parameters();
  const train::AdamWOptions options{.lr = 0.01f, .beta2 = 0.95f, .weight_decay = 0.5f};
  train::AdamW one({{.parameters = pick(grouped, {0, 2}), .lr = {}, .weight_decay = {}},
                    {.parameters = pick(grouped, {1, 3}), .lr = 0.03f, .weight_decay = 0.0f}},
                   options);
  train::AdamW first(pick(separate, {0, 2}), options);
  train::AdamW second(pick(separate, {1, 3}), {.lr = 0.03f, .beta2 = 0.95f, .weight_decay = 0.0f});
  EXPECT_EQ(one.param_groups(), 2u);
  EXPECT_EQ(one.group_of(0), 0u);
  EXPECT_EQ(one.group_of(2), 1u);  // numbered group after group: p1 is parameter 2
  EXPECT_EQ(one.lr(1), 0.03f);
  EXPECT_EQ(one.weight_decay(0), 0.5f);
  EXPECT_EQ(one.weight_decay(1), 0.0f);
  Stream s = stream();
  for (int step = 1; step <= 4; ++step) {
    set_grads(grouped, step);
    set_grads(separate, step);
    one.step(s);
    first.step(s);
    second.step(s);
  }
  for (size_t i = 0; i < grouped.size(); ++i) {
    EXPECT_EQ(grouped[i]->value.to_vector<float>(), separate[i]->value.to_vector<float>()) << i;
  }
  EXPECT_EQ(one.applied_steps(), 4);
}

TEST_P(ParamGroupsTest, SgdGroupsTooAndWeightDecayGroupsSplitByRank) {
  auto grouped = make_parameters();
  auto separate = make_parameters();
  std::vector<nn::Parameter*> all = pick(grouped, {0, 1, 2, 3});
  const std::vector<train::ParamGroup> groups = train::weight_decay_groups(all, 0.25f);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].parameters, pick(grouped, {0, 2}));  // the matrices
  EXPECT_EQ(groups[1].parameters, pick(grouped, {1, 3}));
  EXPECT_EQ(groups[0].weight_decay, 0.25f);
  EXPECT_EQ(groups[1].weight_decay, 0.0f);
  train::SGD one(groups, {.lr = 0.1f, .momentum = 0.9f});
  train::SGD first(pick(separate, {0, 2}), {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.25f});
  train::SGD second(pick(separate, {1, 3}), {.lr = 0.1f, .momentum = 0.9f});
  Stream s = stream();
  for (int step = 1; step <= 3; ++step) {
    set_grads(grouped, step);
    set_grads(separate, step);
    one.step(s);
    first.step(s);
    second.step(s);
  }
  for (size_t i = 0; i < grouped.size(); ++i) {
    EXPECT_EQ(grouped[i]->value.to_vector<float>(), separate[i]->value.to_vector<float>()) << i;
  }
}

TEST_P(ParamGroupsTest, LearningRatesPerGroupAndSchedules) {
  auto ps = make_parameters();
  train::AdamW opt({{.parameters = pick(ps, {0}), .lr = 0.5f, .weight_decay = {}},
                    {.parameters = pick(ps, {1, 2, 3}), .lr = {}, .weight_decay = {}}},
                   {.lr = 0.1f});
  EXPECT_EQ(opt.lr(0), 0.5f);
  EXPECT_EQ(opt.lr(1), 0.1f);
  opt.set_lr(1, 0.2f);
  EXPECT_EQ(opt.lr(0), 0.5f);
  EXPECT_EQ(opt.lr(1), 0.2f);
  opt.set_lr(0.3f);  // every group
  EXPECT_EQ(opt.lr(0), 0.3f);
  EXPECT_EQ(opt.lr(1), 0.3f);
  const auto warmup = train::LRSchedule::linear_warmup(1.0, 4);
  warmup.apply(opt, 0);  // step 0 of 4: 0.25
  EXPECT_EQ(opt.lr(0), 0.25f);
  EXPECT_EQ(opt.lr(1), 0.3f);
  expect_error([&] { opt.set_lr(2, 0.1f); }, "AdamW::set_lr: parameter group 2 of 2");
  expect_error([&] { (void)opt.lr(5); }, "AdamW::lr: parameter group 5 of 2");
  expect_error([&] { opt.set_lr(1, std::nanf("")); },
               "AdamW: parameter group 1: lr must be finite and >= 0, not nan");
  EXPECT_EQ(opt.lr(1), 0.3f);  // unchanged
  expect_error([&] { opt.set_lr(-1.0f); },
               "AdamW: parameter group 0: lr must be finite and >= 0, not -1");
  EXPECT_EQ(opt.lr(0), 0.25f);  // nothing changed: every group is checked first
}

TEST_P(ParamGroupsTest, BadGroupsAreErrors) {
  auto ps = make_parameters();
  expect_error(
      [&] {
        train::AdamW({{.parameters = pick(ps, {0, 1}), .lr = {}, .weight_decay = {}},
                      {.parameters = pick(ps, {1}), .lr = {}, .weight_decay = {}}});
      },
      "parameter 2 ('p1') is given twice");
  expect_error(
      [&] {
        train::AdamW({{.parameters = pick(ps, {0}), .lr = {}, .weight_decay = {}},
                      {.parameters = pick(ps, {1}),
                       .lr = {},
                       .weight_decay = std::numeric_limits<float>::infinity()}});
      },
      "AdamW: parameter group 1: weight_decay must be finite and >= 0, not inf");
  expect_error(
      [&] {
        train::SGD({{.parameters = pick(ps, {0}), .lr = -0.5f, .weight_decay = {}},
                    {.parameters = pick(ps, {1}), .lr = {}, .weight_decay = {}}});
      },
      "SGD: parameter group 0: lr must be finite and >= 0, not -0.5");
  expect_error(
      [&] {
        train::AdamW({{.parameters = pick(ps, {0}), .lr = 1e30f, .weight_decay = 1e30f},
                      {.parameters = pick(ps, {1}), .lr = {}, .weight_decay = {}}});
      },
      "AdamW: parameter group 0: lr * weight_decay overflows");
  // An empty group is allowed (a model without biases has no second group's parameters).
  train::AdamW empty_second({{.parameters = pick(ps, {0}), .lr = {}, .weight_decay = {}},
                             {.parameters = {}, .lr = {}, .weight_decay = {}}});
  EXPECT_EQ(empty_second.param_groups(), 2u);
}

TEST_P(ParamGroupsTest, StateCarriesTheGroupingAndResumesExactly) {
  auto ps = make_parameters();
  auto groups_of = [&](const std::vector<std::unique_ptr<nn::Parameter>>& p) {
    return std::vector<train::ParamGroup>{
        {.parameters = pick(p, {0, 2}), .lr = {}, .weight_decay = 0.1f},
        {.parameters = pick(p, {1, 3}), .lr = 0.02f, .weight_decay = 0.0f}};
  };
  train::AdamW opt(groups_of(ps), {.lr = 0.01f});
  Stream s = stream();
  set_grads(ps, 1);
  opt.step(s);
  StateDict state = opt.state_dict();
  ASSERT_NE(state.find("param_groups"), nullptr);
  EXPECT_EQ(state.at("param_groups").to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 1, 1}));

  // The same grouping resumes: the next steps give the bits of an unbroken run.
  auto copy = make_parameters();
  for (size_t i = 0; i < ps.size(); ++i) copy[i]->value.copy_(ps[i]->value);
  train::AdamW resumed(groups_of(copy), {.lr = 0.01f});
  resumed.load_state_dict(state);
  for (int step = 2; step <= 3; ++step) {
    set_grads(ps, step);
    set_grads(copy, step);
    opt.step(s);
    resumed.step(s);
  }
  for (size_t i = 0; i < ps.size(); ++i) {
    EXPECT_EQ(copy[i]->value.to_vector<float>(), ps[i]->value.to_vector<float>()) << i;
  }

  // Another grouping, one group, or a grouped state into one group: Errors, nothing loaded.
  auto other = make_parameters();
  train::AdamW regrouped({{.parameters = pick(other, {0}), .lr = {}, .weight_decay = {}},
                          {.parameters = pick(other, {2, 1, 3}), .lr = {}, .weight_decay = {}}});
  expect_error([&] { regrouped.load_state_dict(state); },
               "AdamW.load_state_dict: parameter 1 ('p2') is in parameter group 1, but in group 0 "
               "in the state: the parameters were grouped otherwise");
  EXPECT_EQ(regrouped.steps(), 0);
  train::AdamW single(pick(other, {0, 2, 1, 3}));
  expect_error([&] { single.load_state_dict(state); },
               "the state has 'param_groups' (an optimizer with several parameter groups); this "
               "one has one group");
  expect_error([&] { resumed.load_state_dict(single.state_dict()); },
               "this optimizer has 2 parameter groups; the state has no 'param_groups'");
}

TEST_P(ParamGroupsTest, TrainingStateSavesEveryGroupsLearningRate) {
  auto ps = make_parameters();
  auto groups_of = [&](const std::vector<std::unique_ptr<nn::Parameter>>& p) {
    return std::vector<train::ParamGroup>{
        {.parameters = pick(p, {0, 2}), .lr = {}, .weight_decay = {}},
        {.parameters = pick(p, {1, 3}), .lr = {}, .weight_decay = {}}};
  };
  train::AdamW opt(groups_of(ps), {.lr = 0.01f});
  opt.set_lr(0, 0.125f);
  opt.set_lr(1, 0.25f);
  train::TrainingState state;
  state.add_optimizer("optimizer", opt);
  const StateDict saved = state.components().front().save();
  EXPECT_EQ(saved.at("lr").to_vector<float>(), (std::vector<float>{0.125f, 0.25f}));

  auto copy = make_parameters();
  train::AdamW restored(groups_of(copy), {.lr = 0.01f});
  train::TrainingState into;
  into.add_optimizer("optimizer", restored);
  into.components().front().load(saved);
  EXPECT_EQ(restored.lr(0), 0.125f);
  EXPECT_EQ(restored.lr(1), 0.25f);

  // A bad learning rate is found by the check that runs before anything loads.
  StateDict bad;
  for (const auto& [key, t] : saved) {
    bad.insert(key, key == "lr"
                        ? Tensor::from_vector(std::vector<float>{0.5f, std::nanf("")}, Shape{2})
                        : t);
  }
  const std::vector<std::string> problems = into.components().front().check(bad);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("'lr' of parameter group 1 is nan"), std::string::npos) << problems[0];
  StateDict flat;
  for (const auto& [key, t] : saved) {
    flat.insert(key, key == "lr" ? Tensor::zeros({2, 1}) : t);
  }
  EXPECT_EQ(into.components().front().check(flat).size(), 1u);
}

TEST_P(ParamGroupsTest, EmptyOptimizersAndBadIndices) {
  auto ps = make_parameters();
  train::AdamW none(
      std::vector<train::ParamGroup>{{.parameters = {}, .lr = {}, .weight_decay = {}},
                                     {.parameters = {}, .lr = {}, .weight_decay = {}}});
  Stream s = stream();
  none.step(s);
  train::AdamW again(
      std::vector<train::ParamGroup>{{.parameters = {}, .lr = {}, .weight_decay = {}},
                                     {.parameters = {}, .lr = {}, .weight_decay = {}}});
  again.load_state_dict(none.state_dict());  // its own state loads
  EXPECT_EQ(again.steps(), 1);
  train::AdamW opt({{.parameters = pick(ps, {0}), .lr = {}, .weight_decay = {}},
                    {.parameters = pick(ps, {1}), .lr = {}, .weight_decay = {}}});
  expect_error([&] { (void)opt.group_of(2); }, "AdamW::group_of: parameter 2 of 2");
}

INSTANTIATE_EMBER_DEVICES(ParamGroupsTest);

}  // namespace
}  // namespace ember::testing
