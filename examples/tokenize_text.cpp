// tokenize_text: text files to byte-level token shards in llm.c's format (data::TokenShards
// reads them; train_gpt2 --shards/--val-shards trains on them).
//
//   tokenize_text [--val-fraction F] [--shard-tokens N] OUT_DIR FILE...
//
// The files are concatenated in the order given; the last F of the bytes (default 0.1) become
// OUT_DIR/val_000000.bin, the rest OUT_DIR/train_000000.bin, train_000001.bin, ... of at most N
// tokens each (default 100 M). One token per byte: vocab 256.
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "cli.hpp"
#include "ember/data/token_shards.hpp"

namespace {

using example::UsageError;

struct Config {
  double val_fraction = 0.1;
  int64_t shard_tokens = 100'000'000;
  std::string out;
  std::vector<std::string> files;
};

constexpr const char* kUsage = R"(usage: tokenize_text [options] OUT_DIR FILE...

Writes the bytes of the files, concatenated, as token shards in llm.c's format (vocab 256):
OUT_DIR/train_NNNNNN.bin and OUT_DIR/val_000000.bin.

options:
  --val-fraction F   the share of the bytes, taken from the end, for validation (default 0.1)
  --shard-tokens N   tokens per training shard at most (default 100000000)
  -h, --help         show this help
)";

Config parse_args(int argc, char** argv) {
  Config c;
  std::vector<std::string> rest;
  example::parse_options(argc, argv,
                         {{"--val-fraction",
                           [&](const std::string& v) {
                             c.val_fraction = example::parse_double("--val-fraction", v);
                             if (c.val_fraction >= 1)
                               throw UsageError{"--val-fraction must be below 1"};
                           }},
                          {"--shard-tokens",
                           [&](const std::string& v) {
                             c.shard_tokens = example::parse_int("--shard-tokens", v, 1);
                           }}},
                         kUsage, {}, &rest);
  if (rest.size() < 2) throw UsageError{"give an output directory and at least one text file"};
  c.out = rest[0];
  c.files.assign(rest.begin() + 1, rest.end());
  return c;
}

int run(const Config& c) {
  std::string text;
  for (const std::string& f : c.files) {
    std::ifstream in(f, std::ios::binary);
    EMBER_CHECK(in.good() && !std::filesystem::is_directory(f), "cannot read {}", f);
    std::stringstream s;
    s << in.rdbuf();
    text += s.str();
  }
  const std::vector<uint16_t> tokens = ember::data::byte_tokens(text);
  const auto val = static_cast<size_t>(static_cast<double>(tokens.size()) * c.val_fraction);
  const size_t train = tokens.size() - val;
  std::filesystem::create_directories(c.out);
  const std::span<const uint16_t> all(tokens);
  int64_t shards = 0;
  for (size_t begin = 0; begin < train || shards == 0;
       begin += static_cast<size_t>(c.shard_tokens)) {
    const size_t n = std::min(static_cast<size_t>(c.shard_tokens), train - begin);
    ember::data::write_token_shard(fmt::format("{}/train_{:06d}.bin", c.out, shards++),
                                   all.subspan(begin, n));
  }
  ember::data::write_token_shard(fmt::format("{}/val_000000.bin", c.out), all.subspan(train));
  fmt::print(
      "{} bytes of {} file(s): {} training tokens in {} shard(s), {} validation tokens, in "
      "{}\n",
      text.size(), c.files.size(), train, shards, val, c.out);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return example::run_main<Config>("tokenize_text", argc, argv, parse_args, run);
}
