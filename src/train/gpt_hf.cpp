#include "ember/train/gpt_hf.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <optional>
#include <regex>
#include <set>
#include <vector>

#include "ember/core/error.hpp"
#include "ember/nn/embedding.hpp"
#include "ember/nn/sequential.hpp"
#include "ember/train/safetensors.hpp"
#include "train/durable_files.hpp"
#include "train/safetensors_internal.hpp"

namespace ember::train {
namespace {

constexpr const char* kPrefix = "transformer.";

// A parameter's name in transformers' GPT-2 (without "transformer."), and whether its weight is
// a Conv1D's ([in, out]: ember's transposed).
struct HfName {
  std::string name;
  bool transposed = false;
};

std::optional<HfName> hf_name_of(const std::string& ember) {
  if (ember == "embed.wte") return HfName{"wte.weight"};
  if (ember == "embed.wpe") return HfName{"wpe.weight"};
  if (ember == "ln_f.weight" || ember == "ln_f.bias") return HfName{ember};
  static const std::regex block(
      R"(h\.(\d+)\.(.*\.)?(ln_1|ln_2|c_attn|c_proj|c_fc)\.(weight|bias))");
  std::smatch m;
  if (!std::regex_match(ember, m, block)) return std::nullopt;
  const std::string layer = m[1], path = m[2], leaf = m[3], kind = m[4];
  const bool linear = leaf != "ln_1" && leaf != "ln_2";
  std::string hf;
  if (!linear) {
    hf = fmt::format("h.{}.{}.{}", layer, leaf, kind);
  } else if (leaf == "c_attn" || (leaf == "c_proj" && path.find("attn.") != std::string::npos)) {
    hf = fmt::format("h.{}.attn.{}.{}", layer, leaf, kind);
  } else {
    hf = fmt::format("h.{}.mlp.{}.{}", layer, leaf, kind);
  }
  return HfName{hf, linear && kind == "weight"};
}

// A 2-D f32 CPU tensor's transpose.
Tensor transposed(const Tensor& t) {
  const int64_t rows = t.shape()[0], cols = t.shape()[1];
  Tensor out = Tensor::empty({cols, rows}, DType::f32, Device::cpu());
  const float* in = t.data<float>();
  float* o = out.data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) o[c * rows + r] = in[r * cols + c];
  }
  return out;
}

Shape reversed(const Shape& s) {
  return Shape{s[1], s[0]};
}

// The model's parameters as (ember key, HF name), in its state_dict order; a parameter with no
// transformers name means the model is not make_gpt's.
std::vector<std::pair<std::string, HfName>> names_of(const StateDict& state, const char* who) {
  std::vector<std::pair<std::string, HfName>> out;
  for (const auto& [key, tensor] : state) {
    const std::optional<HfName> hf = hf_name_of(key);
    if (!hf) continue;  // not a parameter (a dropout's seed): not in transformers' file
    out.emplace_back(key, *hf);
  }
  EMBER_CHECK(std::any_of(out.begin(), out.end(),
                          [](const auto& e) { return e.second.name == "wte.weight"; }),
              "{}: the model is not a make_gpt GPT-2 (it has no 'embed.wte')", who);
  return out;
}

// The vocabulary: the rows of the token table that transformers' files hold. The table of a
// make_gpt model may have more (padding), which its TokenPositionEmbedding knows.
int64_t vocab_of(nn::Module& gpt, const StateDict& state) {
  if (auto* model = dynamic_cast<nn::Sequential*>(&gpt)) {
    const std::vector<std::string>& children = model->child_names();
    if (std::find(children.begin(), children.end(), "embed") != children.end()) {
      if (auto* embed = dynamic_cast<nn::TokenPositionEmbedding*>(&model->child("embed"))) {
        return embed->vocab();
      }
    }
  }
  return state.at("embed.wte").shape()[0];
}

