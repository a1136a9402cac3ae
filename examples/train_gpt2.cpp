// train_gpt2: trains GPT-2 (train::make_gpt) on token shards or on text, and samples from it.
//
//   train_gpt2 [--model small|d12] [--text FILE ... | --shards GLOB --val-shards GLOB] ...
//
// With no data option it trains on Debian's fortunes corpus (/usr/share/games/fortunes), byte by
// byte (vocab 256), so the default run on a CPU learns English-like text in a few minutes.
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/ranges.h>

#include "allocation_trace.hpp"
#include "cli.hpp"
#include "ember/ember.hpp"
#include "evaluate.hpp"
#include "observability.hpp"
#include "resume.hpp"

namespace {

using example::parse_double;
using example::parse_int;
using example::Setter;
using example::UsageError;

constexpr const char* kFortunes = "/usr/share/games/fortunes";

struct Config {
  std::string model = "small";
  std::vector<std::string> text;
  std::string shards, val_shards;
  int64_t seq = 128;
  std::vector<int64_t> seq_lengths;  // empty: every step --seq
  int64_t batch = 16;
  int64_t accumulate = 1;
  int64_t steps = 1500;
  double lr = 2e-3;
  double weight_decay = 0.1;
  std::string amp = "f32";
  std::string checkpoint = "none";
  std::string init_from, export_hf;
  std::string device = "auto";
  uint64_t seed = 1;
  double peak_tflops = 0;  // 0: the device's, where ember knows it
  int64_t log_every = 50;
  int64_t eval_every = 250;
  int64_t eval_batches = 20;
  int64_t sample_every = 0;  // 0: only at the end
  int64_t sample_tokens = 300;
  double temperature = 0.8;
  int64_t top_k = 40;
  example::SaveConfig save;
  std::string record_allocations;
  std::string command_line;              // for the allocation trace's header
  int workers = -1;                      // data::Loader's threads; -1: its default
  example::ObservabilityConfig observe;  // --trace, --metrics-port, --metrics-file
  bool cuda_graph = false;               // --cuda-graph: each step one graph launch
  int64_t vocab_multiple = 128;          // --vocab-multiple: the token table's padding
};

constexpr const char* kUsage = R"(usage: train_gpt2 [options]

Trains a GPT-2 (pre-norm transformer, tied embeddings) with AdamW and a cosine schedule, prints
the training and validation loss (nats per token, and bits per byte for byte-level data),
tokens/s and ms/step, and samples text from the model.

data (default: the fortunes corpus in /usr/share/games/fortunes, as bytes; 10% for validation):
  --text FILE        train on this text file, as bytes (repeatable)
  --shards GLOB      token shards in llm.c's format (tools: tokenize_text; llm.c's scripts)
  --val-shards GLOB  validation shards (with --shards)

model and training:
  --model M          small (bytes: 4 layers, 4 heads, 256 wide; default) or d12 (GPT-2 124M)
  --vocab-multiple N pad the token table (and the logits) to a multiple of N rows, as llm.c
                     pads GPT-2's 50257 to 50304 (default 128; 1: no padding)
  --seq T            tokens per sequence (default 128; at most the model's context)
  --seq-lengths L,.. variable-length training: each step's sequences have one of these lengths
                     (each at most --seq), drawn per step from --seed (the first L tokens of
                     --seq windows); validation keeps --seq
  --batch B          sequences per optimizer step (default 16)
  --accumulate K     micro-batches per step (B / K sequences each; default 1)
  --steps N          optimizer steps (default 1500)
  --lr X             peak learning rate (default 0.002)
  --weight-decay X   AdamW's decay of 2-D weights (default 0.1)
  --amp P            f32 (default), bf16, or f16 (with the GradScaler)
  --checkpoint C     none (default); full: every block keeps only its input and recomputes in
                     backward; selective: every block keeps its matmul outputs and remakes its
                     LayerNorms and GELU; auto:<MiB>: the blocks that fit a step's peak into that
                     budget (nn::plan_checkpoints, measured at --seq)
  --init-from FILE   start from a GPT-2 in Hugging Face transformers' safetensors layout (its
                     shape replaces --model's; heads from config.json beside it, else width/64)
  --export-hf FILE   at the end, write the model in that layout (transformers loads it)
  --device D         auto, cpu, cuda or cuda:N (default auto)
  --seed N           seed of initialization and data order (default 1)
  --peak-tflops X    the device's peak for MFU (default: known GPUs' datasheet peak; none on
                     the CPU, where MFU shows as -)
  --log-every N      steps between progress lines (default 50)
  --eval-every N     steps between validation losses (default 250)
  --eval-batches N   batches of a validation loss (default 20)
  --sample-every N   steps between samples (default 0: at the end only)
  --sample-tokens N  tokens per sample (default 300)
  --temperature X    sampling temperature (default 0.8)
  --top-k N          sample among the k likeliest tokens (default 40; 0: all)
  --save-dir DIR     the training state (data position included) is saved in DIR; SIGTERM or
                     SIGUSR1 then saves at the end of the current step and exits 0
  --save-every N     save the training state every N steps (default: only when stopped by a
                     signal)
  --resume           continue from the newest valid saved state in --save-dir, if any
  --cuda-graph       run each training step (every micro-batch, the scaler, DDP's all-reduces
                     under mpirun, and AdamW) as one CUDA graph launch after a warm-up step
                     (train::CapturedStep); not with --seq-lengths; on the CPU the steps run as
                     usual
  --workers N        threads that make training batches ahead (data::Loader; default: the
                     cores OpenMP leaves free, at least 1; 0: none)
  --record-allocations FILE  write every allocation on the device to FILE (an allocation
                     trace for bench_allocator; .gz compresses; under mpirun, rank N > 0 writes
                     FILE with .rankN before its .trace)
)";

