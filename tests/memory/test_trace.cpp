// Allocation traces: reading, writing, every malformed-file error, and recording.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ember/core/allocator.hpp"
#include "ember/core/error.hpp"
#include "ember/memory/caching_allocator.hpp"
#include "ember/memory/simulated_upstream.hpp"
#include "ember/memory/trace.hpp"
#include "ember/memory/trace_recording_adaptor.hpp"

#include "test_support.hpp"

namespace {

using ember::testing::expect_error;

namespace fs = std::filesystem;
using ember::memory::TraceEvent;
using ember::memory::TraceWriter;

class TraceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("ember_trace_" + std::to_string(::getpid()) + "_" +
                                        std::to_string(counter++) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string write(const std::string& name, const std::string& text) {
    const fs::path path = dir_ / name;
    std::ofstream(path, std::ios::binary) << text;
    return path.string();
  }
  // The message of the ember::Error read_trace throws for `text` (empty: none thrown).
  std::string error_for(const std::string& text) {
    const std::string path = write("bad.trace", text);
    try {
      ember::memory::read_trace(path);
    } catch (const ember::Error& e) {
      return e.message();
    }
    return "";
  }
  fs::path dir_;
};

const std::string kHeader = "# ember-alloc-trace v1\n";

TEST_F(TraceTest, ReadsEveryKindOfEvent) {
  const auto events = ember::memory::read_trace(
      write("t.trace", kHeader + "# a comment\n\na 1 100 0\na 2 5000 3\nr 2 0\nf 1\na 1 7 0\n"));
  const std::vector<TraceEvent> expected = {
      {TraceEvent::allocate, 1, 100, 0},    {TraceEvent::allocate, 2, 5000, 3},
      {TraceEvent::record_stream, 2, 0, 0}, {TraceEvent::free, 1, 0, 0},
      {TraceEvent::allocate, 1, 7, 0},
  };
  EXPECT_EQ(events, expected);
}

TEST_F(TraceTest, WriterRoundTripsPlainAndGzip) {
  const std::vector<TraceEvent> events = {
      {TraceEvent::allocate, 1, 123456789012ULL, 0},
      {TraceEvent::allocate, 2, 1, 2},
      {TraceEvent::record_stream, 1, 0, 2},
      {TraceEvent::free, 1, 0, 0},
  };
  for (const char* name : {"round.trace", "round.trace.gz"}) {
    const std::string path = (dir_ / name).string();
    {
      TraceWriter writer(path, "test run\nsecond comment line");
      for (const TraceEvent& e : events) writer.write(e);
      EXPECT_EQ(writer.events_written(), events.size());
    }  // flushed and closed here
    EXPECT_EQ(ember::memory::read_trace(path), events) << name;
  }
  // The gzip file really is compressed, and the header and comments are there.
  std::ifstream gz(dir_ / "round.trace.gz", std::ios::binary);
  unsigned char magic[2] = {};
  gz.read(reinterpret_cast<char*>(magic), 2);
  EXPECT_EQ(magic[0], 0x1f);
  EXPECT_EQ(magic[1], 0x8b);
  std::ifstream plain(dir_ / "round.trace");
  std::string line1, line2, line3;
  std::getline(plain, line1);
  std::getline(plain, line2);
  std::getline(plain, line3);
  EXPECT_EQ(line1, "# ember-alloc-trace v1");
  EXPECT_EQ(line2, "# test run");
  EXPECT_EQ(line3, "# second comment line");
}

TEST_F(TraceTest, ReadsGzipWrittenByGzip) {
  const std::string path = write("z.trace", kHeader + "a 5 64 0\nf 5\n");
  ASSERT_EQ(std::system(("gzip -f '" + path + "'").c_str()), 0);
  const auto events = ember::memory::read_trace(path + ".gz");
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].bytes, 64u);
}

TEST_F(TraceTest, WriterIsThreadSafe) {
  const std::string path = (dir_ / "threads.trace").string();
  constexpr int kThreads = 4, kPerThread = 500;
  {
    TraceWriter writer(path);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&writer, t] {
        for (int i = 0; i < kPerThread; ++i) {
          const uint64_t id = static_cast<uint64_t>(t) * kPerThread + i + 1;
          writer.allocate(id, 1000 + id, 0);
          writer.free(id);
        }
      });
    }
    for (auto& thread : threads) thread.join();
  }
  // Every line whole: the reader accepts it (each free follows its allocate).
  EXPECT_EQ(ember::memory::read_trace(path).size(), size_t{2 * kThreads * kPerThread});
}