// `table` [vocab, dim] (f32, on the CPU) followed by zero rows up to `rows`.
Tensor padded_rows(const Tensor& table, int64_t rows) {
  if (table.shape()[0] == rows) return table;
  Tensor out = Tensor::zeros({rows, table.shape()[1]}, DType::f32, Device::cpu());
  out.slice(0, table.shape()[0]).copy_(table);
  return out;
}

std::string strip_prefix(const std::string& key) {
  return key.starts_with(kPrefix) ? key.substr(std::char_traits<char>::length(kPrefix)) : key;
}

// The file's tensors by transformers' name without the prefix; a name there twice (with and
// without "transformer.") is an Error: which one is meant is not clear.
std::map<std::string, const Tensor*> by_name(const Safetensors& file, const std::string& path,
                                             const char* who) {
  std::map<std::string, const Tensor*> out;
  for (const auto& [key, tensor] : file.tensors) {
    EMBER_CHECK(out.emplace(strip_prefix(key), &tensor).second,
                "{}: '{}' holds '{}' both with and without the prefix '{}'", who, path,
                strip_prefix(key), kPrefix);
  }
  return out;
}

// The bits of a float tensor as f32 (nan == nan here, unlike the values).
bool same_values(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return false;
  const std::vector<float> x = a.to(DType::f32).to_vector<float>();
  const std::vector<float> y = b.to(DType::f32).to_vector<float>();
  return std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

bool is_float(const Tensor& t) {
  return t.dtype() == DType::f32 || t.dtype() == DType::f16 || t.dtype() == DType::bf16;
}

bool is_mask_buffer(const std::string& name) {
  return name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias");
}

std::string list(const std::vector<std::string>& problems) {
  constexpr size_t kShown = 8;
  std::string out;
  for (size_t i = 0; i < std::min(problems.size(), kShown); ++i) {
    out += (i ? "; " : "") + problems[i];
  }
  if (problems.size() > kShown) out += fmt::format("; and {} more", problems.size() - kShown);
  return out;
}

}  // namespace

void save_gpt_hf(const std::string& path, nn::Module& gpt, const GptConfig& config) {
  const StateDict state = gpt.state_dict();
  const auto names = names_of(state, "save_gpt_hf");
  const Shape table = state.at("embed.wte").shape(), positions = state.at("embed.wpe").shape();
  const int64_t vocab = vocab_of(gpt, state);
  const auto layers = std::count_if(names.begin(), names.end(), [](const auto& e) {
    return e.second.name.ends_with("ln_1.weight");
  });
  EMBER_CHECK(vocab == config.vocab && table == (Shape{config.padded_vocab(), config.dim}) &&
                  positions[0] == config.context && layers == config.layers && config.heads >= 1 &&
                  config.dim % config.heads == 0,
              "save_gpt_hf: the model (vocab {} in {} rows, context {}, width {}, {} layers) is "
              "not the configuration's (vocab {} in {} rows, context {}, width {}, {} layers, {} "
              "heads)",
              vocab, table[0], positions[0], table[1], layers, config.vocab, config.padded_vocab(),
              config.context, config.dim, config.layers, config.heads);
  StateDict out;
  for (const auto& [key, hf] : names) {
    Tensor host = state.at(key).to(Device::cpu()).to(DType::f32);
    if (key == "embed.wte") host = host.slice(0, vocab);  // without the padding
    out.insert(kPrefix + hf.name, hf.transposed ? transposed(host) : host);
  }
  const nlohmann::json j = {{"model_type", "gpt2"},       {"architectures", {"GPT2LMHeadModel"}},
                            {"vocab_size", config.vocab}, {"n_positions", config.context},
                            {"n_embd", config.dim},       {"n_layer", config.layers},
                            {"n_head", config.heads},     {"activation_function", "gelu_new"},
                            {"layer_norm_epsilon", 1e-5}, {"resid_pdrop", config.dropout},
                            {"embd_pdrop", 0.0},          {"attn_pdrop", 0.0},
                            {"tie_word_embeddings", true}};
  const std::filesystem::path file = std::filesystem::path(path).parent_path() / "config.json";
  // The files the two writes would write, symlinks followed (also dangling ones).
  EMBER_CHECK(durable::final_target(path) != durable::final_target(file),
              "save_gpt_hf: '{}' is the config.json beside it: name the weights otherwise "
              "(model.safetensors)",
              path);
  // Both written and on the disk before either replaces its old file: a failure meanwhile (a
  // full disk, a config.json that cannot be written) leaves the old pair as it was, not new
  // weights beside an old config. Only the two renames come after.
  durable::FileWriter weights(path, "save_gpt_hf");
  durable::FileWriter settings(file, "save_gpt_hf");
  write_safetensors(weights, out, {{"format", "pt"}});
  const std::string text = j.dump(2) + "\n";
  settings.write(text.data(), text.size());
  weights.sync();
  settings.sync();
  weights.commit();
  settings.commit();
}

