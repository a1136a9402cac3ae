// Module trees: parameter names, state dicts, default seeds and misuse of saved activations.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ember/nn/activation.hpp"
#include "ember/nn/linear.hpp"
#include "ember/nn/mlp.hpp"
#include "ember/nn/seed.hpp"
#include "ember/nn/sequential.hpp"
#include "test_support.hpp"

namespace {

using ember::DType;
using ember::Stream;
using ember::Tensor;
using ember::testing::expect_error;
namespace nn = ember::nn;

std::vector<std::string> names_of(nn::Module& m) {
  std::vector<std::string> names;
  for (auto& [name, p] : m.named_parameters()) names.push_back(name);
  return names;
}

std::shared_ptr<nn::Sequential> block(uint64_t seed) {
  auto s = std::make_shared<nn::Sequential>();
  s->emplace<nn::Linear>(3, 4, nn::LinearOptions{.seed = seed})
      .emplace<nn::ReLU>()
      .emplace<nn::Linear>(4, 2, nn::LinearOptions{.bias = false, .seed = seed + 1});
  return s;
}

TEST(ModuleNames, NestedSequentialsGivePathsAndStayStable) {
  nn::Sequential net;
  net.add(block(1)).add("head", std::make_shared<nn::Linear>(2, 5));
  const std::vector<std::string> expected = {"0.0.weight", "0.0.bias", "0.2.weight", "head.weight",
                                             "head.bias"};
  EXPECT_EQ(names_of(net), expected);
  const auto first = net.parameters();
  EXPECT_EQ(names_of(net), expected);  // calling again renames nothing
  EXPECT_EQ(net.parameters(), first);  // same parameters, same order
  EXPECT_EQ(net.child("head").path(), "head");
  expect_error([&] { net.child("tail"); }, {"no such child", "0, head"});
}

TEST(ModuleNames, ChildAddedLaterToANestedSequentialGetsItsPath) {
  nn::Sequential net;
  auto inner = block(1);
  net.add("encoder", inner);
  inner->add("out", std::make_shared<nn::Linear>(2, 2, nn::LinearOptions{.seed = 3}));
  EXPECT_EQ(names_of(net).back(), "encoder.out.bias");
  nn::Linear alone(2, 2);
  EXPECT_EQ(names_of(alone), (std::vector<std::string>{"weight", "bias"}));
}

TEST(ModuleNames, BadNamesAndSecondRegistrationsAreErrors) {
  nn::Sequential net;
  auto layer = std::make_shared<nn::Linear>(2, 2);
  net.add("a", layer);
  expect_error([&] { net.add("a", std::make_shared<nn::ReLU>()); },
               "already has a child named 'a'");
  expect_error([&] { net.add("x.y", std::make_shared<nn::ReLU>()); }, "contain no '.'");
  expect_error([&] { net.add("", std::make_shared<nn::ReLU>()); }, "non-empty");
  expect_error([&] { net.add("b", layer); }, {"already registered (as 'a')", "appears once"});
  nn::Sequential other;
  expect_error([&] { other.add(layer); }, "already registered");
  expect_error([&] { net.add("n", nullptr); }, "null");
  auto outer = std::make_shared<nn::Sequential>();
  auto inner = std::make_shared<nn::Sequential>();
  outer->add("inner", inner);
  expect_error([&] { inner->add("loop", outer); }, "contains this Sequential");
}

TEST(ModuleNames, AChildOutlivingItsContainerIsARootAgain) {
  auto inner = block(1);
  {
    auto outer = std::make_shared<nn::Sequential>();
    outer->add("enc", inner);
    EXPECT_EQ(names_of(*inner).front(), "enc.0.weight");
  }
  EXPECT_EQ(inner->parent(), nullptr);
  EXPECT_EQ(names_of(*inner).front(), "0.weight");
  inner->add("more", std::make_shared<nn::ReLU>());  // no dangling parent walked
  nn::Sequential other;
  other.add("x", inner);
  EXPECT_EQ(names_of(other).front(), "x.0.weight");
}

TEST(ModuleNames, ADeadContainersCallbackLeavesWithIt) {
  auto layer = std::make_shared<nn::Linear>(2, 1);
  int calls = 0;
  {
    auto s = std::make_unique<nn::Sequential>();
    s->add(layer);
    s->set_grad_ready_callback([&](nn::Parameter&, Stream&) { ++calls; });
  }
  nn::Sequential fresh;
  fresh.add(layer);
  Stream stream;
  nn::Context ctx{stream};
  fresh.forward(ctx, Tensor::full({1, 2}, 1.0));
  fresh.backward(ctx, Tensor::full({1, 1}, 1.0));
  EXPECT_EQ(calls, 0);
}

TEST(ModuleSavedActivations, AFailedForwardSavesNothing) {
  Stream stream;
  nn::Context train{stream, true};
  auto net = block(1);
  expect_error([&] { net->forward(train, Tensor::full({2, 5}, 0.5)); }, "input must be [..., 3]");
  const Tensor y = net->forward(train, Tensor::full({2, 3}, 0.5));  // the corrected retry
  EXPECT_EQ(y.shape(), ember::Shape({2, 2}));
  auto two = std::make_shared<nn::Sequential>();
  two->emplace<nn::Linear>(3, 4).emplace<nn::Linear>(5, 2);  // the second does not fit
  expect_error([&] { two->forward(train, Tensor::full({2, 3}, 0.5)); }, "input must be [..., 5]");
  EXPECT_FALSE(two->has_saved());  // the first layer's saved input went too
}

TEST(ModuleSeeds, LayersWithoutASeedStartDifferentAndReproducibly) {
  nn::set_default_seed(11);
  nn::Linear a(8, 8), b(8, 8);
  const auto wa = a.weight().value.to_vector<float>(), wb = b.weight().value.to_vector<float>();
  EXPECT_NE(wa, wb);
  nn::set_default_seed(11);
  nn::Linear again(8, 8);
  EXPECT_EQ(again.weight().value.to_vector<float>(), wa);
  nn::set_default_seed(12);
  nn::Linear other_base(8, 8);
  EXPECT_NE(other_base.weight().value.to_vector<float>(), wa);
  // Explicit seeds are unaffected by the sequence.
  nn::Linear s1(8, 8, {.seed = 5}), s2(8, 8, {.seed = 5});
  EXPECT_EQ(s1.weight().value.to_vector<float>(), s2.weight().value.to_vector<float>());
  // make_mlp without a seed: distinct layers and distinct models.
  auto m1 = nn::make_mlp({.inputs = 4, .hidden = 4, .depth = 2, .outputs = 4});
  auto m2 = nn::make_mlp({.inputs = 4, .hidden = 4, .depth = 2, .outputs = 4});
  EXPECT_NE(m1->parameters()[2]->value.to_vector<float>(),
            m1->parameters()[4]->value.to_vector<float>());
  EXPECT_NE(m1->parameters()[0]->value.to_vector<float>(),
            m2->parameters()[0]->value.to_vector<float>());
}

TEST(ModuleState, StateDictRoundTripsIntoAnotherModel) {
  auto source = block(1), target = block(7);
  const ember::StateDict state = source->state_dict();
  ASSERT_EQ(state.size(), 3u);
  EXPECT_EQ(state.entries()[0].first, "0.weight");
  EXPECT_EQ(state.at("2.weight").data(), source->parameters()[2]->value.data());  // live tensors
  target->load_state_dict(state);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(target->parameters()[i]->value.to_vector<float>(),
              source->parameters()[i]->value.to_vector<float>());
  }
}

