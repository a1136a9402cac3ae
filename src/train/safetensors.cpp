#include "ember/train/safetensors.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ember/core/error.hpp"
#include "train/durable_files.hpp"
#include "train/safetensors_internal.hpp"

namespace ember::train {
namespace {

using json = nlohmann::json;

// The header may not exceed 100 MB (safetensors' own limit).
constexpr uint64_t kMaxHeader = 100'000'000;

// safetensors' dtype names.
const std::pair<const char*, DType> kDtypes[] = {{"F32", DType::f32},   {"F16", DType::f16},
                                                 {"BF16", DType::bf16}, {"I32", DType::i32},
                                                 {"I64", DType::i64},   {"U8", DType::u8}};

const char* st_dtype(DType d) {
  for (const auto& [name, dtype] : kDtypes) {
    if (dtype == d) return name;
  }
  return "?";
}

bool parse_dtype(const std::string& s, DType* d) {
  for (const auto& [name, dtype] : kDtypes) {
    if (s == name) {
      *d = dtype;
      return true;
    }
  }
  return false;
}

}  // namespace

namespace {

// The header (size and padded JSON) for `tensors` (pairs of a name and a Tensor or TensorView).
template <class Named>
std::string header_bytes(const Named& tensors, const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    EMBER_CHECK(!name.empty() && name != "__metadata__",
                "safetensors: a tensor cannot be named '{}'", name);
    EMBER_CHECK(!header.contains(name),
                "safetensors: two tensors are named '{}' (names must be "
                "unique)",
                name);
    std::vector<int64_t> shape(t.shape.dims().begin(), t.shape.dims().end());
    header[name] = {{"dtype", st_dtype(t.dtype)},
                    {"shape", shape},
                    {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception& e) {
    EMBER_THROW("safetensors: tensor names and metadata must be valid UTF-8 text: {}", e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  // What the reader refuses, the writer refuses: a file saved must load.
  EMBER_CHECK(text.size() <= kMaxHeader,
              "safetensors: the header would be {} bytes, over the format's 100 MB limit (fewer "
              "tensors, shorter names or less metadata)",
              text.size());
  std::string out(8, '\0');
  const uint64_t n = text.size();
  for (int i = 0; i < 8; ++i)
    out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + text;
}

}  // namespace

namespace {
// Host copies of device tensors (kept alive in `keep`) and views of every tensor.
NamedViews host_views(const StateDict& tensors, std::vector<Tensor>& keep) {
  NamedViews views;
  for (const auto& [name, t] : tensors) {
    keep.push_back(t.to(Device::cpu()));  // waits for the tensor's stream; no copy on the host
    views.emplace_back(name, keep.back().view());
  }
  return views;
}
}  // namespace

std::string encode_safetensors(const StateDict& tensors,
                               const std::map<std::string, std::string>& metadata) {
  std::vector<Tensor> keep;
  const NamedViews views = host_views(tensors, keep);
  std::string out = header_bytes(views, metadata);
  for (const auto& [name, v] : views) out.append(static_cast<const char*>(v.data), v.nbytes());
  return out;
}

WrittenFile write_safetensors(const std::string& path, const StateDict& tensors,
                              const std::map<std::string, std::string>& metadata) {
  std::vector<Tensor> keep;
  return write_safetensors(path, host_views(tensors, keep), metadata);
}

WrittenFile write_safetensors(const std::string& path, const NamedViews& tensors,
                              const std::map<std::string, std::string>& metadata) {
  return write_safetensors(path, tensors, metadata, durable::WriteMode::replace);
}

namespace {

void check_in_host_memory(const NamedViews& tensors) {
  for (const auto& [name, v] : tensors) {
    EMBER_CHECK(v.device.is_cpu(), "write_safetensors: '{}' is on {}, not in host memory", name,
                v.device.to_string());
  }
}

// Writes `header` and the tensors' bytes into `file` (not finished), hashing them as they go.
WrittenFile write_into(durable::FileWriter& file, const std::string& header,
                       const NamedViews& tensors) {
  const std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(),
                                                                       &XXH3_freeState);
  XXH3_state_t* hash = state.get();
  XXH3_64bits_reset(hash);
  auto put = [&](const void* data, size_t n) {
    XXH3_64bits_update(hash, data, n);
    file.write(data, n);
  };
  put(header.data(), header.size());
  for (const auto& [name, v] : tensors) {
    if (v.nbytes() > 0) put(v.data, v.nbytes());
  }
  return {.bytes = file.bytes_written(), .xxh3 = XXH3_64bits_digest(hash)};
}

}  // namespace

WrittenFile write_safetensors(const std::string& path, const NamedViews& tensors,
                              const std::map<std::string, std::string>& metadata,
                              durable::WriteMode mode) {
  check_in_host_memory(tensors);
  const std::string header = header_bytes(tensors, metadata);  // may throw: before the file
  durable::FileWriter file(path, "safetensors", mode);
  const WrittenFile out = write_into(file, header, tensors);
  file.finish();
  return out;
}

WrittenFile write_safetensors(durable::FileWriter& file, const StateDict& tensors,
                              const std::map<std::string, std::string>& metadata) {
  std::vector<Tensor> keep;
  const NamedViews views = host_views(tensors, keep);
  check_in_host_memory(views);
  return write_into(file, header_bytes(views, metadata), views);
}

Safetensors decode_safetensors(std::span<const uint8_t> bytes, std::string_view name) {
  EMBER_CHECK(bytes.size() >= 8, "safetensors '{}': {} bytes is too short for a header size", name,
              bytes.size());
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(bytes[static_cast<size_t>(i)]) << (8 * i);
  EMBER_CHECK(n <= kMaxHeader && n <= bytes.size() - 8,
              "safetensors '{}': the header size {} exceeds the file ({} bytes) or 100 MB", name, n,
              bytes.size());
  json header;
  // JSON keeps the last of two equal keys: a key given twice in one object (a tensor's name, an
  // entry's "dtype", a metadata key) is found while parsing.
  std::vector<std::set<std::string>> keys;  // of each open object, innermost last
  std::optional<std::string> twice;         // the first key given twice ("" is a key too)
  const auto note_keys = [&](int /*depth*/, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) keys.emplace_back();
    if (event == json::parse_event_t::object_end && !keys.empty()) keys.pop_back();
    if (event == json::parse_event_t::key && !twice && !keys.empty() &&
        !keys.back().insert(parsed.get<std::string>()).second) {
      twice = parsed.get<std::string>();
    }
    return true;
  };
  try {
    header = json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<std::ptrdiff_t>(n),
                         note_keys);
  } catch (const json::exception& e) {
    EMBER_THROW("safetensors '{}': the header is not valid JSON: {}", name, e.what());
  }
  EMBER_CHECK(header.is_object(), "safetensors '{}': the header is not a JSON object", name);
  EMBER_CHECK(!twice, "safetensors '{}': the key '{}' appears twice in one object of the header",
              name, twice.value_or(""));
  const uint64_t data_size = bytes.size() - 8 - n;
  const uint8_t* data = bytes.data() + 8 + n;
  Safetensors out;
  struct Entry {
    std::string name;
    DType dtype;
    Shape shape;
    uint64_t begin, end;
  };
  std::vector<Entry> entries;
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      EMBER_CHECK(value.is_object(), "safetensors '{}': __metadata__ is not an object", name);
      for (const auto& [k, v] : value.items()) {
        EMBER_CHECK(v.is_string(), "safetensors '{}': metadata '{}' is not a string", name, k);
        out.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    EMBER_CHECK(!key.empty(), "safetensors '{}': a tensor has an empty name", name);
    auto bad = [&](const char* what) {
      EMBER_THROW("safetensors '{}': tensor '{}': {}", name, key, what);
    };
    if (!value.is_object() || !value.contains("dtype") || !value.contains("shape") ||
        !value.contains("data_offsets")) {
      bad("needs dtype, shape and data_offsets");
    }
    const json& d = value["dtype"];
    const json& s = value["shape"];
    const json& o = value["data_offsets"];
    Entry e{key, DType::f32, Shape(), 0, 0};
    if (!d.is_string() || !parse_dtype(d.get<std::string>(), &e.dtype)) {
      bad("its dtype is not one of F32, F16, BF16, I32, I64, U8");
    }
    if (!s.is_array() || s.size() > static_cast<size_t>(Shape::kMaxRank))
      bad("its shape is not an array of at most 6 sizes");
    std::vector<int64_t> dims;
    uint64_t elements = 1;
    for (const json& x : s) {
      if (!x.is_number_unsigned() || x.get<uint64_t>() > (uint64_t{1} << 40)) {
        bad("a shape entry is not a size");
      }
      const uint64_t v = x.get<uint64_t>();
      if (v != 0 && elements > std::numeric_limits<uint64_t>::max() / v / 8) bad("it is too large");
      elements *= v;
      dims.push_back(static_cast<int64_t>(v));
    }
    if (!o.is_array() || o.size() != 2 || !o[0].is_number_unsigned() ||
        !o[1].is_number_unsigned()) {
      bad("its data_offsets are not two sizes");
    }
    e.begin = o[0].get<uint64_t>();
    e.end = o[1].get<uint64_t>();
    if (e.begin > e.end || e.end > data_size) bad("its data_offsets lie outside the data");
    if (e.end - e.begin != elements * dtype_size(e.dtype)) {
      bad("its byte range does not match its shape and dtype");
    }
    e.shape = Shape(dims);
    entries.push_back(std::move(e));
  }
  // The byte ranges tile the data exactly (safetensors' rule): no overlap, no hole.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin < b.begin || (a.begin == b.begin && a.end < b.end);
  });
  uint64_t expected = 0;
  for (const Entry& e : entries) {
    EMBER_CHECK(e.begin == expected,
                "safetensors '{}': tensor '{}' starts at byte {}, not {}: the data ranges overlap "
                "or leave a hole",
                name, e.name, e.begin, expected);
    expected = e.end;
  }
  EMBER_CHECK(expected == data_size, "safetensors '{}': {} data bytes, but the tensors cover {}",
              name, data_size, expected);
  for (const Entry& e : entries) {
    Tensor t = Tensor::empty(e.shape, e.dtype, Device::cpu());
    if (t.nbytes() > 0) std::memcpy(t.data(), data + e.begin, t.nbytes());
    out.tensors.insert(e.name, std::move(t));
  }
  return out;
}

std::string read_whole_file(const std::string& path, uint64_t max_bytes) {
  // O_NONBLOCK: a FIFO without a writer is refused below instead of blocking the open.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  EMBER_CHECK(fd >= 0, "cannot open '{}': {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    EMBER_THROW("'{}' is not a regular file", path);
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {  // before allocating for it
    ::close(fd);
    EMBER_THROW("'{}' has {} bytes, more than the {} it may have", path, st.st_size, max_bytes);
  }
  std::string bytes(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t k = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;
    done += static_cast<size_t>(k);
  }
  ::close(fd);
  bytes.resize(done);
  return bytes;
}

Safetensors read_safetensors(const std::string& path) {
  const std::string bytes = read_whole_file(path);
  return decode_safetensors(
      std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), path);
}

}  // namespace ember::train
