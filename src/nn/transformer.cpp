#include "ember/nn/transformer.hpp"

#include "ember/nn/attention.hpp"
#include "ember/nn/dropout.hpp"
#include "ember/nn/layer_norm.hpp"
#include "ember/nn/linear.hpp"
#include "ember/nn/residual.hpp"

namespace ember::nn {

std::shared_ptr<Sequential> make_transformer_block(const TransformerBlockOptions& o) {
  EMBER_CHECK(o.dim > 0 && o.heads > 0 && o.dim % o.heads == 0 && o.expansion > 0,
              "make_transformer_block: dim {} must be a positive multiple of heads {}, and the "
              "expansion {} positive",
              o.dim, o.heads, o.expansion);
  const auto seed = [&](uint64_t i) -> std::optional<uint64_t> {
    if (!o.seed) return std::nullopt;
    return *o.seed * 1000003u + i;
  };
  auto attention = std::make_shared<Sequential>();
  // The LayerNorms feed Linears only: under autocast they write the compute dtype the Linears
  // read (LayerNormOptions::compute_dtype_output), the same numbers with one pass less each way.
  const LayerNormOptions norm{.device = o.device, .compute_dtype_output = true};
  attention->add("ln_1", std::make_shared<LayerNorm>(o.dim, norm));
  attention->add("attn", make_causal_self_attention({.dim = o.dim,
                                                     .heads = o.heads,
                                                     .dropout = o.dropout,
                                                     .seed = seed(0),
                                                     .device = o.device}));
  auto mlp = std::make_shared<Sequential>();
  mlp->add("ln_2", std::make_shared<LayerNorm>(o.dim, norm));
  mlp->add("c_fc", std::make_shared<Linear>(o.dim, o.expansion * o.dim,
                                            LinearOptions{.seed = seed(1),
                                                          .device = o.device,
                                                          .activation = ops::Activation::gelu}));
  mlp->add("c_proj", std::make_shared<Linear>(o.expansion * o.dim, o.dim,
                                              LinearOptions{.seed = seed(2), .device = o.device}));
  mlp->add("dropout", std::make_shared<Dropout>(DropoutOptions{.p = o.dropout, .seed = seed(3)}));
  auto block = std::make_shared<Sequential>();
  block->add("attn", std::make_shared<Residual>(attention));
  block->add("mlp", std::make_shared<Residual>(mlp));
  return block;
}

}  // namespace ember::nn