TEST(ModuleState, MismatchedStateDictIsAnErrorListingEverythingAndWritesNothing) {
  auto target = block(7);
  const std::vector<float> before = target->parameters()[0]->value.to_vector<float>();
  ember::StateDict state;
  state.insert("0.weight", Tensor::zeros({4, 3}));              // fine, but must not be written
  state.insert("0.bias", Tensor::zeros({5}));                   // wrong shape
  state.insert("extra", Tensor::zeros({1}));                    // unexpected
  state.insert("2.weight", Tensor::zeros({2, 4}, DType::f16));  // wrong dtype
  expect_error([&] { target->load_state_dict(state); },
               {"unexpected (1): extra", "0.bias (expected [4] f32, got [5] f32)",
                "2.weight (expected [2, 4] f32, got [2, 4] f16)"});
  EXPECT_EQ(target->parameters()[0]->value.to_vector<float>(), before);
  ember::StateDict partial;
  partial.insert("0.weight", Tensor::zeros({4, 3}));
  expect_error([&] { target->load_state_dict(partial); }, {"missing (2): 0.bias, 2.weight"});
  // The message names the class, not every child (name() describes them all).
  try {
    target->load_state_dict(partial);
    ADD_FAILURE() << "no Error";
  } catch (const ember::Error& e) {
    EXPECT_TRUE(std::string(e.what()).starts_with("Sequential.load_state_dict: ")) << e.what();
  }
  expect_error([&] { partial.insert("0.weight", Tensor::zeros({1})); }, "already present");
  expect_error([&] { partial.insert("u", Tensor()); }, "undefined");
  expect_error([&] { partial.at("nope"); }, "no entry 'nope'");
}

TEST(ModuleSavedActivations, ForwardTwiceBeforeBackwardIsAnError) {
  Stream stream;
  nn::Context train{stream, true}, eval{stream, false};
  auto net = block(1);
  const Tensor x = Tensor::full({2, 3}, 0.5);
  net->forward(train, x);
  expect_error([&] { net->forward(train, x); },
               {"Linear::forward at 0", "forward ran again", "drop_saved"});
  net->forward(eval, x);  // inference saves nothing and checks nothing
  const Tensor y = net->forward(eval, x);
  net->backward(train, Tensor::full(y.shape(), 1.0));
  net->forward(train, x);  // backward consumed the saved activations
  net->drop_saved();
  net->forward(train, x);  // so did drop_saved
  nn::ReLU relu;
  relu.forward(train, x);
  expect_error([&] { relu.forward(train, x); }, "ReLU::forward");
}

}  // namespace
