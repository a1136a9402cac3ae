// bench_state_io: saving and resuming the training state against plain file I/O of the same
// bytes, and the step-time cost of saving.
//
//   save/ember/<MiB>  TrainingStateStore::save (safetensors + manifest + XXH3 checksums +
//                     fsync + rename) of a model and its AdamW state of about <MiB> MiB
//   save/plain/<MiB>  one write() of as many bytes into one file, then fsync
//   load/ember/<MiB>  TrainingStateStore::resume (read, verify every checksum, load into the
//                     model)
//   load/plain/<MiB>  one read of that file
// The ratio tables print ember's speed relative to plain I/O (GB/s as bytes_per_second), and a
// training step that saves every step asynchronously or synchronously relative to one that
// never saves (step_async_save, step_sync_save vs step_no_save).
//
//   bench_state_io [--benchmark_filter=...]   (files under $TMPDIR or /tmp)
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <memory>

#include "bench_support.hpp"
#include "ember/ember.hpp"
#include "ratio_reporter.hpp"

namespace {

using namespace ember;
namespace fs = std::filesystem;

fs::path work_dir(const std::string& name) {
  return fs::temp_directory_path() / fmt::format("ember_bench_ckpt_{}_{}", name, ::getpid());
}

// A residual MLP whose parameters, AdamW moments and counters come to about `mib` MiB.
struct Model {
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<train::AdamW> opt;
  train::TrainingState state;
  int64_t bytes = 0;

  explicit Model(int64_t mib) {
    // A block of width w and expansion 4 has ~8 w^2 parameters; with two AdamW moments, 3 copies.
    const auto width =
        static_cast<int64_t>(std::sqrt(static_cast<double>(mib << 20) / (4 * 8 * 3 * 2)));
    model = train::make_residual_mlp(
        {.inputs = 16, .width = width, .depth = 2, .outputs = 10, .seed = 1});
    opt = std::make_unique<train::AdamW>(model->parameters(), train::AdamWOptions{});
    step();  // the moments exist
    state.add_module("model", *model);
    state.add_optimizer("optimizer", *opt);
    for (const auto& c : state.components()) {
      for (const auto& [k, t] : c.save()) bytes += static_cast<int64_t>(t.nbytes());
    }
  }
  void step() {
    Stream s;
    nn::Context ctx{s};
    Tensor x = Tensor::empty({64, 16});
    x.uniform_(1, -1, 1);
    Tensor y = Tensor::zeros({64}, DType::i32);
    nn::SoftmaxCrossEntropy loss;
    opt->zero_grad();
    loss.forward(ctx, model->forward(ctx, x), y);
    model->backward(ctx, loss.backward(ctx));
    opt->step(s);
  }
};

// Writes `bytes` into `file` (made anew), with an fsync when `sync`.
void write_plain(const fs::path& file, const std::string& bytes, bool sync) {
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  size_t done = 0;
  while (done < bytes.size())
    done += static_cast<size_t>(::write(fd, bytes.data() + done, bytes.size() - done));
  if (sync) ::fsync(fd);
  ::close(fd);
}

// The file the plain benchmarks write, in the work directory `name` (made).
fs::path plain_file(const std::string& name) {
  fs::create_directories(work_dir(name));
  return work_dir(name) / "blob";
}

// The end of a benchmark of `m`'s bytes: every iteration processed them; `dir` is removed.
void finish(benchmark::State& state, const Model& m, const fs::path& dir) {
  state.SetBytesProcessed(state.iterations() * m.bytes);
  fs::remove_all(dir);
}

void save_ember(benchmark::State& state) {
  Model m(state.range(0));
  const fs::path dir = work_dir("save");
  train::TrainingStateStore store({.dir = dir.string(), .keep_last = 1});
  int64_t step = 0;
  for (auto _ : state) {
    m.state.progress.step = ++step;
    store.save(m.state);
  }
  finish(state, m, dir);
}

void save_plain(benchmark::State& state) {
  Model m(state.range(0));
  const std::string bytes(static_cast<size_t>(m.bytes), 'x');
  const fs::path file = plain_file("plain");
  for (auto _ : state) write_plain(file, bytes, /*sync=*/true);
  finish(state, m, file.parent_path());
}

void load_ember(benchmark::State& state) {
  Model m(state.range(0));
  const fs::path dir = work_dir("load");
  train::TrainingStateStore store({.dir = dir.string(), .keep_last = 1});
  m.state.progress.step = 1;
  store.save(m.state);
  for (auto _ : state) benchmark::DoNotOptimize(store.resume(m.state));
  finish(state, m, dir);
}

void load_plain(benchmark::State& state) {
  Model m(state.range(0));
  const std::string bytes(static_cast<size_t>(m.bytes), 'x');
  const fs::path file = plain_file("plain_load");
  write_plain(file, bytes, /*sync=*/false);
  std::string back(bytes.size(), '\0');
  for (auto _ : state) {
    const int fd = ::open(file.c_str(), O_RDONLY);
    size_t done = 0;
    while (done < back.size()) {
      const ssize_t n = ::read(fd, back.data() + done, back.size() - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    ::close(fd);
  }
  finish(state, m, file.parent_path());
}

// A training step, saving after each (asynchronously or not) or never.
void step_with(benchmark::State& state, int mode) {
  Model m(state.range(0));
  const fs::path dir = work_dir(fmt::format("step{}", mode));
  std::optional<train::TrainingStateStore> store;
  if (mode > 0)
    store.emplace(
        train::StateStoreOptions{.dir = dir.string(), .keep_last = 1, .async = mode == 1});
  int64_t step = 0;
  for (auto _ : state) {
    m.step();
    if (store) {
      m.state.progress.step = ++step;
      store->save(m.state);
    }
  }
  if (store) store->wait();
  fs::remove_all(dir);
}
void step_no_save(benchmark::State& s) {
  step_with(s, 0);
}
void step_async_save(benchmark::State& s) {
  step_with(s, 1);
}
void step_sync_save(benchmark::State& s) {
  step_with(s, 2);
}

}  // namespace

int main(int argc, char** argv) {
  using Fn = void (*)(benchmark::State&);
  const std::pair<const char*, Fn> io[] = {{"save/ember", save_ember},
                                           {"save/plain", save_plain},
                                           {"load/ember", load_ember},
                                           {"load/plain", load_plain}};
  for (int64_t mib : {16, 128}) {
    for (const auto& [name, fn] : io) ember::bench::register_ms(name, fn)->Arg(mib);
  }
  const std::pair<const char*, Fn> steps[] = {{"step_no_save/ember", step_no_save},
                                              {"step_async_save/ember", step_async_save},
                                              {"step_sync_save/ember", step_sync_save}};
  for (const auto& [name, fn] : steps) ember::bench::register_ms(name, fn)->Arg(16);
  return ember::bench::run_with_ratios(
      argc, argv, {"plain"},
      {{"step_async_save", "step_no_save"}, {"step_sync_save", "step_no_save"}});
}
