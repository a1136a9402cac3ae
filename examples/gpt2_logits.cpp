// gpt2_logits: a GPT-2 in transformers' safetensors layout (train/gpt_hf.hpp), loaded by ember,
// run on a sequence of token ids; its logits are written for comparison with transformers'
// (benchmarks/reference/compare_hf_logits.py). --export writes the loaded model back in that
// layout (save_gpt_hf), for transformers to load.
//
//   gpt2_logits [--device D] [--export FILE] MODEL.safetensors TOKEN_IDS OUT.safetensors
//
// TOKEN_IDS is comma-separated (e.g. 464,2068,7586); OUT holds "logits", f32 [T, vocab].
#include <algorithm>
#include <climits>
#include <string>
#include <string_view>
#include <vector>

#include "cli.hpp"
#include "ember/train/gpt_hf.hpp"
#include "ember/train/safetensors.hpp"

namespace {

using example::UsageError;

struct Config {
  std::string device = "cpu";
  std::string exported;
  std::string model, out;
  std::vector<int32_t> tokens;
};

constexpr const char* kUsage =
    R"(usage: gpt2_logits [options] MODEL.safetensors TOKEN_IDS OUT.safetensors

Loads a GPT-2 saved in Hugging Face transformers' layout (its heads from config.json beside it,
else width / 64), runs it on the comma-separated TOKEN_IDS and writes the logits, f32
[tokens, vocab], as "logits" in OUT.safetensors.

options:
  --device D       cpu (default), cuda, cuda:N
  --export FILE    also write the loaded model to FILE in transformers' layout
  -h, --help       show this help
)";

std::vector<int32_t> parse_tokens(const std::string& text) {
  std::vector<int32_t> out;
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t end = std::min(text.find(',', begin), text.size());
    const int64_t id = example::parse_int("TOKEN_IDS", text.substr(begin, end - begin), 0);
    if (id > INT32_MAX) throw UsageError{fmt::format("TOKEN_IDS: {} is not a token id", id)};
    out.push_back(static_cast<int32_t>(id));
    begin = end + 1;
  }
  return out;
}

Config parse_args(int argc, char** argv) {
  Config c;
  std::vector<std::string> rest;
  example::parse_options(argc, argv,
                         {{"--device", [&](const std::string& v) { c.device = v; }},
                          {"--export", [&](const std::string& v) { c.exported = v; }}},
                         kUsage, {}, &rest);
  if (rest.size() != 3) throw UsageError{"give MODEL.safetensors, TOKEN_IDS and OUT.safetensors"};
  c.model = rest[0];
  c.tokens = parse_tokens(rest[1]);
  c.out = rest[2];
  return c;
}

int run(const Config& c) {
  using namespace ember;
  const Device device = example::choose_device(c.device);
  train::GptConfig config = train::gpt_config_of_hf(c.model);
  config.device = device;
  auto model = train::make_gpt(config);
  train::load_gpt_hf(c.model, *model);
  const auto t = static_cast<int64_t>(c.tokens.size());
  EMBER_CHECK(t <= config.context, "{} tokens are more than the model's context of {}", t,
              config.context);
  Stream stream = current_stream(device);
  nn::Context ctx{stream, /*training=*/false};
  const Tensor ids = Tensor::from_vector(c.tokens, Shape{1, t}).to(stream);
  // The vocabulary's columns, without the padding's (-inf).
  const int64_t vocab = config.vocab, padded = config.padded_vocab();
  const Tensor all = model->forward(ctx, ids).reshape({t, padded}).to(Device::cpu());
  Tensor logits = Tensor::empty({t, vocab}, DType::f32, Device::cpu());
  for (int64_t r = 0; r < t; ++r) {
    std::copy_n(all.data<float>() + r * padded, vocab, logits.data<float>() + r * vocab);
  }
  StateDict out;
  out.insert("logits", logits);
  train::write_safetensors(c.out, out);
  if (!c.exported.empty()) train::save_gpt_hf(c.exported, *model, config);
  fmt::print("{} layers, {} heads, {} wide, vocab {}: logits [{}, {}] in {}\n", config.layers,
             config.heads, config.dim, config.vocab, t, config.vocab, c.out);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return example::run_main<Config>("gpt2_logits", argc, argv, parse_args, run);
}