TEST_F(TraceTest, ErrorsNameFileLineAndProblem) {
  auto expect = [&](const std::string& text, const std::string& part1,
                    const std::string& part2 = "") {
    const std::string message = error_for(text);
    EXPECT_NE(message.find(part1), std::string::npos) << "message: " << message;
    EXPECT_NE(message.find(part2), std::string::npos) << "message: " << message;
  };
  expect("", "is empty", "# ember-alloc-trace v1");
  expect("a 1 2 0\n", "bad.trace:1: expected the header line", "found 'a 1 2 0'");
  expect("# ember-alloc-trace v2\n", ":1: expected the header", "v2");
  expect(kHeader + "x 1 2 0\n", "bad.trace:2: unknown event 'x'", "expected 'a'");
  expect(kHeader + "a 1 2\n", ":2: expected 4 fields", "found 3");
  expect(kHeader + "f 1 2\n", ":2: expected 2 fields", "found 3");
  expect(kHeader + "a 1 2 0\nr 1\n", ":3: expected 3 fields", "found 2");
  expect(kHeader + "a 1  2 0\n", ":2: expected 4 fields", "single spaces");
  expect(kHeader + "a 1 12x 0\n", ":2: expected BYTES as an unsigned decimal integer",
         "found '12x'");
  expect(kHeader + "a -1 12 0\n", ":2: expected ID", "found '-1'");
  expect(kHeader + "a 1 99999999999999999999 0\n", ":2: expected BYTES", "99999999999999999999");
  expect(kHeader + "a 1 12 s\n", ":2: expected STREAM", "found 's'");
  expect(kHeader + "a 1 0 0\n", ":2: expected a positive BYTES, found 0", "zero-byte");
  expect(kHeader + "a 1 8 0\nf 2\n", ":3: free of allocation ID 2", "not live");
  expect(kHeader + "a 1 8 0\nf 1\nf 1\n", ":4: free of allocation ID 1", "already freed");
  expect(kHeader + "r 4 1\n", ":2: record_stream of allocation ID 4", "not live");
  expect(kHeader + "a 1 8 0\na 1 8 0\n", ":3: allocation ID 1 is already live", "'f 1'");
}

TEST_F(TraceTest, MissingAndCorruptFilesAreClearErrors) {
  try {
    ember::memory::read_trace((dir_ / "missing.trace").string());
    FAIL() << "expected an ember::Error";
  } catch (const ember::Error& e) {
    EXPECT_NE(e.message().find("cannot open allocation trace"), std::string::npos) << e.what();
  }
  // zlib reads a plain file named .gz as it is; a damaged gzip file is an error.
  const std::string plain_named_gz = write("plain.trace.gz", kHeader + "a 1 8 0\n");
  EXPECT_EQ(ember::memory::read_trace(plain_named_gz).size(), 1u);
  const std::string whole = (dir_ / "whole.trace.gz").string();
  {
    TraceWriter writer(whole);
    for (uint64_t id = 1; id <= 2000; ++id) writer.allocate(id, id * 8, 0);
  }
  std::ifstream in(whole, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string truncated = write("truncated.trace.gz", bytes.substr(0, bytes.size() / 2));
  expect_error([&] { ember::memory::read_trace(truncated); },
               {"cannot decompress allocation trace", "truncated.trace.gz"});
  expect_error([&] { TraceWriter((dir_ / "no/such/dir/x.trace").string()); },
               "check that the directory exists");
  // A compressed trace in a missing directory fails at once, not later with SIGPIPE.
  expect_error([&] { TraceWriter((dir_ / "no/such/dir/x.trace.gz").string()); },
               "check that the directory exists");
  expect_error(
      [&] {
        ember::memory::record_allocations(ember::Device::cpu(),
                                          (dir_ / "none/x.trace.gz").string());
      },
      "check that the directory exists");
}

TEST_F(TraceTest, AFlushedGzipTraceIsReadableWhileTheWriterIsOpen) {
  const std::string path = (dir_ / "open.trace.gz").string();
  TraceWriter writer(path);
  writer.allocate(1, 100, 0);
  writer.free(1);
  writer.flush();
  EXPECT_EQ(ember::memory::read_trace(path).size(), 2u);
  writer.allocate(2, 200, 0);
  writer.flush();
  EXPECT_EQ(ember::memory::read_trace(path).size(), 3u);
}

TEST_F(TraceTest, OnlyRegularFilesAreRead) {
  const std::string fifo = (dir_ / "fifo.trace").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string& path : {fifo, std::string("/dev/zero"), dir_.string()}) {
    expect_error([&] { ember::memory::read_trace(path); }, {path, "not a regular file"});
  }
}

