// Tensors in the safetensors format (Hugging Face's: an 8-byte little-endian header size, a
// JSON header naming each tensor's dtype, shape and byte range, then the bytes), so that
// PyTorch and Hugging Face tools open ember's weights and ember opens theirs (F32, F16, BF16,
// I32, I64, U8). Reading checks everything: any malformed file is an ember::Error naming the
// file and what is wrong, never a crash or an out-of-bounds read.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ember/core/state_dict.hpp"

namespace ember::train {

struct Safetensors {
  StateDict tensors;                            // CPU tensors, in the file's order of offsets
  std::map<std::string, std::string> metadata;  // the header's "__metadata__"
};

// The file's bytes for `tensors` (any devices: copied to the host, waiting for each tensor's
// stream) and `metadata`. Names must be unique and non-empty.
std::string encode_safetensors(const StateDict& tensors,
                               const std::map<std::string, std::string>& metadata = {});
// Writes the same bytes to `path` straight from the tensors' host memory (device tensors are
// copied to the host first), then fsyncs it: {bytes written, their XXH3-64 checksum}. An existing
// file is replaced only whole (written beside it, then renamed over it; a symlink's target is
// replaced; docs/training_state.md).
struct WrittenFile {
  int64_t bytes = 0;
  uint64_t xxh3 = 0;
};
WrittenFile write_safetensors(const std::string& path, const StateDict& tensors,
                              const std::map<std::string, std::string>& metadata = {});
// The same from host memory the caller keeps alive (views of CPU memory, in file order).
using NamedViews = std::vector<std::pair<std::string, TensorView>>;
WrittenFile write_safetensors(const std::string& path, const NamedViews& tensors,
                              const std::map<std::string, std::string>& metadata = {});
// Parses a whole file's bytes; `name` is for messages.
Safetensors decode_safetensors(std::span<const uint8_t> bytes, std::string_view name);
Safetensors read_safetensors(const std::string& path);
// A regular file's bytes, read at once (an Error for a missing file, a directory, a FIFO, or a
// file over max_bytes, refused before anything is allocated).
std::string read_whole_file(const std::string& path,
                            uint64_t max_bytes = std::numeric_limits<uint64_t>::max());

}  // namespace ember::train
