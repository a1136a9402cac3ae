// A fuzz target for the training state's readers: the safetensors decoder and a saved state's
// manifest (through TrainingStateStore::resume on a directory holding the input as its
// manifest.json). Any input must give a successful read, a skipped saved state or an
// ember::Error: never a crash, a hang or an out-of-bounds access.
//
// With libFuzzer (clang -fsanitize=fuzzer,address -DEMBER_LIBFUZZER): LLVMFuzzerTestOneInput.
// Built with g++ it has its own main:
//   fuzz_training_state FILE...             each file as one input
//   fuzz_training_state --mutate N [SEED]   N random mutations of valid files (ctest runs this)
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <span>
#include <string>

#include "ember/core/error.hpp"
#include "ember/train/safetensors.hpp"
#include "ember/train/training_state.hpp"

namespace {

namespace fs = std::filesystem;
using namespace ember;

const fs::path& work_dir() {
  static const fs::path dir = fs::temp_directory_path() / fmt::format("ember_fuzz_{}", ::getpid());
  return dir;
}

// A state holding one tensor, and a valid saved state of it (made once).
struct Sample {
  Tensor value = Tensor::full({4, 3}, 2.0);
  train::TrainingState state;
  std::string manifest, safetensors;
  Sample() {
    state.add_state(
        "x",
        [this] {
          StateDict d;
          d.insert("v", value);
          return d;
        },
        [this](const StateDict& d) { value.copy_(d.at("v")); });
    fs::remove_all(work_dir());
    train::TrainingStateStore store(
        {.dir = work_dir().string(), .warn = [](const std::string&) {}});
    state.progress.step = 1;
    store.save(state);
    const fs::path dir = store.path_of(1);
    manifest = train::read_whole_file((dir / "manifest.json").string());
    safetensors = train::read_whole_file((dir / "replicated.safetensors").string());
  }
};

Sample& sample() {
  static Sample s;
  return s;
}

void fuzz_safetensors(std::span<const uint8_t> bytes) {
  try {
    train::decode_safetensors(bytes, "fuzz");
  } catch (const Error&) {
  }
}

void fuzz_manifest(std::span<const uint8_t> bytes) {
  Sample& s = sample();
  const fs::path file =
      fs::path(train::TrainingStateStore({.dir = work_dir().string()}).path_of(1)) /
      "manifest.json";
  std::ofstream(file, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  try {
    train::TrainingStateStore store(
        {.dir = work_dir().string(), .warn = [](const std::string&) {}});
    store.resume(s.state);
  } catch (const Error&) {
  }
}

}  // namespace

// The first byte picks the reader; the rest is its input.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::span<const uint8_t> rest(data + 1, size - 1);
  if (data[0] % 2 == 0) {
    fuzz_safetensors(rest);
  } else {
    fuzz_manifest(rest);
  }
  return 0;
}

#ifndef EMBER_LIBFUZZER
int main(int argc, char** argv) {
  const std::string first = argc > 1 ? argv[1] : "";
  if (first == "--mutate") {
    const long n = argc > 2 ? std::strtol(argv[2], nullptr, 10) : 1000;
    std::mt19937 rng(argc > 3 ? static_cast<unsigned>(std::strtoul(argv[3], nullptr, 10)) : 1u);
    for (long i = 0; i < n; ++i) {
      const bool manifest = i % 4 == 3;  // the manifest path writes files: fewer of those
      std::string bytes(1, manifest ? '\1' : '\0');
      bytes += manifest ? sample().manifest : sample().safetensors;
      switch (rng() % 3) {
        case 0:  // truncated
          bytes.resize(1 + rng() % (bytes.size() - 1));
          break;
        case 1:  // a few bytes changed
          for (unsigned k = 0; k <= rng() % 4; ++k)
            bytes[1 + rng() % (bytes.size() - 1)] = static_cast<char>(rng());
          break;
        default:  // a byte range duplicated inside
          if (bytes.size() > 4) {
            const size_t at = 1 + rng() % (bytes.size() - 2);
            bytes.insert(at, bytes.substr(at, 1 + rng() % 16));
          }
      }
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    }
    std::printf("fuzz_training_state: %ld mutated inputs, no crash\n", n);
  } else {
    for (int i = 1; i < argc; ++i) {
      const std::string bytes = train::read_whole_file(argv[i]);
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    }
    std::printf("fuzz_training_state: %d inputs, no crash\n", argc - 1);
  }
  fs::remove_all(work_dir());
  return 0;
}
#endif
