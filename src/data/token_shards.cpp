#include "ember/data/token_shards.hpp"

#include <fcntl.h>
#include <glob.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "ember/data/dataset.hpp"
#include "ember/data/distributed_sampler.hpp"
#include "train/durable_files.hpp"

namespace ember::data {
namespace {

constexpr size_t kHeaderWords = 256;
constexpr size_t kHeaderBytes = kHeaderWords * sizeof(int32_t);

}  // namespace

void write_token_shard(const std::string& path, std::span<const uint16_t> tokens) {
  EMBER_CHECK(tokens.size() <= static_cast<size_t>(INT32_MAX),
              "write_token_shard: {} tokens are more than a shard's header can count",
              tokens.size());
  std::array<int32_t, kHeaderWords> header{};
  header[0] = kTokenShardMagic;
  header[1] = kTokenShardVersion;
  header[2] = static_cast<int32_t>(tokens.size());
  // Written whole or not at all (an existing shard is replaced only when this one is on disk).
  train::durable::FileWriter file(path, "write_token_shard");
  file.write(header.data(), sizeof(header));
  file.write(tokens.data(), tokens.size() * sizeof(uint16_t));
  file.finish();
}

std::vector<uint16_t> byte_tokens(std::string_view text) {
  std::vector<uint16_t> tokens(text.size());
  for (size_t i = 0; i < text.size(); ++i) tokens[i] = static_cast<unsigned char>(text[i]);
  return tokens;
}

std::string bytes_of_tokens(std::span<const int32_t> tokens) {
  std::string text;
  text.reserve(tokens.size());
  for (const int32_t t : tokens) {
    EMBER_CHECK(t >= 0 && t < 256, "bytes_of_tokens: token {} is not a byte", t);
    text.push_back(static_cast<char>(t));
  }
  return text;
}

std::vector<std::string> expand_glob(const std::string& pattern) {
  glob_t found{};
  const int rc = glob(pattern.c_str(), 0, nullptr, &found);
  std::vector<std::string> paths;
  if (rc == 0) {
    for (size_t i = 0; i < found.gl_pathc; ++i) paths.emplace_back(found.gl_pathv[i]);
  }
  globfree(&found);
  EMBER_CHECK(!paths.empty(), "no file matches '{}'", pattern);
  std::sort(paths.begin(), paths.end());
  return paths;
}

TokenShards::TokenShards(std::vector<std::string> paths, const Options& options)
    : options_(options) {
  EMBER_CHECK(options.batch >= 1 && options.seq >= 1,
              "TokenShards: batch and seq must be at least 1, not {} and {}", options.batch,
              options.seq);
  EMBER_CHECK(options.world_size >= 1 && options.rank >= 0 && options.rank < options.world_size,
              "TokenShards: rank {} is not in [0, {})", options.rank, options.world_size);
  EMBER_CHECK(!paths.empty(), "TokenShards: no shard files given");
  try {
    for (std::string& path : paths) {
      Shard shard;
      shard.path = std::move(path);
      const int fd = ::open(shard.path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
      EMBER_CHECK(fd >= 0, "TokenShards: cannot open {}: {}", shard.path, std::strerror(errno));
      struct stat st {};
      const bool regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
      if (!regular) ::close(fd);
      EMBER_CHECK(regular, "TokenShards: {} is not a regular file", shard.path);
      shard.bytes = static_cast<size_t>(st.st_size);
      if (shard.bytes >= kHeaderBytes) {
        shard.map = ::mmap(nullptr, shard.bytes, PROT_READ, MAP_PRIVATE, fd, 0);
      }
      ::close(fd);
      EMBER_CHECK(shard.bytes >= kHeaderBytes,
                  "TokenShards: {} has {} bytes, fewer than a shard's {}-byte header", shard.path,
                  shard.bytes, kHeaderBytes);
      EMBER_CHECK(shard.map != MAP_FAILED, "TokenShards: cannot map {}: {}", shard.path,
                  std::strerror(errno));
      shards_.push_back(shard);
      const auto* header = static_cast<const int32_t*>(shard.map);
      EMBER_CHECK(header[0] == kTokenShardMagic,
                  "TokenShards: {} is not a token shard (magic {}, expected {})", shard.path,
                  header[0], kTokenShardMagic);
      EMBER_CHECK(header[1] == kTokenShardVersion,
                  "TokenShards: {} has version {}; this reader reads version {} (uint16 tokens)",
                  shard.path, header[1], kTokenShardVersion);
      const int64_t count = header[2];
      EMBER_CHECK(count >= 0 && shard.bytes == kHeaderBytes + static_cast<size_t>(count) * 2,
                  "TokenShards: {} says it holds {} tokens, but its {} bytes hold {}", shard.path,
                  count, shard.bytes, (static_cast<int64_t>(shard.bytes) - 1024) / 2);
      Shard& s = shards_.back();
      s.tokens = reinterpret_cast<const uint16_t*>(static_cast<const char*>(s.map) + kHeaderBytes);
      s.count = count;
      total_tokens_ += count;
      int largest = 0;
      const uint16_t* tokens = s.tokens;
#pragma omp parallel for reduction(max : largest) schedule(static)
      for (int64_t i = 0; i < count; ++i) largest = std::max<int>(largest, tokens[i]);
      max_token_ = std::max(max_token_, largest);
      for (int64_t start = 0; start + options.seq + 1 <= count; start += options.seq) {
        window_starts_.emplace_back(static_cast<int32_t>(shards_.size() - 1), start);
      }
    }
    EMBER_CHECK(batches_per_epoch() >= 1,
                "TokenShards: {} tokens make {} windows of {} + 1 tokens, fewer than {} rank(s) "
                "x batch {}",
                total_tokens_, windows(), options.seq, options.world_size, options.batch);
  } catch (...) {
    for (Shard& s : shards_) ::munmap(s.map, s.bytes);
    throw;
  }
  deal();
}

TokenShards::~TokenShards() {
  for (Shard& s : shards_) ::munmap(s.map, s.bytes);
}

int64_t TokenShards::batches_per_epoch() const {
  return windows() / options_.world_size / options_.batch;
}

void TokenShards::deal() {
  DistributedSampler sampler(windows(), options_.world_size, options_.rank,
                             {.shuffle = options_.shuffle,
                              .seed = options_.seed,
                              .remainder = DistributedSampler::Remainder::drop});
  sampler.set_epoch(epoch_);
  mine_ = sampler.indices();
}

void TokenShards::set_position(Position position) {
  EMBER_CHECK(position.batch >= 0 && position.batch <= batches_per_epoch(),
              "TokenShards: batch {} is beyond the {} batches of an epoch", position.batch,
              batches_per_epoch());
  epoch_ = position.epoch;
  batch_ = position.batch;
  deal();
}

std::shared_ptr<const std::vector<int64_t>> TokenShards::windows_of_epoch(uint64_t epoch) const {
  std::lock_guard lock(epochs_mutex_);
  for (const auto& [e, windows] : epochs_) {
    if (e == epoch) return windows;
  }
  DistributedSampler sampler(windows(), options_.world_size, options_.rank,
                             {.shuffle = options_.shuffle,
                              .seed = options_.seed,
                              .remainder = DistributedSampler::Remainder::drop});
  sampler.set_epoch(epoch);
  auto dealt = std::make_shared<const std::vector<int64_t>>(sampler.indices());
  if (epochs_.size() == 2) epochs_.erase(epochs_.begin());
  epochs_.emplace_back(epoch, dealt);
  return dealt;
}

void TokenShards::fill(int64_t index, const TensorView& inputs, const TensorView& targets) const {
  const int64_t b = options_.batch, t = options_.seq;
  for (const TensorView* v : {&inputs, &targets}) {
    EMBER_CHECK(v->device.is_cpu() && v->dtype == DType::i32 && v->shape == Shape({b, t}),
                "TokenShards::fill: needs i32 [{}, {}] host views, not {}", b, t, v->describe());
  }
  EMBER_CHECK(inputs.data != nullptr && targets.data != nullptr && inputs.data != targets.data,
              "TokenShards::fill: needs two distinct views with memory");
  EMBER_CHECK(index >= 0, "TokenShards::fill: batch index {} is negative", index);
  const Position at = position_at(index);
  const auto dealt = windows_of_epoch(at.epoch);
  auto* in = inputs.as<int32_t>();
  auto* out = targets.as<int32_t>();
  for (int64_t row = 0; row < b; ++row) {
    const auto [shard, start] = window_starts_[(*dealt)[at.batch * b + row]];
    const uint16_t* w = shards_[shard].tokens + start;
    for (int64_t i = 0; i < t; ++i) {
      in[row * t + i] = w[i];
      out[row * t + i] = w[i + 1];
    }
  }
}

TokenShards::Batch TokenShards::next() {
  if (batch_ >= batches_per_epoch()) {
    ++epoch_;
    batch_ = 0;
    deal();
  }
  const int64_t b = options_.batch, t = options_.seq;
  std::vector<int32_t> inputs(static_cast<size_t>(b * t)), targets(static_cast<size_t>(b * t));
  for (int64_t row = 0; row < b; ++row) {
    const auto [shard, start] = window_starts_[mine_[batch_ * b + row]];
    const uint16_t* w = shards_[shard].tokens + start;
    for (int64_t i = 0; i < t; ++i) {
      inputs[row * t + i] = w[i];
      targets[row * t + i] = w[i + 1];
    }
  }
  ++batch_;
  return {Tensor::from_vector(inputs, Shape{b, t}), Tensor::from_vector(targets, Shape{b, t})};
}

}  // namespace ember::data
