// GPT-2 in transformers' safetensors layout (train/gpt_hf.hpp): the names and Conv1D orientation
// written, a round trip to the same logits, a file written by hand in transformers' layout (no
// "transformer." prefix, bf16, mask buffers, a tied lm_head) loading exactly, the configuration
// read from a file, and the files of other models refused with every problem named.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "ember/train/gpt_hf.hpp"
#include "ember/train/residual_mlp.hpp"
#include "ember/train/safetensors.hpp"
#include "test_support.hpp"
#include "train/file_faults.hpp"

namespace {

using ember::DType;
using ember::Shape;
using ember::StateDict;
using ember::Tensor;
using ember::testing::expect_error;
namespace fs = std::filesystem;
namespace nn = ember::nn;
namespace train = ember::train;

train::GptConfig tiny(uint64_t seed, int64_t layers = 2, int64_t dim = 16) {
  return {.vocab = 40, .context = 16, .layers = layers, .heads = 2, .dim = dim, .seed = seed};
}

struct Dir {
  fs::path path = fs::temp_directory_path() / fmt::format("ember_gpt_hf_{}", ::getpid());
  Dir() {
    fs::remove_all(path);  // a crashed run's, under a reused pid
    fs::create_directories(path);
  }
  ~Dir() { fs::remove_all(path); }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

Tensor logits_of(nn::Module& model) {
  ember::Stream stream;
  nn::Context ctx{stream, /*training=*/false};
  const Tensor ids =
      Tensor::from_vector(std::vector<int32_t>{3, 1, 4, 1, 5, 9, 2, 6, 39, 0}, Shape{1, 10});
  return model.forward(ctx, ids).to(ember::Device::cpu());
}

// [rows, cols] -> [cols, rows], written out here independently of the library.
Tensor transpose(const Tensor& t) {
  const int64_t rows = t.shape()[0], cols = t.shape()[1];
  const std::vector<float> in = t.to_vector<float>();
  std::vector<float> out(in.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) out[c * rows + r] = in[r * cols + c];
  }
  return Tensor::from_vector(out, Shape{cols, rows});
}

// What transformers' GPT2Model.save_pretrained writes for `model`, spelled out by hand: no
// prefix, Conv1D weights [in, out], and the causal-mask buffers older versions saved.
StateDict hand_written_hf(nn::Module& model, int64_t layers, DType dtype) {
  const StateDict s = model.state_dict();
  StateDict out;
  auto put = [&](const std::string& name, const Tensor& t) { out.insert(name, t.to(dtype)); };
  const Tensor table = s.at("embed.wte").slice(0, 40);  // the vocabulary, without the padding
  put("wte.weight", table);
  put("wpe.weight", s.at("embed.wpe"));
  for (int64_t l = 0; l < layers; ++l) {
    const std::string e = fmt::format("h.{}.", l), h = fmt::format("h.{}.", l);
    put(h + "ln_1.weight", s.at(e + "attn.ln_1.weight"));
    put(h + "ln_1.bias", s.at(e + "attn.ln_1.bias"));
    put(h + "attn.c_attn.weight", transpose(s.at(e + "attn.attn.c_attn.weight")));
    put(h + "attn.c_attn.bias", s.at(e + "attn.attn.c_attn.bias"));
    put(h + "attn.c_proj.weight", transpose(s.at(e + "attn.attn.c_proj.weight")));
    put(h + "attn.c_proj.bias", s.at(e + "attn.attn.c_proj.bias"));
    out.insert(h + "attn.bias", Tensor::full({1, 1, 16, 16}, 1.0));
    put(h + "ln_2.weight", s.at(e + "mlp.ln_2.weight"));
    put(h + "ln_2.bias", s.at(e + "mlp.ln_2.bias"));
    put(h + "mlp.c_fc.weight", transpose(s.at(e + "mlp.c_fc.weight")));
    put(h + "mlp.c_fc.bias", s.at(e + "mlp.c_fc.bias"));
    put(h + "mlp.c_proj.weight", transpose(s.at(e + "mlp.c_proj.weight")));
    put(h + "mlp.c_proj.bias", s.at(e + "mlp.c_proj.bias"));
  }
  put("ln_f.weight", s.at("ln_f.weight"));
  put("ln_f.bias", s.at("ln_f.bias"));
  put("lm_head.weight", table);  // tied: the same values
  return out;
}

// The weights and config.json replace their old versions together: when config.json cannot be
// written, the weights are not replaced either (before, they were, beside the old config), and
// nothing temporary stays behind. The weights cannot be that config.json.
TEST(GptHf, SaveReplacesTheWeightsAndTheConfigTogether) {
  Dir dir;
  const std::string weights = dir.file("model.safetensors");
  train::save_gpt_hf(weights, *train::make_gpt(tiny(3)), tiny(3));
  const auto bytes_of = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  const std::string old_weights = bytes_of(weights);
  fs::remove(dir.file("config.json"));
  fs::create_directory(dir.file("config.json"));  // cannot be written as a file
  train::GptConfig other = tiny(3);
  other.seed = 99;
  expect_error([&] { train::save_gpt_hf(weights, *train::make_gpt(other), other); },
               "save_gpt_hf: '" + dir.file("config.json") + "' is a directory");
  EXPECT_EQ(bytes_of(weights), old_weights);
  const auto names_only = [&](std::vector<std::string> want) {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir.path)) {
      names.push_back(entry.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    EXPECT_EQ(names, want);
  };
  names_only({"config.json", "model.safetensors"});
  fs::remove(dir.file("config.json"));
  expect_error([&] { train::save_gpt_hf(dir.file("config.json"), *train::make_gpt(other), other); },
               "save_gpt_hf: '" + dir.file("config.json") +
                   "' is the config.json beside it: name the weights otherwise");
  EXPECT_FALSE(fs::exists(dir.file("config.json")));
  // Not through a symlink either, also one whose target does not exist yet.
  fs::create_symlink("config.json", dir.file("link.safetensors"));
  expect_error(
      [&] { train::save_gpt_hf(dir.file("link.safetensors"), *train::make_gpt(other), other); },
      "is the config.json beside it");
  fs::remove(dir.file("link.safetensors"));
  EXPECT_FALSE(fs::exists(dir.file("config.json")));
  // A config.json that links to a file not there yet: a failed save (the weights over a size
  // limit) does not create it; a save that works does, and the link stays.
  fs::create_symlink("elsewhere.json", dir.file("config.json"));
  {
    const ember::testing::FileSizeLimit limit(1000);  // bytes: the weights take more
    expect_error([&] { train::save_gpt_hf(weights, *train::make_gpt(other), other); },
                 "File too large");
  }
  EXPECT_EQ(bytes_of(weights), old_weights);
  EXPECT_FALSE(fs::exists(dir.file("elsewhere.json")));
  train::save_gpt_hf(weights, *train::make_gpt(other), other);
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(dir.file("config.json"))));
  EXPECT_TRUE(fs::is_regular_file(dir.file("elsewhere.json")));
  fs::remove(dir.file("config.json"));
  fs::remove(dir.file("elsewhere.json"));
  // Both are on the disk before either is renamed: when the config's temporary cannot be named
  // (the second linkat fails, after the weights' has worked), the weights are not replaced either.
  train::save_gpt_hf(weights, *train::make_gpt(tiny(3)), tiny(3));
  if (!ember::testing::unnamed_temporaries_in(dir.path)) {
    std::cout << "[ note ] no O_TMPFILE in " << dir.path << ": the renames' order is not tested\n";
  } else {
    const ember::testing::FailingLinkat second(EIO, /*successes=*/1);
    expect_error([&] { train::save_gpt_hf(weights, *train::make_gpt(other), other); },
                 "save_gpt_hf: cannot write '" + dir.file("config.json") +
                     "' (naming its temporary): Input/output error");
  }
  EXPECT_EQ(bytes_of(weights), old_weights);
  names_only({"config.json", "model.safetensors"});
  // A later save replaces both.
  train::save_gpt_hf(weights, *train::make_gpt(other), other);
  EXPECT_NE(bytes_of(weights), old_weights);
  EXPECT_TRUE(fs::is_regular_file(dir.file("config.json")));
}