Config parse_args(int argc, char** argv) {
  Config c;
  std::map<std::string_view, Setter> options = {
      {"--model",
       [&](const std::string& v) {
         if (v != "small" && v != "d12") {
           throw UsageError{fmt::format("--model must be small or d12, not '{}'", v)};
         }
         c.model = v;
       }},
      {"--text", [&](const std::string& v) { c.text.push_back(v); }},
      {"--shards", [&](const std::string& v) { c.shards = v; }},
      {"--val-shards", [&](const std::string& v) { c.val_shards = v; }},
      {"--seq", example::int_option("--seq", c.seq, 1)},
      {"--vocab-multiple",
       [&](const std::string& v) {
         c.vocab_multiple = parse_int("--vocab-multiple", v, 1);
         if (c.vocab_multiple > 4096) {
           throw UsageError{fmt::format("--vocab-multiple must be at most 4096, not {}", v)};
         }
       }},
      {"--batch", example::int_option("--batch", c.batch, 1)},
      {"--accumulate", example::int_option("--accumulate", c.accumulate, 1)},
      {"--steps", example::int_option("--steps", c.steps, 1)},
      {"--lr", example::number_option("--lr", c.lr)},
      {"--weight-decay", example::number_option("--weight-decay", c.weight_decay)},
      {"--amp", example::amp_option(c.amp)},
      {"--checkpoint", example::checkpoint_option(c.checkpoint)},
      {"--seq-lengths",
       [&](const std::string& v) {
         c.seq_lengths.clear();
         if (v.ends_with(','))
           throw UsageError{fmt::format("--seq-lengths: an empty length in '{}'", v)};
         std::stringstream list(v);
         for (std::string item; std::getline(list, item, ',');) {
           c.seq_lengths.push_back(parse_int("--seq-lengths", item, 1));
         }
         if (c.seq_lengths.empty()) throw UsageError{"--seq-lengths needs lengths, not ''"};
       }},
      {"--workers", example::workers_option(c.workers)},
      {"--record-allocations", example::file_option("--record-allocations", c.record_allocations)},
      {"--init-from", [&](const std::string& v) { c.init_from = v; }},
      {"--export-hf", [&](const std::string& v) { c.export_hf = v; }},
      {"--device", example::device_option(c.device)},
      {"--seed", example::seed_option(c.seed)},
      {"--peak-tflops",
       [&](const std::string& v) {
         c.peak_tflops = parse_double("--peak-tflops", v);
         if (c.peak_tflops <= 0) throw UsageError{"--peak-tflops must be positive"};
       }},
      {"--log-every", example::int_option("--log-every", c.log_every, 1)},
      {"--eval-every", example::int_option("--eval-every", c.eval_every, 1)},
      {"--eval-batches", example::int_option("--eval-batches", c.eval_batches, 1)},
      {"--sample-every", example::int_option("--sample-every", c.sample_every, 0)},
      {"--sample-tokens", example::int_option("--sample-tokens", c.sample_tokens, 0)},
      {"--temperature",
       [&](const std::string& v) {
         c.temperature = parse_double("--temperature", v);
         if (c.temperature <= 0) throw UsageError{"--temperature must be positive"};
       }},
      {"--top-k", example::int_option("--top-k", c.top_k, 0)},
  };
  example::add_save_options(options, c.save);
  example::add_observability_options(options, c.observe);
  c.command_line = example::command_line(argc, argv);
  options["--cuda-graph"] = [&](const std::string&) { c.cuda_graph = true; };
  example::parse_options(argc, argv, options, example::usage_with_observability(kUsage),
                         {"--resume", "--cuda-graph"});
  example::check_save_options(c.save);
  example::check_accumulate(c.batch, c.accumulate);
  for (const int64_t length : c.seq_lengths) {
    if (length > c.seq) {
      throw UsageError{fmt::format(
          "--seq-lengths: {} is longer than --seq ({}), the windows' length", length, c.seq)};
    }
  }
  if (c.cuda_graph && !c.seq_lengths.empty()) {
    throw UsageError{"--cuda-graph replays one shape: give --seq, not --seq-lengths"};
  }
  if (!c.shards.empty() && !c.text.empty()) throw UsageError{"give --text or --shards, not both"};
  if (c.shards.empty() != c.val_shards.empty()) {
    throw UsageError{"--shards and --val-shards go together"};
  }
  return c;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EMBER_CHECK(in.good() && !std::filesystem::is_directory(path), "cannot read {}", path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The fortunes corpus: every text file of the package (not the .dat indexes or .u8 links).
std::vector<std::string> fortune_files() {
  namespace fs = std::filesystem;
  EMBER_CHECK(fs::is_directory(kFortunes),
              "no data given and {} is missing: install Debian's fortunes package (apt-get install "
              "fortunes), or pass --text FILE or --shards GLOB",
              kFortunes);
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(kFortunes)) {
    const fs::path& p = entry.path();
    if (entry.is_regular_file() && p.extension() != ".dat" && p.extension() != ".u8") {
      files.push_back(p.string());
    }
  }
  std::sort(files.begin(), files.end());
  EMBER_CHECK(!files.empty(), "{} holds no text files", kFortunes);
  return files;
}

// Text as byte shards in a temporary directory: the last 10% for validation.
std::pair<std::string, std::string> byte_shards(const std::vector<std::string>& files,
                                                const std::string& dir) {
  std::string text;
  for (const std::string& f : files) text += read_file(f);
  EMBER_CHECK(text.size() > 1000, "the text has {} bytes: too little to train on", text.size());
  const std::vector<uint16_t> tokens = ember::data::byte_tokens(text);
  const size_t split = tokens.size() - tokens.size() / 10;
  std::filesystem::create_directories(dir);
  const std::string train = dir + "/train.bin", val = dir + "/val.bin";
  ember::data::write_token_shard(train, std::span(tokens).subspan(0, split));
  ember::data::write_token_shard(val, std::span(tokens).subspan(split));
  return {train, val};
}

std::string printable(const std::string& text) {
  std::string out;
  for (const char ch : text) {
    const auto u = static_cast<unsigned char>(ch);
    out.push_back(u == '\n' || u == '\t' || (u >= 32 && u < 127) ? ch : '?');
  }
  return out;
}

// The sequence length of `step`: --seq, or one of --seq-lengths drawn by a hash of the seed and
// the step (splitmix64), so that a resumed run draws the same lengths.
int64_t step_seq(const Config& c, int64_t step) {
  if (c.seq_lengths.empty()) return c.seq;
  uint64_t x = c.seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(step);
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  x ^= x >> 31;
  return c.seq_lengths[x % c.seq_lengths.size()];
}

// Packs the first `length` tokens of each row of a [rows, seq] i32 host view at its front, as a
// [rows, length] array. Each row moves towards the front (a forward copy: std::copy allows the
// overlap), after the rows before it.
void pack_rows(const ember::TensorView& v, int64_t length) {
  const int64_t rows = v.shape[0], seq = v.shape[1];
  auto* p = v.as<int32_t>();
  for (int64_t r = 1; r < rows && length < seq; ++r) {
    std::copy(p + r * seq, p + r * seq + length, p + r * length);
  }
}

int run(const Config& c) {
  using namespace ember;
  using Clock = std::chrono::steady_clock;
  // Under mpirun (srun, torchrun-style variables): data parallel, one replica per rank, each on
  // its own GPU when on CUDA; rank 0 alone prints, samples and exports.
  const auto comm = dist::init();
  const int rank = comm->rank(), ranks = comm->world_size();
  Device device = example::choose_device(c.device);
  if (device.is_cuda() && ranks > 1) device = dist::rank_device(comm->launch());
  Stream stream = current_stream(device);
  // Before the model: the trace holds the parameters too, and outlives every tensor of the run.
  const example::AllocationRecording recording(c.record_allocations, device, rank, ranks,
                                               c.command_line);
  auto say = [&](const std::string& text) {
    if (rank != 0) return;
    std::fputs(text.c_str(), stdout);
    std::fflush(stdout);
  };

  // Data. Text becomes shards in a temporary directory, removed at exit (error or not): the
  // readers map them until then.
  struct TemporaryDirectory {
    std::filesystem::path path;
    ~TemporaryDirectory() {
      std::error_code ignored;
      if (!path.empty()) std::filesystem::remove_all(path, ignored);
    }
  } temporary;
  std::vector<std::string> train_files, val_files;
  bool bytes = true;
  if (!c.shards.empty()) {
    train_files = data::expand_glob(c.shards);
    val_files = data::expand_glob(c.val_shards);
  } else {
    temporary.path = std::filesystem::temp_directory_path() /
                     fmt::format("ember_train_gpt2_{}", static_cast<long>(::getpid()));
    const auto [train, val] =
        byte_shards(c.text.empty() ? fortune_files() : c.text, temporary.path.string());
    train_files = {train};
    val_files = {val};
  }
  if (!c.export_hf.empty()) {  // found out now, not after the training
    const std::filesystem::path target(c.export_hf);
    const std::filesystem::path parent =
        target.parent_path().empty() ? std::filesystem::path(".") : target.parent_path();
    EMBER_CHECK(std::filesystem::is_directory(parent) && ::access(parent.c_str(), W_OK) == 0 &&
                    !std::filesystem::is_directory(target),
                "--export-hf {}: cannot write there ({} is not a writable directory, or the path "
                "is a directory)",
                c.export_hf, parent.string());
  }
  train::GptConfig config =
      c.init_from.empty() ? train::gpt_config(c.model) : train::gpt_config_of_hf(c.init_from);
  const std::string model_name = c.init_from.empty() ? c.model : c.init_from;
  EMBER_CHECK(c.seq <= config.context, "--seq {} is longer than model {}'s context of {}", c.seq,
              model_name, config.context);
  const int64_t micro = c.batch / c.accumulate;
  // An Error about the data names the set and what to change.
  auto open_shards = [&](const char* set, const std::vector<std::string>& files,
                         const data::TokenShards::Options& options) {
    try {
      return std::make_unique<data::TokenShards>(files, options);
    } catch (const Error& e) {
      EMBER_THROW("the {} data: {} (a smaller --batch or --seq may fit it)", set, e.message());
    }
  };
  auto train_data = open_shards(
      "training", train_files,
      {.batch = micro, .seq = c.seq, .world_size = ranks, .rank = rank, .seed = c.seed});
  // Validation batches of every rank's --batch windows (fewer for a small validation set; rank 0
  // alone evaluates), independent of --accumulate: they keep no activations.
  const int64_t val_windows =
      open_shards("validation", val_files, {.batch = 1, .seq = c.seq, .shuffle = false})->windows();
  auto val_data = open_shards(
      "validation", val_files,
      {.batch = std::min(ranks * c.batch, val_windows), .seq = c.seq, .shuffle = false});
  const int max_token = std::max(train_data->max_token(), val_data->max_token());
  // Byte data (bits per byte, samples as text) needs a byte model: another vocabulary (a model
  // from --init-from) reports nats and samples token ids.
  bytes = (c.shards.empty() || max_token < 256) && config.vocab == 256;
  EMBER_CHECK(max_token < config.vocab,
              "the shards hold token {}, beyond model {}'s vocabulary of {}", max_token, model_name,
              config.vocab);
  config.seed = c.seed;
  config.device = device;
  config.vocab_multiple = c.vocab_multiple;
  auto model = train::make_gpt(config);
  if (!c.init_from.empty()) train::load_gpt_hf(c.init_from, *model);
  auto& blocks = dynamic_cast<nn::Sequential&>(model->child("h"));
  if (c.checkpoint == "full" || c.checkpoint == "selective") {
    const nn::CheckpointPolicy policy =
        c.checkpoint == "full" ? nn::CheckpointPolicy::full : nn::CheckpointPolicy::selective;
    for (size_t i = 0; i < blocks.size(); ++i) {
      blocks.wrap_child(i, [policy](std::shared_ptr<nn::Module> m) {
        return std::make_shared<nn::Checkpoint>(std::move(m), policy);
      });
    }
  } else if (c.checkpoint.starts_with("auto:")) {
    // Planned on the blocks with a --seq micro-batch's hidden state (values from the seed).
    std::mt19937_64 values_rng(c.seed);
    std::normal_distribution<float> normal;
    std::vector<float> values(static_cast<size_t>(micro * c.seq * config.dim));
    for (float& v : values) v = normal(values_rng);
    const Tensor sample = Tensor::from_vector(values, {micro, c.seq, config.dim}, stream);
    nn::Context planning{stream, /*training=*/true, nn::parse_precision(c.amp)};
    const nn::CheckpointPlan plan = nn::plan_checkpoints(
        blocks, sample, example::checkpoint_budget_bytes(c.checkpoint), planning);
    nn::apply_checkpoint_plan(blocks, plan);
    say(plan.describe() + "\n");
  }
  // The network trained: the model, or its data-parallel replica (gradients averaged over the
  // ranks in buckets as backward runs). Validation and sampling use the model itself.
  std::shared_ptr<dist::DistributedDataParallel> ddp;
  if (ranks > 1) ddp = std::make_shared<dist::DistributedDataParallel>(model, *comm);
  nn::Module* net = ddp ? static_cast<nn::Module*>(ddp.get()) : model.get();
  int64_t parameters = 0;
  for (nn::Parameter* p : model->parameters()) parameters += p->value.numel();
  if (ranks > 1) {
    say(fmt::format("ranks: {} ({} launch), each on {}; steps of {} x {} sequences\n", ranks,
                    comm->launch().launcher, device.to_string(), ranks, c.batch));
  }
  say(fmt::format("data: {} training tokens ({} windows of {}), {} validation tokens{}\n",
                  train_data->tokens(), train_data->windows(), c.seq, val_data->tokens(),
                  bytes ? ", bytes" : ""));
  say(fmt::format(
      "model: {} ({} layers, {} heads, {} wide, vocab {}{}), {} parameters, on {}; {} steps "
      "of {} x {} tokens{}{}\n",
      model_name, config.layers, config.heads, config.dim, config.vocab,
      config.padded_vocab() > config.vocab ? fmt::format(" padded to {}", config.padded_vocab())
                                           : "",
      parameters, device.to_string(), c.steps, c.batch,
      c.seq_lengths.empty() ? std::to_string(c.seq)
                            : fmt::format("{{{}}}", fmt::join(c.seq_lengths, ",")),
      c.accumulate > 1 ? fmt::format(" ({} micro-batches)", c.accumulate) : "",
      c.amp == "f32" ? "" : ", autocast " + c.amp));

  // AdamW with GPT-2's decay rule (nanoGPT's), as two parameter groups: the matrices decay (the
  // embedding tables included), biases and norms do not.
  train::AdamW optimizer(
      train::weight_decay_groups(model->parameters(), static_cast<float>(c.weight_decay)),
      {.lr = static_cast<float>(c.lr), .beta2 = 0.95f});
  const auto schedule = train::LRSchedule::cosine(c.lr, c.steps, c.steps / 20, c.lr / 10);
  const nn::Precision precision = nn::parse_precision(c.amp);
  amp::GradScalerOptions scaling;
  scaling.enabled = precision == nn::Precision::f16;
  amp::GradScaler scaler(device, scaling);
  nn::SoftmaxCrossEntropy criterion(
      {.fused = true, .classes = config.vocab});  // the logits become their gradient
  nn::Context ctx{stream, /*training=*/true, precision};
  const train::Accumulation accumulation(c.accumulate);

  // dloss (training): the backward's upstream gradient, which the fused classifier multiplies
  // into the gradient it writes (no pass of its own over the [rows, vocab] gradient).
  auto loss_of = [&](nn::Module& m, nn::Context& context, const Tensor& inputs,
                     const Tensor& targets, const Tensor& dloss = Tensor()) {
    const Tensor logits = m.forward(context, inputs.to(stream));
    const int64_t rows = inputs.numel();
    return criterion.forward(context, logits.reshape({rows, config.padded_vocab()}),
                             targets.to(stream).reshape({rows}), dloss);
  };
  auto validation_loss = [&] {
    model->eval();
    nn::Context eval{stream, /*training=*/false, precision};
    val_data->set_position({});
    const int64_t batches = std::min(c.eval_batches, val_data->batches_per_epoch());
    double total = 0;
    for (int64_t i = 0; i < batches; ++i) {
      const data::TokenShards::Batch b = val_data->next();
      total += loss_of(*model, eval, b.inputs, b.targets).item();
    }
    model->train();
    criterion.drop_saved();
    return total / static_cast<double>(batches);
  };
  // Samples with a key/value cache, within the trained length (--seq: later positions' embeddings
  // were never trained), drawn by one generator across samples.
  std::mt19937_64 rng(c.seed);
  auto print_sample = [&](int64_t step) {
    const std::vector<int32_t> prompt = {'\n'};
    const std::vector<int32_t> tokens =
        train::generate(*model, prompt,
                        {.max_new_tokens = c.sample_tokens,
                         .context = c.seq,
                         .temperature = static_cast<float>(c.temperature),
                         .top_k = c.top_k,
                         .seed = rng(),
                         .precision = precision},
                        stream);
    if (bytes) {
      fmt::print("sample after step {}:\n{}\n---\n", step,
                 printable(data::bytes_of_tokens(std::span(tokens).subspan(1))));
    } else {
      fmt::print("sample after step {} (token ids): {}\n", step,
                 fmt::join(std::span(tokens).subspan(1), " "));
    }
    std::fflush(stdout);
  };

  // The training batches, made ahead by data::Loader's workers: batch i is the shards' batch i
  // from the start of training, i / --accumulate its step. A micro-batch of a step of
  // --seq-lengths L holds its windows' first L tokens, packed at the front of the [micro, seq]
  // buffers.
  const data::TokenShards& shards = *train_data;
  data::Loader loader({{Shape{micro, c.seq}, DType::i32}, {Shape{micro, c.seq}, DType::i32}},
                      [&](int64_t index, std::span<const TensorView> host) {
                        shards.fill(index, host[0], host[1]);
                        const int64_t length = step_seq(c, 1 + index / c.accumulate);
                        for (const TensorView& v : host) pack_rows(v, length);
                      },
                      device, {.workers = c.workers});

  const double nats_to_bits = 1.0 / std::log(2.0);
  // Training state: the model, the optimizer, the scaler, and the data position; the options
  // a bitwise continuation depends on are saved with it.
  example::SavedStates saves(
      c.save, *model, optimizer, scaler,
      {{"model", model_name},
       {"steps", std::to_string(c.steps)},
       {"batch", std::to_string(c.batch)},
       {"accumulate", std::to_string(c.accumulate)},
       {"seq", std::to_string(c.seq)},
       {"vocab_multiple", std::to_string(c.vocab_multiple)},
       {"seq_lengths", fmt::format("{}", fmt::join(c.seq_lengths, ","))},
       {"lr", fmt::format("{}", c.lr)},
       {"weight_decay", fmt::format("{}", c.weight_decay)},
       {"seed", std::to_string(c.seed)},
       {"amp", c.amp},
       {"data", c.shards.empty() ? fmt::format("{}", fmt::join(c.text, ",")) : c.shards},
       {"ranks", std::to_string(ranks)}},
      dist::save_group(*comm));
  saves.track(loader, train_data->batches_per_epoch());
  int64_t first_step = 1;
  if (const auto resumed = saves.resume([&](const std::string& line) {
        if (rank == 0) std::fputs(line.c_str(), line.starts_with("warning") ? stderr : stdout);
      })) {
    first_step = resumed->step + 1;  // the loader is at the checkpoint's data position
    ctx.step = resumed->micro_step;
  }
  if (rank == 0 && !c.init_from.empty() && first_step == 1) {
    const double loss = validation_loss();
    say(fmt::format("initialized from {}: validation loss {:.4f}{}\n", c.init_from, loss,
                    bytes ? fmt::format(" ({:.3f} bits/byte)", loss * nats_to_bits) : ""));
  }
  if (first_step > c.steps) {
    say(fmt::format("done: the saved state has all {} steps already\n", c.steps));
    return 0;
  }

  auto next_batch = [&](int64_t length) {
    std::vector<Tensor> b = loader.next(stream);
    for (Tensor& t : b)
      t = t.reshape({micro * c.seq}).slice(0, micro * length).reshape({micro, length});
    return b;
  };

  // --cuda-graph: the step (zero_grad, every micro-batch's forward and backward, the scaler and
  // AdamW) captured once after a warm-up step and replayed as one launch (train::CapturedStep).
  // It reads its micro-batches from fixed buffers, which the loader's copies write before each
  // replay (data::Loader::next_into), and the learning rate from device memory. A replay runs no
  // host code, so the loop advances ctx.step (the micro-batches' count, which checkpoints save)
  // itself.
  std::vector<std::array<Tensor, 2>> graph_batches;
  Tensor graph_loss_sum;
  std::optional<train::CapturedStep> captured;
  if (c.cuda_graph) {
    optimizer.keep_lr_on_device();
    for (int64_t i = 0; i < c.accumulate; ++i) {
      graph_batches.push_back({Tensor::empty({micro, c.seq}, DType::i32, stream),
                               Tensor::empty({micro, c.seq}, DType::i32, stream)});
    }
    captured.emplace(
        stream,
        [&] {
          optimizer.zero_grad();
          graph_loss_sum = Tensor::zeros({1}, DType::f32, stream);
          size_t i = 0;
          accumulation.run(
              ctx,
              [&](const train::MicroBatch& mb) {
                if (ddp) ddp->set_sync(mb.last);  // the buckets' all-reduces join the graph
                const auto& [inputs, targets] = graph_batches.at(i++);
                ops::add(stream, graph_loss_sum, graph_loss_sum,
                         loss_of(*net, ctx, inputs, targets, mb.dloss));
                const Tensor dlogits = criterion.backward(ctx, mb.dloss);
                net->backward(ctx, dlogits.reshape({micro, c.seq, config.padded_vocab()}));
              },
              scaler.scale());
          scaler.step(stream, optimizer);
          scaler.update(stream);
        },
        train::CapturedStep::Options{.optimizers = {&optimizer}});
  }

  // MFU: the model's FLOPs per step on this rank over the device's peak.
  const std::optional<double> peak = c.peak_tflops > 0 ? std::optional<double>(c.peak_tflops * 1e12)
                                                       : train::peak_flops(device, precision);
  double interval_seconds = 0, total_seconds = 0, last_loss = 0, val_loss = NAN;
  double interval_flops = 0, interval_tokens = 0;
  int64_t interval_steps = 0;
  // Where each step's time goes, printed with the progress lines; the metrics (rank 0's).
  train::StepProfiler profiler(stream);
  example::Observability observe(c.observe, "train_gpt2", device, "tokens", rank == 0, say);
  for (int64_t step = first_step; step <= c.steps; ++step) {
    const auto start = Clock::now();
    observe.step_begins(step);
    profiler.begin_step();
    const int64_t seq = step_seq(c, step);
    schedule.apply(optimizer);
    Tensor loss_sum;
    if (captured) {
      profiler.phase(train::StepPhase::data);
      for (const auto& buffers : graph_batches) loader.next_into(stream, buffers);
      profiler.phase(train::StepPhase::forward);  // the whole graph: one launch
      const uint64_t first_micro_step = ctx.step;
      captured->run();
      ctx.step = first_micro_step + static_cast<uint64_t>(c.accumulate);
      loss_sum = graph_loss_sum;
    } else {
      optimizer.zero_grad();
      loss_sum = Tensor::zeros({1}, DType::f32, stream);
      accumulation.run(
          ctx,
          [&](const train::MicroBatch& mb) {
            if (ddp) ddp->set_sync(mb.last);  // only the last micro-batch communicates
            profiler.phase(train::StepPhase::data);
            const std::vector<Tensor> batch = next_batch(seq);
            profiler.phase(train::StepPhase::forward);
            const Tensor loss = loss_of(*net, ctx, batch[0], batch[1], mb.dloss);
            ops::add(stream, loss_sum, loss_sum, loss);
            profiler.phase(train::StepPhase::backward);
            const Tensor dlogits = criterion.backward(ctx, mb.dloss);
            net->backward(ctx, dlogits.reshape({micro, seq, config.padded_vocab()}));
          },
          scaler.scale());
      profiler.phase(train::StepPhase::optimizer);
      scaler.step(stream, optimizer);
      scaler.update(stream);
    }
    // The loss of the whole step (every rank's sequences): one small all-reduce.
    profiler.phase(train::StepPhase::communication);
    if (ranks > 1) comm->all_reduce(stream, loss_sum, dist::ReduceOp::avg).wait(stream);
    profiler.phase(train::StepPhase::other);
    last_loss = loss_sum.item() / static_cast<double>(c.accumulate);
    profiler.end_step();
    example::check_loss(last_loss, step);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    interval_seconds += seconds;
    total_seconds += seconds;
    ++interval_steps;
    interval_tokens += static_cast<double>(c.batch * seq);
    {
      const double step_flops =
          train::gpt_flops_per_token(config, seq) * static_cast<double>(c.batch * seq);
      observe.step_ends(step, c.steps, seconds, static_cast<double>(ranks * c.batch * seq),
                        last_loss,
                        peak ? std::optional<double>(step_flops / seconds / *peak) : std::nullopt);
    }
    interval_flops += train::gpt_flops_per_token(config, seq) * static_cast<double>(c.batch * seq);
    if (rank == 0 && (step % c.eval_every == 0 || step == c.steps)) val_loss = validation_loss();
    if (step % c.log_every == 0 || step == c.steps) {
      const double ms = 1000 * interval_seconds / static_cast<double>(interval_steps);
      const double flops = interval_flops / interval_seconds;
      say(fmt::format(
          "step {:5d} | loss {:.4f}{} | val {} | {:8.0f} tokens/s | {:7.1f} ms/step | "
          "{:.3g} TFLOP/s, MFU {}\n",
          step, last_loss,
          bytes ? fmt::format(" ({:.3f} bits/byte)", last_loss * nats_to_bits) : "",
          std::isnan(val_loss)
              ? std::string("-")
              : fmt::format(
                    "{:.4f}{}", val_loss,
                    bytes ? fmt::format(" ({:.3f} bits/byte)", val_loss * nats_to_bits) : ""),
          ranks * interval_tokens / interval_seconds, ms, flops / 1e12,
          peak ? fmt::format("{:.1f}%", 100 * flops / *peak) : std::string("-")));
      const train::StepBreakdown breakdown = profiler.take();
      say(fmt::format("      {}\n", breakdown.describe()));
      observe.interval(breakdown);
      interval_seconds = 0;
      interval_steps = 0;
      interval_tokens = 0;
      interval_flops = 0;
    }
    if (rank == 0 && c.sample_every > 0 && step % c.sample_every == 0 && step != c.steps) {
      print_sample(step);
    }
    // The data position comes from the loader (SavedStates::track).
    if (saves.after_step({.step = step, .micro_step = ctx.step},
                         [&](bool stop) { return dist::any_rank(*comm, stop); })) {
      say(fmt::format("stopped by signal after step {}: saved {}; continue with --resume\n", step,
                      saves.path_of(step)));
      return 0;
    }
  }
  if (captured) say(fmt::format("cuda graph: {}\n", captured->describe()));
  say(fmt::format("done: {} steps in {:.1f} s, validation loss {:.4f}{}\n", c.steps, total_seconds,
                  val_loss,
                  bytes ? fmt::format(" ({:.3f} bits/byte)", val_loss * nats_to_bits) : ""));
  if (rank != 0) return 0;
  if (c.sample_tokens > 0) print_sample(c.steps);
  if (!c.export_hf.empty()) {
    train::save_gpt_hf(c.export_hf, *model, config);
    fmt::print("exported the model to {} (Hugging Face transformers' GPT-2 layout)\n", c.export_hf);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return example::run_main<Config>("train_gpt2", argc, argv, parse_args, run);
}
