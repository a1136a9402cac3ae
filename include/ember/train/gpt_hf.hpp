// GPT-2 weights in Hugging Face transformers' safetensors layout, so that a user with a GPT-2
// `model.safetensors` (GPT2LMHeadModel's or GPT2Model's) fine-tunes and samples it in ember, and
// transformers loads what ember trained.
//
//   ember (make_gpt)               transformers
//   embed.wte / embed.wpe          transformer.wte.weight / transformer.wpe.weight
//   h.N.attn.ln_1.*                transformer.h.N.ln_1.*
//   h.N.attn.attn.c_attn.*         transformer.h.N.attn.c_attn.*   (Conv1D: weight [in, out])
//   h.N.attn.attn.c_proj.*         transformer.h.N.attn.c_proj.*   (Conv1D)
//   h.N.mlp.ln_2.*                 transformer.h.N.ln_2.*
//   h.N.mlp.c_fc.* / c_proj.*      transformer.h.N.mlp.c_fc.* / c_proj.*   (Conv1D)
//   ln_f.*                         transformer.ln_f.*
//   lm_head (tied to embed.wte)    lm_head.weight: not written (tied, as transformers saves it)
//
// The token table's padding rows (GptConfig::vocab_multiple) are not in transformers' files:
// saving writes the first `vocab` rows, loading fills them and zeroes the padding.
//
// Conv1D keeps its weight as [in, out], the transpose of ember's Linear [out, in]. Both models
// split c_attn's output as [3, heads, head_dim] and use GELU's tanh form and LayerNorm eps 1e-5,
// so the logits agree (benchmarks/reference/compare_hf_logits.py checks it against transformers).
#pragma once

#include <string>

#include "ember/nn/module.hpp"
#include "ember/train/gpt.hpp"

namespace ember::train {

// Writes a make_gpt model's parameters to `path` in transformers' layout (f32, names with
// "transformer.", metadata {"format": "pt"}), and config.json beside it (as save_pretrained
// does: transformers needs it, and it holds the heads, which no tensor shows). `config` is the
// model's (a shape that disagrees with the model is an Error). The two replace their old versions
// together: both are written and fsynced before either is renamed into place, so a save that
// fails before the renames (a full disk) leaves the old pair. `path` may not be that config.json.
void save_gpt_hf(const std::string& path, nn::Module& gpt, const GptConfig& config);

// Loads `path` into a make_gpt model. Accepted: F32, F16 or BF16 tensors, names with or without
// "transformer.", the attention's mask buffers ("attn.bias", "attn.masked_bias": skipped), and
// "lm_head.weight" when it equals the token table (tied). A file that is not this model (another
// model's tensors, other shapes or layer counts, an untied head) is an Error listing every
// problem, and the model is unchanged.
void load_gpt_hf(const std::string& path, nn::Module& gpt);

// The configuration of the GPT-2 in `path`: vocabulary, context, width and layers from the
// tensors' shapes; heads from config.json beside the file ("n_head") when there is one, else
// width / 64 (every GPT-2 size has heads of 64). `device` and `seed` are left to the caller.
GptConfig gpt_config_of_hf(const std::string& path);

}  // namespace ember::train