TEST(GptHf, SaveWritesTransformersNamesAndConv1dOrientation) {
  Dir dir;
  const train::GptConfig config = tiny(3);
  auto model = train::make_gpt(config);
  train::save_gpt_hf(dir.file("model.safetensors"), *model, config);
  const train::Safetensors file = train::read_safetensors(dir.file("model.safetensors"));
  EXPECT_EQ(file.metadata.at("format"), "pt");
  // config.json beside it, as save_pretrained writes it.
  std::ifstream json_file(dir.file("config.json"));
  const std::string json((std::istreambuf_iterator<char>(json_file)),
                         std::istreambuf_iterator<char>());
  for (const char* part : {"\"n_head\": 2", "\"n_embd\": 16", "\"n_layer\": 2",
                           "\"vocab_size\": 40", "\"n_positions\": 16",
                           "\"activation_function\": \"gelu_new\"", "\"model_type\": \"gpt2\""}) {
    EXPECT_NE(json.find(part), std::string::npos) << part << " in " << json;
  }
  expect_error([&] { train::save_gpt_hf(dir.file("x.safetensors"), *model, tiny(3, 3)); },
               "save_gpt_hf: the model (vocab 40 in 128 rows, context 16, width 16, 2 layers) is "
               "not the configuration's (vocab 40 in 128 rows, context 16, width 16, 3 layers, 2 "
               "heads)");
  EXPECT_EQ(file.tensors.size(), 2u + 2u * 12u + 2u);  // no lm_head: tied
  const StateDict s = model->state_dict();
  // The vocabulary's 40 rows, without the table's padding to 128.
  EXPECT_EQ(file.tensors.at("transformer.wte.weight").shape(), (Shape{40, 16}));
  EXPECT_EQ(file.tensors.at("transformer.wte.weight").to_vector<float>(),
            s.at("embed.wte").slice(0, 40).to_vector<float>());
  const Tensor& c_attn = file.tensors.at("transformer.h.1.attn.c_attn.weight");
  EXPECT_EQ(c_attn.shape(), (Shape{16, 48}));
  EXPECT_EQ(c_attn.to_vector<float>(),
            transpose(s.at("h.1.attn.attn.c_attn.weight")).to_vector<float>());
  EXPECT_EQ(file.tensors.at("transformer.h.0.mlp.c_proj.weight").shape(), (Shape{64, 16}));
  EXPECT_EQ(file.tensors.at("transformer.h.0.attn.c_proj.weight").to_vector<float>(),
            transpose(s.at("h.0.attn.attn.c_proj.weight")).to_vector<float>());
  EXPECT_EQ(file.tensors.at("transformer.h.1.ln_2.bias").to_vector<float>(),
            s.at("h.1.mlp.ln_2.bias").to_vector<float>());
  EXPECT_EQ(file.tensors.find("lm_head.weight"), nullptr);
}

