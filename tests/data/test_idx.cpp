#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <bit>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "ember/data/idx.hpp"
#include "test_support.hpp"

namespace {

using ember::testing::error_message;

namespace fs = std::filesystem;
using ember::DType;
using ember::Shape;
using ember::data::load_mnist;
using ember::data::read_idx;

using Bytes = std::vector<uint8_t>;

void put_big_endian(Bytes& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(v >> shift));
}

// An IDX header: two zero bytes, the type code, the rank, the dims.
Bytes header(uint8_t type, const std::vector<uint32_t>& dims) {
  Bytes out{0, 0, type, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) put_big_endian(out, d);
  return out;
}

Bytes cat(Bytes a, const Bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Each test gets its own fresh directory under the system's temporary directory.
class IdxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("ember_idx_" + std::to_string(::getpid()) + "_" +
                                        std::to_string(counter++) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  std::string write(const std::string& name, const Bytes& bytes) {
    const fs::path path = dir_ / name;
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
    EXPECT_TRUE(out.good()) << path;
    return path.string();
  }

  // The message of read_idx's error for a file holding `bytes`; checks it names the file.
  std::string read_error(const Bytes& bytes) {
    const std::string path = write("bad.idx", bytes);
    const std::string message = error_message([&] { read_idx(path); });
    EXPECT_NE(message.find(path), std::string::npos)
        << "the message should name the file: " << message;
    return message;
  }

  fs::path dir_;
};

TEST_F(IdxTest, ReadsU8ThreeDimensional) {
  Bytes data;
  for (int i = 0; i < 2 * 3 * 4; ++i) data.push_back(static_cast<uint8_t>(i * 10));
  const ember::Tensor t = read_idx(write("u8.idx", cat(header(0x08, {2, 3, 4}), data)));
  EXPECT_EQ(t.dtype(), DType::u8);
  EXPECT_EQ(t.shape(), (Shape{2, 3, 4}));
  EXPECT_TRUE(t.device().is_cpu());
  EXPECT_EQ(t.to_vector<uint8_t>(), data);
}

TEST_F(IdxTest, ReadsU8OneDimensionalAndEmpty) {
  const ember::Tensor t = read_idx(write("u8.idx", cat(header(0x08, {5}), {9, 8, 7, 255, 0})));
  EXPECT_EQ(t.shape(), (Shape{5}));
  EXPECT_EQ(t.to_vector<uint8_t>(), (Bytes{9, 8, 7, 255, 0}));
  const ember::Tensor empty = read_idx(write("empty.idx", header(0x08, {0, 28})));
  EXPECT_EQ(empty.shape(), (Shape{0, 28}));
}

TEST_F(IdxTest, ReadsBigEndianI32) {
  const std::vector<int32_t> values{1, -1, 0x01020304, INT32_MIN, INT32_MAX, -300};
  Bytes bytes = header(0x0C, {3, 2});
  for (int32_t v : values) put_big_endian(bytes, static_cast<uint32_t>(v));
  const ember::Tensor t = read_idx(write("i32.idx", bytes));
  EXPECT_EQ(t.dtype(), DType::i32);
  EXPECT_EQ(t.shape(), (Shape{3, 2}));
  EXPECT_EQ(t.to_vector<int32_t>(), values);
}

TEST_F(IdxTest, ReadsBigEndianF32) {
  const std::vector<float> values{1.5f, -0.0f, 3.14159274f, -1e30f, 1e-40f, 65504.0f, 7.0f};
  Bytes bytes = header(0x0D, {7});
  for (float v : values) put_big_endian(bytes, std::bit_cast<uint32_t>(v));
  const ember::Tensor t = read_idx(write("f32.idx", bytes));
  EXPECT_EQ(t.dtype(), DType::f32);
  const std::vector<float> got = t.to_vector<float>();
  ASSERT_EQ(got.size(), values.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(values[i])) << i;
  }
}

TEST_F(IdxTest, ReadsSixDimensionsAndLargeFiles) {
  const ember::Tensor six = read_idx(
      write("six.idx", cat(header(0x08, {1, 2, 1, 2, 1, 2}), Bytes{1, 2, 3, 4, 5, 6, 7, 8})));
  EXPECT_EQ(six.shape(), (Shape{1, 2, 1, 2, 1, 2}));
  // Large enough for the parallel byte swap.
  Bytes bytes = header(0x0C, {300000});
  for (uint32_t i = 0; i < 300000; ++i) put_big_endian(bytes, i * 7919u);
  const std::vector<int32_t> got = read_idx(write("big.idx", bytes)).to_vector<int32_t>();
  for (uint32_t i = 0; i < 300000; ++i) ASSERT_EQ(static_cast<uint32_t>(got[i]), i * 7919u) << i;
}

