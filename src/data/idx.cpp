#include "ember/data/idx.hpp"

#include <fmt/ranges.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <system_error>
#include <vector>

namespace ember::data {
namespace {

namespace fs = std::filesystem;

struct CloseFile {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, CloseFile>;

uint32_t load_big_endian(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

uint32_t byte_swap(uint32_t x) {
  return (x >> 24) | ((x >> 8) & 0xff00u) | ((x << 8) & 0xff0000u) | (x << 24);
}

// The ember dtype of an IDX type code; throws for the codes ember has no dtype for.
DType dtype_of_code(unsigned code, const std::string& path) {
  switch (code) {
    case 0x08:
      return DType::u8;
    case 0x0C:
      return DType::i32;
    case 0x0D:
      return DType::f32;
    case 0x09:
      EMBER_THROW("read_idx: '{}' holds signed bytes (type 0x09), which ember has no dtype for",
                  path);
    case 0x0B:
      EMBER_THROW("read_idx: '{}' holds 16-bit integers (type 0x0B), which ember has no dtype for",
                  path);
    case 0x0E:
      EMBER_THROW("read_idx: '{}' holds doubles (type 0x0E), which ember has no dtype for", path);
    default:
      EMBER_THROW(
          "read_idx: '{}' has unknown type code 0x{:02X} (IDX defines 0x08, 0x09, 0x0B, 0x0C, "
          "0x0D and 0x0E)",
          path, code);
  }
}

// Opens a regular file for reading and returns it with its size; throws saying why it cannot.
File open_regular_file(const std::string& path, uint64_t* size) {
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  EMBER_CHECK(status.type() != fs::file_type::not_found, "read_idx: cannot open '{}': no such file",
              path);
  EMBER_CHECK(!ec, "read_idx: cannot open '{}': {}", path, ec.message());
  EMBER_CHECK(status.type() != fs::file_type::directory,
              "read_idx: '{}' is a directory, not an IDX file", path);
  EMBER_CHECK(status.type() == fs::file_type::regular, "read_idx: '{}' is not a regular file",
              path);
  errno = 0;
  File file(std::fopen(path.c_str(), "rb"));
  EMBER_CHECK(file != nullptr, "read_idx: cannot open '{}': {}", path, std::strerror(errno));
  *size = fs::file_size(path, ec);
  EMBER_CHECK(!ec, "read_idx: cannot get the size of '{}': {}", path, ec.message());
  return file;
}

void read_exactly(std::FILE* file, void* out, size_t bytes, const std::string& path) {
  const size_t got = std::fread(out, 1, bytes, file);
  EMBER_CHECK(got == bytes, "read_idx: reading '{}' failed after {} of {} bytes{}{}", path, got,
              bytes, std::ferror(file) ? ": " : " (the file shrank while being read)",
              std::ferror(file) ? std::strerror(errno) : "");
}

}  // namespace

Tensor read_idx(const std::string& path) {
  uint64_t file_bytes = 0;
  const File file = open_regular_file(path, &file_bytes);

  unsigned char magic[4];
  EMBER_CHECK(file_bytes >= 4,
              "read_idx: '{}' has a truncated header: the file has {} bytes, fewer than the 4 of "
              "the magic number",
              path, file_bytes);
  read_exactly(file.get(), magic, 4, path);
  if (magic[0] != 0 || magic[1] != 0) {
    const bool gzip = magic[0] == 0x1f && magic[1] == 0x8b;
    EMBER_THROW(
        "read_idx: '{}' is not an IDX file: its magic number starts with 0x{:02X} 0x{:02X}, not "
        "two zero bytes{}",
        path, magic[0], magic[1],
        gzip ? " (it looks gzip-compressed: decompress it first, e.g. gunzip -k)" : "");
  }
  const DType dtype = dtype_of_code(magic[2], path);
  const int rank = magic[3];
  EMBER_CHECK(rank >= 1 && rank <= Shape::kMaxRank,
              "read_idx: '{}' declares {} dimensions; ember reads 1 to {}", path, rank,
              Shape::kMaxRank);

  const uint64_t header_bytes = 4 + 4 * static_cast<uint64_t>(rank);
  EMBER_CHECK(file_bytes >= header_bytes,
              "read_idx: '{}' has a truncated header: {} dimensions need a {}-byte header but the "
              "file has {} bytes",
              path, rank, header_bytes, file_bytes);
  unsigned char raw_dims[4 * Shape::kMaxRank];
  read_exactly(file.get(), raw_dims, header_bytes - 4, path);
  std::vector<int64_t> dims;
  for (int i = 0; i < rank; ++i) dims.push_back(load_big_endian(raw_dims + 4 * i));
  // Element count over the non-zero dims (up to 2^32 - 1 each), checked so that neither it nor
  // the byte count overflows, even when a zero dim makes the data empty.
  uint64_t elements = 1;
  bool overflow = false;
  for (int64_t d : dims) {
    if (d != 0) overflow |= __builtin_mul_overflow(elements, static_cast<uint64_t>(d), &elements);
  }
  EMBER_CHECK(!overflow && elements <= (uint64_t{1} << 62) / dtype_size(dtype),
              "read_idx: '{}' declares dims [{}], too large for a tensor (2^62 bytes at most)",
              path, fmt::join(dims, ", "));
  const Shape shape{std::span<const int64_t>(dims)};
  const bool empty = std::find(dims.begin(), dims.end(), 0) != dims.end();
  const uint64_t expected = empty ? 0 : elements * dtype_size(dtype);
  const uint64_t found = file_bytes - header_bytes;
  EMBER_CHECK(expected <= found,
              "read_idx: '{}' has truncated data: the header describes {}{} ({} bytes) but the "
              "file holds {} bytes after the header",
              path, dtype_name(dtype), shape.to_string(), expected, found);
  EMBER_CHECK(expected == found,
              "read_idx: '{}' has {} bytes of trailing garbage after the {} bytes of data that its "
              "header describes ({}{})",
              path, found - expected, expected, dtype_name(dtype), shape.to_string());

  Tensor t = Tensor::empty(shape, dtype);
  read_exactly(file.get(), t.data(), static_cast<size_t>(expected), path);
  if (dtype_size(dtype) == 4 && std::endian::native == std::endian::little) {
    uint32_t* words = static_cast<uint32_t*>(t.data());  // i32 and f32 alike: swap the bytes
    const int64_t n = t.numel();
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) words[i] = byte_swap(words[i]);
  }
  return t;
}

namespace {
// The path of one MNIST file, after checking it exists uncompressed.
std::string mnist_file(const std::string& dir, const std::string& name) {
  const fs::path path = fs::path(dir) / name;
  std::error_code ec;
  if (fs::exists(path, ec)) return path.string();
  const std::string gz = path.string() + ".gz";
  EMBER_CHECK(!fs::exists(gz, ec),
              "load_mnist: '{}' not found, but '{}' is there: ember does not read gzip files; "
              "decompress it first (gunzip -k '{}')",
              path.string(), gz, gz);
  EMBER_THROW(
      "load_mnist: '{}' not found; the directory must hold the uncompressed MNIST files "
      "train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte and "
      "t10k-labels-idx1-ubyte",
      path.string());
}
}  // namespace

Dataset load_mnist(const std::string& dir, bool train) {
  const std::string prefix = train ? "train" : "t10k";
  const std::string images_path = mnist_file(dir, prefix + "-images-idx3-ubyte");
  const std::string labels_path = mnist_file(dir, prefix + "-labels-idx1-ubyte");
  const Tensor images = read_idx(images_path);
  const Tensor labels = read_idx(labels_path);
  EMBER_CHECK(images.dtype() == DType::u8 && images.rank() == 3,
              "load_mnist: '{}' holds {}, not u8 images [N, rows, cols]", images_path,
              images.view().describe());
  EMBER_CHECK(labels.dtype() == DType::u8 && labels.rank() == 1,
              "load_mnist: '{}' holds {}, not u8 labels [N]", labels_path,
              labels.view().describe());
  const int64_t n = images.shape()[0];
  EMBER_CHECK(labels.shape()[0] == n, "load_mnist: '{}' holds {} images but '{}' holds {} labels",
              images_path, n, labels_path, labels.shape()[0]);

  Dataset d;
  d.num_classes = 10;
  d.labels = Tensor::empty({n}, DType::i32);
  const uint8_t* in_labels = labels.data<uint8_t>();
  int32_t* out_labels = d.labels.data<int32_t>();
  for (int64_t i = 0; i < n; ++i) {
    EMBER_CHECK(in_labels[i] < 10, "load_mnist: '{}': label {} of image {} is not a digit 0-9",
                labels_path, in_labels[i], i);
    out_labels[i] = in_labels[i];
  }
  const int64_t pixels = images.shape()[1] * images.shape()[2];
  d.inputs = Tensor::empty({n, pixels});
  const uint8_t* in = images.data<uint8_t>();
  float* out = d.inputs.data<float>();
  const int64_t total = n * pixels;
#pragma omp parallel for schedule(static) if (total > 65536)
  for (int64_t i = 0; i < total; ++i) out[i] = static_cast<float>(in[i]) / 255.0f;
  return d;
}

}  // namespace ember::data