// ---- recording ---------------------------------------------------------------

class MallocAllocator final : public ember::Allocator {
 public:
  void* allocate(size_t bytes, ember::StreamId) override {
    return std::malloc(bytes == 0 ? 1 : bytes);
  }
  void deallocate(void* ptr, size_t, ember::StreamId) noexcept override { std::free(ptr); }
  void record_stream(void*, ember::StreamId) override {}
};

TEST_F(TraceTest, RecordingAllocatorWritesEveryAllocateAndFree) {
  const std::string path = (dir_ / "rec.trace").string();
  {
    auto writer = std::make_shared<TraceWriter>(path);
    ember::memory::TraceRecordingAllocator recorder(std::make_shared<MallocAllocator>(), writer);
    void* a = recorder.allocate(100, 0);
    void* b = recorder.allocate(200, 0);
    void* zero = recorder.allocate(0, 0);  // passed through, not recorded
    recorder.deallocate(a, 100, 0);
    recorder.deallocate(zero, 0, 0);
    void* c = recorder.allocate(300, 0);
    recorder.deallocate(b, 200, 0);
    recorder.deallocate(c, 300, 0);
  }
  const std::vector<TraceEvent> expected = {
      {TraceEvent::allocate, 1, 100, 0}, {TraceEvent::allocate, 2, 200, 0},
      {TraceEvent::free, 1, 0, 0},       {TraceEvent::allocate, 3, 300, 0},
      {TraceEvent::free, 2, 0, 0},       {TraceEvent::free, 3, 0, 0},
  };
  EXPECT_EQ(ember::memory::read_trace(path), expected);
}

TEST_F(TraceTest, RecordingAllocatorKeepsStreams) {
  using namespace ember::memory;
  const std::string path = (dir_ / "streams.trace").string();
  {
    auto caching = std::make_shared<CachingAllocator>(
        std::make_shared<SimulatedUpstream>(size_t{1} << 30),
        std::make_shared<SimulatedVirtualUpstream>(size_t{2} << 20, size_t{1} << 30));
    TraceRecordingAllocator recorder(caching, std::make_shared<TraceWriter>(path));
    const StreamId s1 = 0x7f001234, s2 = 0x7f005678;  // cudaStream_t-like handles
    void* a = recorder.allocate(1000, s1);
    void* b = recorder.allocate(2000, 0);
    recorder.record_stream(b, s2);
    void* c = recorder.allocate(3000, s2);
    recorder.deallocate(a, 1000, s1);
    recorder.deallocate(b, 2000, 0);
    recorder.deallocate(c, 3000, s2);
  }
  const std::vector<TraceEvent> expected = {
      {TraceEvent::allocate, 1, 1000, 1},   {TraceEvent::allocate, 2, 2000, 0},
      {TraceEvent::record_stream, 2, 0, 2}, {TraceEvent::allocate, 3, 3000, 2},
      {TraceEvent::free, 1, 0, 0},          {TraceEvent::free, 2, 0, 0},
      {TraceEvent::free, 3, 0, 0},
  };
  EXPECT_EQ(ember::memory::read_trace(path), expected);
}

TEST_F(TraceTest, RecordAllocationsWrapsTheDeviceAllocator) {
  const std::string path = (dir_ / "device.trace.gz").string();
  const auto previous = ember::allocator_for(ember::Device::cpu());
  {
    auto recorder = ember::memory::record_allocations(ember::Device::cpu(), path);
    EXPECT_EQ(ember::allocator_for(ember::Device::cpu()), recorder);
    EXPECT_EQ(recorder->inner(), previous);
    auto allocator = ember::allocator_for(ember::Device::cpu());
    void* p = allocator->allocate(4096, 0);
    allocator->deallocate(p, 4096, 0);
    ember::set_allocator(ember::Device::cpu(), recorder->inner());  // stop recording
  }
  EXPECT_EQ(ember::allocator_for(ember::Device::cpu()), previous);
  const std::vector<TraceEvent> expected = {{TraceEvent::allocate, 1, 4096, 0},
                                            {TraceEvent::free, 1, 0, 0}};
  EXPECT_EQ(ember::memory::read_trace(path), expected);
}

}  // namespace