TEST_F(IdxTest, MissingFileAndDirectory) {
  const std::string missing = (dir_ / "nope.idx").string();
  const std::string message = error_message([&] { read_idx(missing); });
  EXPECT_NE(message.find("cannot open '" + missing + "': no such file"), std::string::npos)
      << message;
  const std::string is_dir = error_message([&] { read_idx(dir_.string()); });
  EXPECT_NE(is_dir.find("is a directory"), std::string::npos) << is_dir;
  EXPECT_NE(is_dir.find(dir_.string()), std::string::npos) << is_dir;
  const std::string device = error_message([] { read_idx("/dev/null"); });
  EXPECT_NE(device.find("'/dev/null' is not a regular file"), std::string::npos) << device;
}

TEST_F(IdxTest, UnreadableFile) {
  if (::geteuid() == 0) GTEST_SKIP() << "root can read any file";
  const std::string path = write("locked.idx", cat(header(0x08, {1}), {1}));
  fs::permissions(path, fs::perms::none);
  const std::string message = error_message([&] { read_idx(path); });
  EXPECT_NE(message.find("cannot open '" + path + "': Permission denied"), std::string::npos)
      << message;
}

TEST_F(IdxTest, WrongMagic) {
  const std::string message = read_error(cat(Bytes{0, 1, 0x08, 1}, Bytes{0, 0, 0, 1, 5}));
  EXPECT_NE(message.find("is not an IDX file"), std::string::npos) << message;
  EXPECT_NE(message.find("0x00 0x01, not two zero bytes"), std::string::npos) << message;
  const std::string gz = read_error(Bytes{0x1f, 0x8b, 0x08, 0x00, 0, 0});
  EXPECT_NE(gz.find("gzip-compressed"), std::string::npos) << gz;
}

TEST_F(IdxTest, UnsupportedAndUnknownTypeCodes) {
  EXPECT_NE(read_error(cat(header(0x09, {1}), {1})).find("signed bytes (type 0x09)"),
            std::string::npos);
  EXPECT_NE(read_error(cat(header(0x0B, {1}), {0, 1})).find("16-bit integers (type 0x0B)"),
            std::string::npos);
  EXPECT_NE(read_error(cat(header(0x0E, {1}), Bytes(8))).find("doubles (type 0x0E)"),
            std::string::npos);
  const std::string unknown = read_error(cat(header(0x42, {1}), {1}));
  EXPECT_NE(unknown.find("unknown type code 0x42"), std::string::npos) << unknown;
  EXPECT_NE(read_error(cat(header(0x09, {1}), {1})).find("which ember has no dtype for"),
            std::string::npos);
}

TEST_F(IdxTest, ZeroOrTooManyDims) {
  const std::string zero = read_error(Bytes{0, 0, 0x08, 0});
  EXPECT_NE(zero.find("declares 0 dimensions; ember reads 1 to 6"), std::string::npos) << zero;
  const std::string seven = read_error(cat(header(0x08, {1, 1, 1, 1, 1, 1, 1}), {1}));
  EXPECT_NE(seven.find("declares 7 dimensions"), std::string::npos) << seven;
}

TEST_F(IdxTest, TruncatedHeader) {
  for (const Bytes& bytes : {Bytes{}, Bytes{0, 0, 0x08}}) {
    const std::string message = read_error(bytes);
    EXPECT_NE(message.find("truncated header"), std::string::npos) << message;
    EXPECT_NE(message.find("fewer than the 4 of the magic number"), std::string::npos) << message;
  }
  Bytes partial_dims = header(0x08, {2, 3});
  partial_dims.resize(9);
  const std::string message = read_error(partial_dims);
  EXPECT_NE(message.find("truncated header: 2 dimensions need a 12-byte header but the file has "
                         "9 bytes"),
            std::string::npos)
      << message;
}

TEST_F(IdxTest, TruncatedData) {
  const std::string message = read_error(cat(header(0x0C, {2, 3}), Bytes(20)));
  EXPECT_NE(message.find("truncated data"), std::string::npos) << message;
  EXPECT_NE(message.find("i32[2, 3] (24 bytes) but the file holds 20 bytes after the header"),
            std::string::npos)
      << message;
  // A big but representable size is still just truncated data.
  const std::string big = read_error(cat(header(0x08, {0xffffffffu, 16}), Bytes(4)));
  EXPECT_NE(big.find("(68719476720 bytes) but the file holds 4 bytes"), std::string::npos) << big;
}