void load_gpt_hf(const std::string& path, nn::Module& gpt) {
  const StateDict state = gpt.state_dict();
  const auto names = names_of(state, "load_gpt_hf");
  const Safetensors file = read_safetensors(path);
  // By transformers' name without the prefix.
  const std::map<std::string, const Tensor*> given = by_name(file, path, "load_gpt_hf");

  if (!given.contains("wte.weight")) {
    std::vector<std::string> names_in_file;
    for (const auto& [key, tensor] : file.tensors) names_in_file.push_back("'" + key + "'");
    EMBER_THROW(
        "load_gpt_hf: '{}' is not a GPT-2 in transformers' layout: it has no 'wte.weight' (nor "
        "'transformer.wte.weight'); it holds {} tensor(s): {}",
        path, names_in_file.size(), list(names_in_file));
  }
  const int64_t vocab = vocab_of(gpt, state);
  std::vector<std::string> problems;
  std::set<std::string> used;
  for (const auto& [key, hf] : names) {
    used.insert(hf.name);
    const auto it = given.find(hf.name);
    Shape want = hf.transposed ? reversed(state.at(key).shape()) : state.at(key).shape();
    if (key == "embed.wte") want = Shape{vocab, want[1]};  // the file has no padding
    if (it == given.end()) {
      problems.push_back(fmt::format("'{}' {} is missing", hf.name, want.to_string()));
      continue;
    }
    const Tensor& t = *it->second;
    if (t.dtype() != DType::f32 && t.dtype() != DType::f16 && t.dtype() != DType::bf16) {
      problems.push_back(
          fmt::format("'{}' is {}, not F32, F16 or BF16", hf.name, dtype_name(t.dtype())));
    } else if (t.shape() != want) {
      problems.push_back(fmt::format("'{}' is {} in the file; this model needs {}", hf.name,
                                     t.shape().to_string(), want.to_string()));
    }
  }
  for (const auto& [name, tensor] : given) {
    if (used.contains(name) || is_mask_buffer(name) || name == "lm_head.weight") continue;
    problems.push_back(fmt::format("unexpected tensor '{}' {}", name, tensor->shape().to_string()));
  }
  const auto wte = given.find("wte.weight");
  const auto head = given.find("lm_head.weight");
  if (problems.empty() && head != given.end()) {
    const Tensor& h = *head->second;
    if (!is_float(h) || h.shape() != wte->second->shape()) {
      const Tensor& w = *wte->second;
      problems.push_back(fmt::format("'lm_head.weight' is {} {}, not the token table's {} {}",
                                     dtype_name(h.dtype()), h.shape().to_string(),
                                     dtype_name(w.dtype()), w.shape().to_string()));
    } else if (!same_values(h, *wte->second)) {
      problems.push_back(
          "'lm_head.weight' differs from 'wte.weight': an untied output head, which the tied "
          "GPT-2 of make_gpt cannot hold");
    }
  }
  const Shape table = state.at("embed.wte").shape(), positions = state.at("embed.wpe").shape();
  EMBER_CHECK(problems.empty(),
              "load_gpt_hf: '{}' is not a GPT-2 of this model's shape (vocab {}, context {}, "
              "width {}, {} layers) in transformers' layout: {}",
              path, vocab, positions[0], table[1],
              std::count_if(names.begin(), names.end(),
                            [](const auto& e) { return e.second.name.ends_with("ln_1.weight"); }),
              list(problems));

  // The file's tensors under ember's names; the rest of the state (dropout seeds) stays.
  const std::map<std::string, HfName> hf_of(names.begin(), names.end());
  StateDict replaced;
  for (const auto& [key, value] : state) {
    const auto hf = hf_of.find(key);
    if (hf == hf_of.end()) {
      replaced.insert(key, value);
      continue;
    }
    const Tensor f32 = given.at(hf->second.name)->to(DType::f32);
    if (key == "embed.wte") {
      replaced.insert(key, padded_rows(f32, value.shape()[0]));  // zero padding rows
      continue;
    }
    replaced.insert(key, hf->second.transposed ? transposed(f32) : f32);
  }
  gpt.load_state_dict(replaced);
}