TEST(GptHf, ARoundTripGivesTheSameLogits) {
  Dir dir;
  auto trained = train::make_gpt(tiny(3));
  auto other = train::make_gpt(tiny(9));
  ASSERT_NE(logits_of(*trained).to_vector<float>(), logits_of(*other).to_vector<float>());
  train::save_gpt_hf(dir.file("model.safetensors"), *trained, tiny(3));
  train::load_gpt_hf(dir.file("model.safetensors"), *other);
  EXPECT_EQ(logits_of(*trained).to_vector<float>(), logits_of(*other).to_vector<float>());
}

TEST(GptHf, AFileInTransformersLayoutLoadsExactly) {
  Dir dir;
  auto source = train::make_gpt(tiny(5));
  train::write_safetensors(dir.file("model.safetensors"), hand_written_hf(*source, 2, DType::bf16),
                           {{"format", "pt"}});
  auto model = train::make_gpt(tiny(6));
  train::load_gpt_hf(dir.file("model.safetensors"), *model);
  const StateDict want = source->state_dict(), got = model->state_dict();
  for (const auto& [key, tensor] : want) {
    // bf16 in the file: the source's values rounded to bf16, exactly.
    EXPECT_EQ(got.at(key).to_vector<float>(),
              tensor.to(DType::bf16).to(DType::f32).to_vector<float>())
        << key;
  }
  // The tied head follows the loaded table.
  auto exact = train::make_gpt(tiny(6));
  train::write_safetensors(dir.file("f32.safetensors"), hand_written_hf(*source, 2, DType::f32));
  train::load_gpt_hf(dir.file("f32.safetensors"), *exact);
  EXPECT_EQ(logits_of(*exact).to_vector<float>(), logits_of(*source).to_vector<float>());
}