// Dimensions whose product overflows are reported, not wrapped around, even with a zero dim.
TEST_F(IdxTest, HugeDims) {
  for (const std::vector<uint32_t>& dims :
       {std::vector<uint32_t>{0xffffffffu, 0xffffffffu, 0xffffffffu},
        std::vector<uint32_t>{0xffffffffu, 0xffffffffu, 0xffffffffu, 0}}) {
    const std::string message = read_error(cat(header(0x0D, dims), Bytes(4)));
    EXPECT_NE(message.find("too large for a tensor"), std::string::npos) << message;
  }
}

TEST_F(IdxTest, TrailingGarbage) {
  const std::string message = read_error(cat(header(0x08, {2}), {1, 2, 3, 4, 5}));
  EXPECT_NE(message.find("3 bytes of trailing garbage after the 2 bytes of data"),
            std::string::npos)
      << message;
}

// Tiny MNIST-shaped files: n images of rows x cols pixels, and n labels.
class MnistTest : public IdxTest {
 protected:
  void write_set(const std::string& prefix, uint32_t n, uint32_t rows, uint32_t cols,
                 uint32_t n_labels, uint8_t label_limit = 10) {
    Bytes pixels;
    for (uint32_t i = 0; i < n * rows * cols; ++i) pixels.push_back(static_cast<uint8_t>(i * 37));
    write(prefix + "-images-idx3-ubyte", cat(header(0x08, {n, rows, cols}), pixels));
    Bytes labels;
    for (uint32_t i = 0; i < n_labels; ++i) labels.push_back(static_cast<uint8_t>(i % label_limit));
    write(prefix + "-labels-idx1-ubyte", cat(header(0x08, {n_labels}), labels));
  }
};

TEST_F(MnistTest, LoadsTrainAndTestSets) {
  write_set("train", 5, 3, 2, 5);
  write_set("t10k", 2, 3, 2, 2);
  const ember::data::Dataset train = load_mnist(dir_.string(), true);
  EXPECT_EQ(train.size(), 5);
  EXPECT_EQ(train.num_classes, 10);
  EXPECT_EQ(train.inputs.dtype(), DType::f32);
  EXPECT_EQ(train.inputs.shape(), (Shape{5, 6}));
  EXPECT_EQ(train.labels.dtype(), DType::i32);
  EXPECT_EQ(train.labels.to_vector<int32_t>(), (std::vector<int32_t>{0, 1, 2, 3, 4}));
  const std::vector<float> pixels = train.inputs.to_vector<float>();
  for (size_t i = 0; i < pixels.size(); ++i) {
    EXPECT_EQ(pixels[i], static_cast<float>(static_cast<uint8_t>(i * 37)) / 255.0f) << i;
    EXPECT_GE(pixels[i], 0.0f);
    EXPECT_LE(pixels[i], 1.0f);
  }
  const ember::data::Dataset test = load_mnist(dir_.string(), false);
  EXPECT_EQ(test.size(), 2);
  EXPECT_EQ(test.inputs.shape(), (Shape{2, 6}));
}

TEST_F(MnistTest, MissingFilesAndGzip) {
  const std::string missing = error_message([&] { load_mnist(dir_.string(), true); });
  EXPECT_NE(missing.find("train-images-idx3-ubyte' not found"), std::string::npos) << missing;
  EXPECT_NE(missing.find("uncompressed"), std::string::npos) << missing;
  write("t10k-images-idx3-ubyte.gz", Bytes{0x1f, 0x8b});
  const std::string gz = error_message([&] { load_mnist(dir_.string(), false); });
  EXPECT_NE(gz.find("does not read gzip files"), std::string::npos) << gz;
  EXPECT_NE(gz.find("gunzip"), std::string::npos) << gz;
}

TEST_F(MnistTest, CountMismatchBadLabelsAndWrongShapes) {
  write_set("train", 4, 2, 2, 3);
  const std::string counts = error_message([&] { load_mnist(dir_.string(), true); });
  EXPECT_NE(counts.find("holds 4 images but"), std::string::npos) << counts;
  EXPECT_NE(counts.find("holds 3 labels"), std::string::npos) << counts;

  write_set("train", 12, 1, 1, 12, 12);  // labels 10 and 11
  const std::string labels = error_message([&] { load_mnist(dir_.string(), true); });
  EXPECT_NE(labels.find("label 10 of image 10 is not a digit 0-9"), std::string::npos) << labels;

  write("train-images-idx3-ubyte", cat(header(0x08, {4}), {1, 2, 3, 4}));
  write("train-labels-idx1-ubyte", cat(header(0x08, {4}), {1, 2, 3, 4}));
  const std::string rank = error_message([&] { load_mnist(dir_.string(), true); });
  EXPECT_NE(rank.find("holds u8[4] on cpu, not u8 images [N, rows, cols]"), std::string::npos)
      << rank;
}

}  // namespace
