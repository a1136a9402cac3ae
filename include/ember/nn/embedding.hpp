// Embedding: a table of `vocab` rows (or more, padded) of `dim` f32 values looked up by integer ids
// (ops::embedding_forward): GPT-2's token and position embeddings. The output is f32 under every
// autocast precision, as PyTorch's autocast leaves embeddings in f32; its gradient (any float
// dtype) is added to the table's rows in position order (ops::embedding_backward), so the same
// bits every run.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "ember/nn/module.hpp"

namespace ember::nn {

struct EmbeddingOptions {
  float init_std = 0.02f;  // the rows start normal(0, init_std), GPT-2's initialization
  // Initialization seed (counter-based); without one, the next default seed (nn/seed.hpp).
  std::optional<uint64_t> seed;
  Device device;
  // The table's rows: 0 or vocab for vocab rows; more pads the table (GPT-2's 50257 -> 50304, so
  // that a tied classifier's products have aligned rows). Rows past vocab start at zero, no id
  // may name them, and their gradient is zero from a lookup.
  int64_t table_rows = 0;
};

class Embedding final : public Module {
 public:
  Embedding(int64_t vocab, int64_t dim, const EmbeddingOptions& options = {});

  // ids: i32 or i64 of any shape, each in [0, vocab) (a bad id is an Error naming its row and
  // value; on a GPU from the stream's next synchronize). Returns [*ids.shape, dim] f32.
  Tensor forward(Context& ctx, const Tensor& ids) override;
  // Adds dy's rows into the table's gradient. Ids have no gradient: returns an undefined Tensor.
  Tensor backward(Context& ctx, const Tensor& dy) override;
  std::vector<Parameter*> parameters() override { return {&weight_}; }
  void drop_saved() override { ids_ = Tensor(); }
  bool has_saved() const override { return ids_.defined(); }
  std::string name() const override;
  void set_path(std::string path) override;

  Parameter& weight() { return weight_; }
  int64_t vocab() const { return vocab_; }
  int64_t dim() const { return dim_; }

 private:
  int64_t vocab_, dim_, rows_;
  Parameter weight_;
  Tensor ids_;  // saved by forward
};

// GPT-2's input layer: token embeddings plus learned position embeddings. ids [B, T] (T at
// most `context`) -> [B, T, dim] f32 = wte[ids] + wpe[t]. Parameters "wte" [vocab (or
// options.table_rows), dim] and "wpe" [context, dim]; both gradients are added in position order
// (deterministic).
class TokenPositionEmbedding final : public Module {
 public:
  TokenPositionEmbedding(int64_t vocab, int64_t context, int64_t dim,
                         const EmbeddingOptions& options = {});

  Tensor forward(Context& ctx, const Tensor& ids) override;
  Tensor backward(Context& ctx, const Tensor& dy) override;  // an undefined Tensor
  std::vector<Parameter*> parameters() override { return {&wte_, &wpe_}; }
  void drop_saved() override { ids_ = Tensor(); }
  bool has_saved() const override { return ids_.defined(); }
  std::string name() const override;
  void set_path(std::string path) override;

  Parameter& token_table() { return wte_; }
  Parameter& position_table() { return wpe_; }
  int64_t context() const { return context_; }
  int64_t vocab() const { return vocab_; }  // the ids' bound (the table may have more rows)

 private:
  // [B, T] i32 positions (first .. first + T - 1 in every row) on the stream's device, made once
  // per shape, first position and device, and kept: a CUDA graph captured with one (a training
  // step) replays after others were used (validation batches, sampling), and reads its own.
  Tensor positions(Stream& stream, int64_t batch, int64_t seq, int64_t first = 0);

  int64_t vocab_, context_, dim_, rows_;
  Parameter wte_, wpe_;
  Tensor ids_;
  struct Positions {
    int64_t batch, seq, first;
    Device device;
    Tensor ids;
    std::shared_ptr<Event> uploaded;  // recorded after the upload, on ids' stream
  };
  std::vector<Positions> positions_;
};

}  // namespace ember::nn