GptConfig gpt_config_of_hf(const std::string& path) {
  const Safetensors file = read_safetensors(path);
  const std::map<std::string, const Tensor*> given = by_name(file, path, "gpt_config_of_hf");
  const auto shape_of = [&](const char* name) -> Shape {
    const auto it = given.find(name);
    EMBER_CHECK(it != given.end() && it->second->rank() == 2,
                "gpt_config_of_hf: '{}' is not a GPT-2 in transformers' layout: it has no 2-D "
                "'{}' (nor '{}{}')",
                path, name, kPrefix, name);
    return it->second->shape();
  };
  const Shape wte = shape_of("wte.weight"), wpe = shape_of("wpe.weight");
  EMBER_CHECK(wte[1] == wpe[1],
              "gpt_config_of_hf: '{}': the token table is {} wide but the position table {}", path,
              wte[1], wpe[1]);
  int64_t layers = 0;
  while (given.contains(fmt::format("h.{}.ln_1.weight", layers))) ++layers;
  GptConfig c;
  c.vocab = wte[0];
  c.context = wpe[0];
  c.dim = wte[1];
  c.layers = layers;
  c.heads = std::max<int64_t>(1, c.dim / 64);
  const std::filesystem::path config = std::filesystem::path(path).parent_path() / "config.json";
  if (std::filesystem::is_regular_file(config)) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(read_whole_file(config.string(), 1 << 20));
    } catch (const nlohmann::json::exception& e) {
      EMBER_THROW("gpt_config_of_hf: '{}' is not a valid config.json: {}", config.string(),
                  e.what());
    }
    EMBER_CHECK(j.is_object(), "gpt_config_of_hf: '{}' is not a valid config.json: not an object",
                config.string());
    // Each setting it has: an integer that agrees with the tensors (n_head: the heads).
    auto setting = [&](const char* key) -> std::optional<int64_t> {
      if (!j.contains(key)) return std::nullopt;
      const nlohmann::json& v = j.at(key);
      EMBER_CHECK(v.is_number_integer(),
                  "gpt_config_of_hf: '{}': \"{}\" must be an integer, not {}", config.string(), key,
                  v.dump());
      return v.get<int64_t>();
    };
    for (const auto& [key, have] : {std::pair<const char*, int64_t>{"vocab_size", c.vocab},
                                    {"n_positions", c.context},
                                    {"n_embd", c.dim},
                                    {"n_layer", layers}}) {
      const std::optional<int64_t> said = setting(key);
      EMBER_CHECK(!said || *said == have,
                  "gpt_config_of_hf: '{}' says \"{}\": {}, but the tensors of '{}' have {}",
                  config.string(), key, *said, path, have);
    }
    if (const std::optional<int64_t> heads = setting("n_head")) c.heads = *heads;
  }
  EMBER_CHECK(layers >= 1, "gpt_config_of_hf: '{}' has no transformer block ('h.0.ln_1.weight')",
              path);
  EMBER_CHECK(c.heads >= 1 && c.dim % c.heads == 0,
              "gpt_config_of_hf: '{}': {} heads do not divide the width {}", path, c.heads, c.dim);
  return c;
}

}  // namespace ember::train
