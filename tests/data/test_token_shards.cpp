// data::TokenShards and the shard format: what is written reads back; windows, batches and
// epochs; disjoint ranks; the same order for a seed; exact resume from a position; and every
// bad file named in its Error.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "ember/data/token_shards.hpp"
#include "test_support.hpp"

namespace {

namespace fs = std::filesystem;
using ember::data::TokenShards;
using ember::testing::expect_error;

class TokenShardsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           fmt::format("ember_token_shards_{}_{}",
                       ::testing::UnitTest::GetInstance()->current_test_info()->name(),
                       static_cast<long>(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  // Tokens 0, 1, 2, ... (mod 65536) into a shard.
  std::string counting_shard(const std::string& name, int64_t count, int64_t first = 0) const {
    std::vector<uint16_t> tokens(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) tokens[i] = static_cast<uint16_t>((first + i) % 65536);
    ember::data::write_token_shard(path(name), tokens);
    return path(name);
  }
  fs::path dir_;
};

std::vector<int32_t> values(const ember::Tensor& t) {
  return t.to_vector<int32_t>();
}

TEST_F(TokenShardsTest, ServesWindowsOfTheFilesWithTargetsOneAhead) {
  const std::string a = counting_shard("a.bin", 100), b = counting_shard("b.bin", 50, 1000);
  TokenShards shards({a, b}, {.batch = 2, .seq = 8, .shuffle = false});
  EXPECT_EQ(shards.tokens(), 150);
  EXPECT_EQ(shards.windows(), 12 + 6);  // (100 - 1) / 8 and (50 - 1) / 8 windows of 9 tokens
  EXPECT_EQ(shards.batches_per_epoch(), 9);
  EXPECT_EQ(shards.max_token(), 1049);
  const TokenShards::Batch first = shards.next();
  EXPECT_EQ(first.inputs.shape(), (ember::Shape{2, 8}));
  EXPECT_EQ(values(first.inputs),
            (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}));
  EXPECT_EQ(values(first.targets),
            (std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}));
  for (int i = 1; i < 6; ++i) shards.next();
  // Window 12 is b's first: windows do not cross files.
  const TokenShards::Batch seventh = shards.next();
  EXPECT_EQ(values(seventh.inputs)[0], 1000);
  EXPECT_EQ(shards.position().epoch, 0u);
  shards.next();
  shards.next();
  shards.next();  // the next epoch
  EXPECT_EQ(shards.position().epoch, 1u);
  EXPECT_EQ(shards.position().batch, 1);
}

TEST_F(TokenShardsTest, RanksGetDisjointWindowsAndASeedGivesOneOrder) {
  const std::string a = counting_shard("a.bin", 4000);
  std::set<int32_t> seen;
  for (int rank = 0; rank < 3; ++rank) {
    TokenShards shards({a}, {.batch = 4, .seq = 16, .world_size = 3, .rank = rank, .seed = 7});
    TokenShards again({a}, {.batch = 4, .seq = 16, .world_size = 3, .rank = rank, .seed = 7});
    for (int64_t i = 0; i < shards.batches_per_epoch(); ++i) {
      const std::vector<int32_t> x = values(shards.next().inputs);
      EXPECT_EQ(x, values(again.next().inputs));
      for (size_t row = 0; row < 4; ++row) EXPECT_TRUE(seen.insert(x[row * 16]).second);
    }
  }
  TokenShards other({a}, {.batch = 4, .seq = 16, .seed = 8});
  TokenShards seven({a}, {.batch = 4, .seq = 16, .seed = 7});
  EXPECT_NE(values(other.next().inputs), values(seven.next().inputs));
}

TEST_F(TokenShardsTest, ResumesAtAPositionWithTheSameBatches) {
  const std::string a = counting_shard("a.bin", 3000);
  TokenShards run({a}, {.batch = 3, .seq = 10, .seed = 2});
  for (int i = 0; i < 150; ++i) run.next();  // into the second epoch
  const TokenShards::Position at = run.position();
  EXPECT_EQ(at.epoch, 1u);
  TokenShards resumed({a}, {.batch = 3, .seq = 10, .seed = 2});
  resumed.set_position(at);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(values(run.next().inputs), values(resumed.next().inputs));
  expect_error([&] { resumed.set_position({0, 1000}); }, "batch 1000 is beyond the 99 batches");
}

TEST_F(TokenShardsTest, BadFilesAreNamed) {
  expect_error([&] { TokenShards({path("missing.bin")}, {}); }, {"cannot open", "missing.bin"});
  { std::ofstream(path("short.bin")) << "abc"; }
  expect_error([&] { TokenShards({path("short.bin")}, {}); },
               {"short.bin has 3 bytes, fewer than a shard's 1024-byte header"});
  const std::string good = counting_shard("good.bin", 100);
  std::vector<char> bytes(1024 + 200);
  {
    std::ifstream in(good, std::ios::binary);
    in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  auto write = [&](const std::string& name, std::vector<char> b) {
    std::ofstream(path(name), std::ios::binary)
        .write(b.data(), static_cast<std::streamsize>(b.size()));
    return path(name);
  };
  std::vector<char> magic = bytes;
  magic[0] = 1;
  expect_error([&] { TokenShards({write("magic.bin", magic)}, {}); },
               {"magic.bin is not a token shard", "expected 20240520"});
  std::vector<char> version = bytes;
  version[4] = 2;
  expect_error([&] { TokenShards({write("version.bin", version)}, {}); },
               "version.bin has version 2");
  std::vector<char> truncated(bytes.begin(), bytes.end() - 10);
  expect_error([&] { TokenShards({write("truncated.bin", truncated)}, {}); },
               "truncated.bin says it holds 100 tokens, but its 1214 bytes hold 95");
  expect_error([&] { TokenShards({good}, {.batch = 8, .seq = 16}); },
               "100 tokens make 6 windows of 16 + 1 tokens, fewer than 1 rank(s) x batch 8");
  expect_error([&] { TokenShards({good}, {.world_size = 2, .rank = 2}); },
               "rank 2 is not in [0, 2)");
  expect_error([&] { ember::data::expand_glob(path("*.nothing")); }, "no file matches");
  EXPECT_EQ(ember::data::expand_glob(path("g*.bin")), std::vector<std::string>{good});
}

TEST(ByteTokens, RoundTrip) {
  const std::string text = "Hello, \xff\x01 world\n";
  const std::vector<uint16_t> tokens = ember::data::byte_tokens(text);
  EXPECT_EQ(tokens[7], 255);
  const std::vector<int32_t> ids(tokens.begin(), tokens.end());
  EXPECT_EQ(ember::data::bytes_of_tokens(ids), text);
  expect_error([] { ember::data::bytes_of_tokens(std::vector<int32_t>{300}); },
               "token 300 is not a byte");
}

}  // namespace
