// tokenize_text: text files to byte-level token shards in llm.c's format (data::TokenShards
// reads them; train_gpt2 --shards/--val-shards trains on them).
//
//   tokenize_text [--val-fraction F] [--shard-tokens N] OUT_DIR FILE...
//
// The files are concatenated in the order given; the last F of the bytes (default 0.1) become
// OUT_DIR/val_000000.bin, the rest OUT_DIR/train_000000.bin, train_000001.bin, ... of at most N
// tokens each (default 100 M). One token per byte: vocab 256. Training shards of an earlier run
// beyond this run's last are removed, so that a glob over OUT_DIR finds this run's shards only.
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

// Removes OUT_DIR/train_NNNNNN.bin from index `shards` on (an earlier run's, which a glob over
// the directory would otherwise mix with this run's); returns how many.
int64_t remove_stale_shards(const std::string& out, int64_t shards) {
  int64_t removed = 0;
  for (int64_t i = shards;; ++i) {
    const std::string path = fmt::format("{}/train_{:06d}.bin", out, i);
    if (!std::filesystem::exists(std::filesystem::symlink_status(path))) break;
    EMBER_CHECK(std::filesystem::remove(path), "cannot remove {}", path);
    ++removed;
  }
  return removed;
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
  EMBER_CHECK(!text.empty(), "the files hold no text: nothing to tokenize");
  const std::vector<uint16_t> tokens = ember::data::byte_tokens(text);
  const auto val = static_cast<size_t>(static_cast<double>(tokens.size()) * c.val_fraction);
  const size_t train = tokens.size() - val;
  std::error_code error;
  std::filesystem::create_directories(c.out, error);
  EMBER_CHECK(std::filesystem::is_directory(c.out), "cannot create the output directory {}: {}",
              c.out, error ? error.message() : "it exists and is not a directory");
  const std::span<const uint16_t> all(tokens);
  int64_t shards = 0;
  for (size_t begin = 0; begin < train || shards == 0;
       begin += static_cast<size_t>(c.shard_tokens)) {
    const size_t n = std::min(static_cast<size_t>(c.shard_tokens), train - begin);
    ember::data::write_token_shard(fmt::format("{}/train_{:06d}.bin", c.out, shards++),
                                   all.subspan(begin, n));
  }
  ember::data::write_token_shard(fmt::format("{}/val_000000.bin", c.out), all.subspan(train));
  const int64_t stale = remove_stale_shards(c.out, shards);
  fmt::print(
      "{} bytes of {} file(s): {} training tokens in {} shard(s), {} validation tokens, in "
      "{}{}\n",
      text.size(), c.files.size(), train, shards, val, c.out,
      stale > 0 ? fmt::format(" ({} training shard(s) of an earlier run removed)", stale) : "");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return example::run_main<Config>("tokenize_text", argc, argv, parse_args, run);
}
