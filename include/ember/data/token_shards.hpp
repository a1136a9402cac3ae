// Token shards in llm.c's format, and a reader that serves training windows from them.
//
// A shard file is a header of 256 little-endian int32 (magic 20240520, version 1, the token
// count; the rest zero) followed by the tokens as uint16. llm.c's scripts write GPT-2 BPE shards
// (vocab 50257) this way; the tokenize_text example writes byte-level ones (vocab 256).
//
// TokenShards memory-maps the files and cuts each into windows of seq + 1 tokens (a window's
// first seq tokens are the inputs, its last seq the targets; consecutive windows overlap by one
// token; windows do not cross files). Each epoch the windows are shuffled (data::permutation:
// the same order on every machine) and dealt to the ranks as DistributedSampler deals rows
// (drop: every rank gets the same number, disjoint from the others'). next() returns the rank's
// next batch; position() and set_position() make a resumed run see the same batches. The files
// must not shrink while mapped (a read past a file's new end is a SIGBUS, as for any mapping);
// replacing one by a rename, as write_token_shard does, is safe.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ember/core/tensor.hpp"

namespace ember::data {

inline constexpr int32_t kTokenShardMagic = 20240520;
inline constexpr int32_t kTokenShardVersion = 1;

// Writes `tokens` as a shard (temporary file, then renamed): an Error naming the path on failure.
void write_token_shard(const std::string& path, std::span<const uint16_t> tokens);

// The byte-level tokenizer (vocab 256): one token per byte, and back.
std::vector<uint16_t> byte_tokens(std::string_view text);
std::string bytes_of_tokens(std::span<const int32_t> tokens);

// The files a shell pattern names (glob(3)), sorted; an Error when none exists.
std::vector<std::string> expand_glob(const std::string& pattern);

class TokenShards {
 public:
  struct Options {
    int64_t batch = 8;
    int64_t seq = 256;
    int world_size = 1;
    int rank = 0;
    uint64_t seed = 0;
    bool shuffle = true;  // false: windows in file order (evaluation)
  };
  // Maps the files; an Error names a file that is missing, shorter than its header says, or has
  // another magic or version, and says so when there are fewer windows than ranks * batch.
  TokenShards(std::vector<std::string> paths, const Options& options);
  ~TokenShards();
  TokenShards(const TokenShards&) = delete;
  TokenShards& operator=(const TokenShards&) = delete;

  struct Batch {
    Tensor inputs, targets;  // [batch, seq] i32, on the host
  };
  // This rank's next batch; after the last full batch of an epoch, the next epoch begins.
  Batch next();

  struct Position {
    uint64_t epoch = 0;
    int64_t batch = 0;  // batches of this epoch already served
  };
  Position position() const { return {epoch_, batch_}; }
  void set_position(Position position);  // an Error beyond the epoch's batches

  // Random access for data::Loader's workers: batch `index` counted from the start (epoch
  // index / batches_per_epoch()), the batch next() returns at that position, written into
  // [batch, seq] i32 host views. Thread-safe; next() and the position are not touched.
  void fill(int64_t index, const TensorView& inputs, const TensorView& targets) const;
  int64_t index_of(Position position) const {
    return static_cast<int64_t>(position.epoch) * batches_per_epoch() + position.batch;
  }
  Position position_at(int64_t index) const {
    return {static_cast<uint64_t>(index / batches_per_epoch()), index % batches_per_epoch()};
  }

  int64_t batch() const { return options_.batch; }
  int64_t seq() const { return options_.seq; }
  int64_t tokens() const { return total_tokens_; }
  int64_t windows() const { return static_cast<int64_t>(window_starts_.size()); }
  int64_t batches_per_epoch() const;            // per rank
  int max_token() const { return max_token_; }  // the largest token in the files

 private:
  struct Shard {
    std::string path;
    void* map = nullptr;
    size_t bytes = 0;
    const uint16_t* tokens = nullptr;
    int64_t count = 0;
  };
  void deal();  // this rank's windows of the current epoch
  std::shared_ptr<const std::vector<int64_t>> windows_of_epoch(uint64_t epoch) const;

  Options options_;
  std::vector<Shard> shards_;
  std::vector<std::pair<int32_t, int64_t>> window_starts_;  // (shard, first token)
  std::vector<int64_t> mine_;  // this rank's windows this epoch, in order
  int64_t total_tokens_ = 0;
  int max_token_ = 0;
  uint64_t epoch_ = 0;
  int64_t batch_ = 0;
  // fill()'s deals of the epochs it was asked for lately (two: workers straddle an epoch's end).
  mutable std::mutex epochs_mutex_;
  mutable std::vector<std::pair<uint64_t, std::shared_ptr<const std::vector<int64_t>>>> epochs_;
};

}  // namespace ember::data
