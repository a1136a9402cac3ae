#include "ember/nn/mlp.hpp"

#include "ember/nn/linear.hpp"

namespace ember::nn {

std::shared_ptr<Sequential> make_mlp(const MlpOptions& o) {
  EMBER_CHECK(o.inputs > 0 && o.outputs > 0 && o.depth >= 0 && (o.depth == 0 || o.hidden > 0),
              "make_mlp: need inputs > 0, outputs > 0, depth >= 0 and hidden > 0 (got inputs={}, "
              "hidden={}, depth={}, outputs={})",
              o.inputs, o.hidden, o.depth, o.outputs);
  auto mlp = std::make_shared<Sequential>();
  int64_t width = o.inputs;
  uint64_t layer = 0;
  // Each layer gets its own seed so that layers of the same shape differ.
  auto seed_of = [&](uint64_t i) -> std::optional<uint64_t> {
    if (!o.seed) return std::nullopt;
    return *o.seed * 1000003ull + i;
  };
  // Hidden layers apply their activation in the matmul's epilogue.
  const ops::Activation act =
      o.activation == ActivationKind::relu ? ops::Activation::relu : ops::Activation::gelu;
  for (int64_t i = 0; i < o.depth; ++i) {
    mlp->emplace<Linear>(
        width, o.hidden,
        LinearOptions{.seed = seed_of(layer++), .device = o.device, .activation = act});
    width = o.hidden;
  }
  mlp->emplace<Linear>(width, o.outputs, LinearOptions{.seed = seed_of(layer), .device = o.device});
  return mlp;
}

}  // namespace ember::nn