// The token table's padding (vocab 40 in 128 rows) is not in transformers' file: saving writes
// the 40 rows, loading fills them and zeroes the padding, an unpadded model loads the same file
// to the same logits (within rounding: products of another width), and a file of another vocabulary
// that pads to the same rows is refused.
TEST(GptHf, ThePaddingIsNeitherWrittenNorRead) {
  Dir dir;
  auto padded = train::make_gpt(tiny(3));
  ASSERT_EQ(padded->state_dict().at("embed.wte").shape(), (Shape{128, 16}));
  // A trained table's padding could hold anything a user put there: loading zeroes it.
  auto target = train::make_gpt(tiny(8));
  target->state_dict().at("embed.wte").slice(40, 128).fill_(5.0);
  train::save_gpt_hf(dir.file("model.safetensors"), *padded, tiny(3));
  train::load_gpt_hf(dir.file("model.safetensors"), *target);
  const std::vector<float> table = target->state_dict().at("embed.wte").to_vector<float>();
  EXPECT_EQ(std::vector<float>(table.begin(), table.begin() + 40 * 16),
            padded->state_dict().at("embed.wte").slice(0, 40).to_vector<float>());
  EXPECT_EQ(std::vector<float>(table.begin() + 40 * 16, table.end()),
            std::vector<float>(88 * 16, 0.0f));

  train::GptConfig plain_config = tiny(9);
  plain_config.vocab_multiple = 1;
  auto plain = train::make_gpt(plain_config);
  train::load_gpt_hf(dir.file("model.safetensors"), *plain);
  const std::vector<float> wide = logits_of(*padded).to_vector<float>();
  const std::vector<float> narrow = logits_of(*plain).to_vector<float>();
  ASSERT_EQ(wide.size(), 10u * 128u);
  ASSERT_EQ(narrow.size(), 10u * 40u);
  for (size_t t = 0; t < 10; ++t) {
    for (size_t v = 0; v < 128; ++v) {
      if (v < 40) {
        // Products of other widths: the same sums, perhaps in another order.
        EXPECT_NEAR(wide[t * 128 + v], narrow[t * 40 + v],
                    1e-5 * (1 + std::abs(narrow[t * 40 + v])))
            << t << " " << v;
      } else {
        EXPECT_EQ(wide[t * 128 + v], -std::numeric_limits<float>::infinity()) << t << " " << v;
      }
    }
  }

  train::GptConfig other = tiny(3);
  other.vocab = 41;  // also 128 rows
  train::save_gpt_hf(dir.file("41.safetensors"), *train::make_gpt(other), other);
  expect_error([&] { train::load_gpt_hf(dir.file("41.safetensors"), *padded); },
               "'wte.weight' is [41, 16] in the file; this model needs [40, 16]");
  expect_error([&] { train::save_gpt_hf(dir.file("x.safetensors"), *padded, plain_config); },
               "the model (vocab 40 in 128 rows, context 16, width 16, 2 layers) is not the "
               "configuration's (vocab 40 in 40 rows");
}

TEST(GptHf, TheConfigurationComesFromTheFile) {
  Dir dir;
  train::GptConfig config = tiny(3, /*layers=*/3, /*dim=*/128);
  config.heads = 4;
  auto model = train::make_gpt(config);
  train::save_gpt_hf(dir.file("model.safetensors"), *model, config);
  train::GptConfig c = train::gpt_config_of_hf(dir.file("model.safetensors"));
  EXPECT_EQ(c.vocab, 40);
  EXPECT_EQ(c.context, 16);
  EXPECT_EQ(c.dim, 128);
  EXPECT_EQ(c.layers, 3);
  EXPECT_EQ(c.heads, 4);  // from the config.json save_gpt_hf wrote
  fs::remove(dir.file("config.json"));
  EXPECT_EQ(train::gpt_config_of_hf(dir.file("model.safetensors")).heads, 2);  // 128 / 64
  std::ofstream(dir.file("config.json")) << R"({"n_head": 2.9})";
  expect_error([&] { (void)train::gpt_config_of_hf(dir.file("model.safetensors")); },
               "\"n_head\" must be an integer, not 2.9");
  std::ofstream(dir.file("config.json")) << R"({"n_head": 4, "n_embd": 96})";
  expect_error([&] { (void)train::gpt_config_of_hf(dir.file("model.safetensors")); },
               "says \"n_embd\": 96, but the tensors of");
  std::ofstream(dir.file("config.json")) << R"([1, 2])";
  expect_error([&] { (void)train::gpt_config_of_hf(dir.file("model.safetensors")); },
               "is not a valid config.json: not an object");
  std::ofstream(dir.file("config.json")) << R"({"model_type": "gpt2", "n_head": 8})";
  EXPECT_EQ(train::gpt_config_of_hf(dir.file("model.safetensors")).heads, 8);
  std::ofstream(dir.file("config.json")) << R"({"n_head": 3})";
  expect_error([&] { (void)train::gpt_config_of_hf(dir.file("model.safetensors")); },
               "3 heads do not divide the width 128");
  std::ofstream(dir.file("config.json")) << "{not json";
  expect_error([&] { (void)train::gpt_config_of_hf(dir.file("model.safetensors")); },
               "is not a valid config.json");
}

