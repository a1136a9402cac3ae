#include "ember/train/residual_mlp.hpp"

#include "ember/nn/checkpoint.hpp"
#include "ember/nn/dropout.hpp"
#include "ember/nn/layer_norm.hpp"
#include "ember/nn/linear.hpp"
#include "ember/nn/residual.hpp"

namespace ember::train {
namespace {
// Seed of sub-layer k of a layer seeded `seed` (splitmix-style, so nearby seeds differ).
std::optional<uint64_t> derive(std::optional<uint64_t> seed, uint64_t k) {
  if (!seed) return std::nullopt;
  uint64_t x = *seed * 0x9E3779B97F4A7C15ull + k + 1;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  return x ^ (x >> 29);
}
}  // namespace

std::shared_ptr<nn::Module> make_residual_block(int64_t width, int64_t expansion, float dropout,
                                                std::optional<uint64_t> seed, Device device) {
  EMBER_CHECK(width > 0 && expansion > 0,
              "make_residual_block: width ({}) and expansion ({}) must be positive", width,
              expansion);
  auto body = std::make_shared<nn::Sequential>();
  body->add("norm", std::make_shared<nn::LayerNorm>(width, nn::LayerNormOptions{.device = device}));
  body->add("up",
            std::make_shared<nn::Linear>(width, expansion * width,
                                         nn::LinearOptions{.seed = derive(seed, 0),
                                                           .device = device,
                                                           .activation = ops::Activation::gelu}));
  body->add("down", std::make_shared<nn::Linear>(
                        expansion * width, width,
                        nn::LinearOptions{.seed = derive(seed, 1), .device = device}));
  body->add("drop", std::make_shared<nn::Dropout>(
                        nn::DropoutOptions{.p = dropout, .seed = derive(seed, 2)}));
  return std::make_shared<nn::Residual>(body);
}

std::shared_ptr<nn::Sequential> make_residual_mlp(const ResidualMlpOptions& o) {
  EMBER_CHECK(o.inputs > 0 && o.width > 0 && o.depth >= 0 && o.expansion > 0 && o.outputs > 0,
              "make_residual_mlp: inputs ({}), width ({}), expansion ({}) and outputs ({}) must be "
              "positive and depth ({}) >= 0",
              o.inputs, o.width, o.expansion, o.outputs, o.depth);
  auto model = std::make_shared<nn::Sequential>();
  model->add(std::make_shared<nn::Linear>(
      o.inputs, o.width, nn::LinearOptions{.seed = derive(o.seed, 0), .device = o.device}));
  for (int64_t i = 0; i < o.depth; ++i) {
    auto block = make_residual_block(o.width, o.expansion, o.dropout,
                                     derive(o.seed, static_cast<uint64_t>(i + 1)), o.device);
    if (o.checkpoint) block = std::make_shared<nn::Checkpoint>(block, o.checkpoint_policy);
    model->add(block);
  }
  model->add("norm",
             std::make_shared<nn::LayerNorm>(o.width, nn::LayerNormOptions{.device = o.device}));
  model->add("head",
             std::make_shared<nn::Linear>(
                 o.width, o.outputs,
                 nn::LinearOptions{.seed = derive(o.seed, static_cast<uint64_t>(o.depth + 1)),
                                   .device = o.device}));
  return model;
}

}  // namespace ember::train