TEST(GptHf, FilesOfOtherModelsAreErrorsNamingEveryProblem) {
  Dir dir;
  auto model = train::make_gpt(tiny(3));
  const std::vector<float> before = logits_of(*model).to_vector<float>();

  // Another model altogether: an MLP's weights.
  auto mlp = train::make_residual_mlp(
      {.inputs = 4, .width = 8, .depth = 1, .expansion = 2, .outputs = 3, .seed = 1});
  train::write_safetensors(dir.file("mlp.safetensors"), mlp->state_dict());
  expect_error([&] { train::load_gpt_hf(dir.file("mlp.safetensors"), *model); },
               "mlp.safetensors' is not a GPT-2 in transformers' layout: it has no 'wte.weight' "
               "(nor 'transformer.wte.weight'); it holds 12 tensor(s): '0.weight'");
  expect_error([&] { (void)train::gpt_config_of_hf(dir.file("mlp.safetensors")); },
               "it has no 2-D 'wte.weight' (nor 'transformer.wte.weight')");

  // A GPT-2 of another shape: fewer layers, another width.
  train::save_gpt_hf(dir.file("one_layer.safetensors"), *train::make_gpt(tiny(3, 1)), tiny(3, 1));
  expect_error([&] { train::load_gpt_hf(dir.file("one_layer.safetensors"), *model); },
               "is not a GPT-2 of this model's shape (vocab 40, context 16, width 16, 2 layers) in "
               "transformers' layout: 'h.1.ln_1.weight' [16] is missing");
  auto three = train::make_gpt(tiny(3, 3));
  expect_error([&] { train::load_gpt_hf(dir.file("one_layer.safetensors"), *three); },
               "and 16 more");  // 2 layers of 12 tensors missing, 8 shown
  train::save_gpt_hf(dir.file("two_layers.safetensors"), *train::make_gpt(tiny(3, 2)), tiny(3, 2));
  auto one = train::make_gpt(tiny(3, 1));
  expect_error([&] { train::load_gpt_hf(dir.file("two_layers.safetensors"), *one); },
               "unexpected tensor 'h.1.ln_1.weight' [16]");
  train::save_gpt_hf(dir.file("wide.safetensors"), *train::make_gpt(tiny(3, 2, 32)),
                     tiny(3, 2, 32));
  expect_error([&] { train::load_gpt_hf(dir.file("wide.safetensors"), *model); },
               "'wte.weight' is [40, 32] in the file; this model needs [40, 16]");

  // An untied head, and a tensor of a dtype GPT-2 weights never have.
  StateDict untied = hand_written_hf(*model, 2, DType::f32);
  StateDict changed;
  for (const auto& [key, t] : untied) {
    changed.insert(key, key == "lm_head.weight" ? Tensor::zeros(t.shape()) : t);
  }
  train::write_safetensors(dir.file("untied.safetensors"), changed);
  expect_error([&] { train::load_gpt_hf(dir.file("untied.safetensors"), *model); },
               "'lm_head.weight' differs from 'wte.weight': an untied output head");
  StateDict ints;
  for (const auto& [key, t] : untied) {
    ints.insert(key, key == "ln_f.bias" ? Tensor::zeros(t.shape(), DType::i32) : t);
  }
  train::write_safetensors(dir.file("ints.safetensors"), ints);
  expect_error([&] { train::load_gpt_hf(dir.file("ints.safetensors"), *model); },
               "'ln_f.bias' is i32, not F32, F16 or BF16");

  // The same tensor with and without the prefix; an lm_head of another shape.
  StateDict twice;
  for (const auto& [key, t] : untied) twice.insert(key, t);
  twice.insert("transformer.ln_f.weight", Tensor::full({16}, 42.0));
  train::write_safetensors(dir.file("twice.safetensors"), twice);
  expect_error([&] { train::load_gpt_hf(dir.file("twice.safetensors"), *model); },
               "holds 'ln_f.weight' both with and without the prefix 'transformer.'");
  StateDict narrow_head;
  for (const auto& [key, t] : untied) {
    narrow_head.insert(key, key == "lm_head.weight" ? Tensor::zeros({40, 8}) : t);
  }
  train::write_safetensors(dir.file("narrow.safetensors"), narrow_head);
  expect_error([&] { train::load_gpt_hf(dir.file("narrow.safetensors"), *model); },
               "'lm_head.weight' is f32 [40, 8], not the token table's f32 [40, 16]");

  // None of this changed the model; a missing file is an Error too.
  EXPECT_EQ(logits_of(*model).to_vector<float>(), before);
  expect_error([&] { train::load_gpt_hf(dir.file("none.safetensors"), *model); },
               "none.safetensors");
}

}  // namespace
