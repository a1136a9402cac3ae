// profile::Trace and profile::Range: ranges record only while a trace records, nest on their
// thread, come out as Chrome trace events (checked by reading the file back), and one trace
// records at a time.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <thread>

#include "ember/core/profile.hpp"
#include "test_support.hpp"

namespace {

using ember::profile::Range;
using ember::profile::Trace;

// What Trace::write puts in a file.
std::string written(const Trace& trace) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("ember_trace_" + std::to_string(::getpid()) + ".json"))
                               .string();
  trace.write(path);
  std::ifstream in(path);
  const std::string json((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::filesystem::remove(path);
  return json;
}

using ember::testing::expect_error;

TEST(ProfileTrace, RangesNestAndRecordOnlyWhileATraceRecords) {
  { Range before("before", "test"); }
  Trace trace;
  EXPECT_EQ(ember::profile::active(), nullptr);
  trace.start();
  EXPECT_TRUE(trace.recording());
  {
    Range outer("outer", "test");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    {
      Range inner(std::string("inner \"quoted\""), "test");
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    std::thread([] { Range other("other thread", "test"); }).join();
  }
  trace.stop();
  { Range after("after", "test"); }
  const auto events = trace.events();
  ASSERT_EQ(events.size(), 3u);
  const auto& inner = events[0];
  const auto& other = events[1];
  const auto& outer = events[2];
  EXPECT_EQ(outer.name, "outer");
  EXPECT_EQ(inner.name, "inner \"quoted\"");
  EXPECT_EQ(other.name, "other thread");
  EXPECT_GE(inner.start_ns, outer.start_ns);  // nested in time
  EXPECT_LE(inner.start_ns + inner.duration_ns, outer.start_ns + outer.duration_ns);
  EXPECT_GE(outer.duration_ns, 4000000);
  EXPECT_EQ(inner.thread, outer.thread);
  EXPECT_NE(other.thread, outer.thread);

  const std::string json = written(trace);
  EXPECT_TRUE(json.starts_with("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[")) << json;
  EXPECT_NE(json.find(R"({"name":"process_name","ph":"M","pid":1,"args":{"name":"host"}})"),
            std::string::npos)
      << json;
  EXPECT_NE(json.find(R"("name":"inner \"quoted\"","cat":"test","ph":"X")"), std::string::npos)
      << json;
  const std::regex event(
      R"(\{"name":"[^}]*","cat":"test","ph":"X","ts":[0-9]+\.[0-9]{3},"dur":[0-9]+\.[0-9]{3},"pid":1,"tid":[0-9]+\})");
  EXPECT_EQ(
      std::distance(std::sregex_iterator(json.begin(), json.end(), event), std::sregex_iterator()),
      3);
  expect_error([&] { trace.write("/nonexistent/dir/t.json"); },
               {"profile::Trace::write: cannot write /nonexistent/dir/t.json"});
}

// An op's range is a Range of category "op" (and an NVTX range, which needs a tool to see).
// Device intervals go to process 2, one named track per stream, in microseconds with
// nanosecond digits.
TEST(ProfileTrace, OpRangesAndDeviceIntervals) {
  { EMBER_OP_RANGE("before"); }
  Trace trace;
  trace.start();
  EXPECT_FALSE(trace.device_intervals().empty());
  const auto t0 = std::chrono::steady_clock::now();
  {
    EMBER_OP_RANGE("matmul");
    EMBER_OP_RANGE("inner");
  }
  trace.add_device("gemm_kernel", "kernel", 7, t0 + std::chrono::nanoseconds(1500),
                   t0 + std::chrono::nanoseconds(4250));
  trace.stop();
  const auto events = trace.events();
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].name, "inner");
  EXPECT_STREQ(events[0].category, "op");
  EXPECT_EQ(events[1].name, "matmul");
  EXPECT_FALSE(events[1].device);
  EXPECT_TRUE(events[2].device);
  EXPECT_EQ(events[2].thread, 7u);
  EXPECT_EQ(events[2].duration_ns, 2750);

  const std::string json = written(trace);
  EXPECT_NE(json.find(R"("name":"gemm_kernel","cat":"kernel","ph":"X")"), std::string::npos)
      << json;
  EXPECT_NE(json.find(R"("dur":2.750,"pid":2,"tid":7})"), std::string::npos) << json;
  EXPECT_NE(
      json.find(R"({"name":"thread_name","ph":"M","pid":2,"tid":7,"args":{"name":"stream 7"}})"),
      std::string::npos)
      << json;
}

// A range open across start(), and an interval that began before it, are cut at the trace's
// start: no negative times. Bytes beyond ASCII in a name keep the file JSON.
TEST(ProfileTrace, NothingStartsBeforeTheTrace) {
  Trace trace;
  trace.start();
  const auto before = std::chrono::steady_clock::now();
  {
    Range open("across the restart \xff", "test");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    trace.start(/*device_intervals=*/false);
    EXPECT_EQ(trace.device_intervals(), "none: not asked for (Trace::start(false))");
  }
  trace.add_device("early", "kernel", 1, before, std::chrono::steady_clock::now());
  trace.stop();
  const auto events = trace.events();
  ASSERT_EQ(events.size(), 2u);
  for (const auto& e : events) {
    EXPECT_GE(e.start_ns, 0) << e.name;
    EXPECT_GE(e.duration_ns, 0) << e.name;
  }
  const std::string json = written(trace);
  EXPECT_NE(json.find(R"("name":"across the restart \u00ff")"), std::string::npos) << json;
}

TEST(ProfileTrace, KernelLabelsDropTemplateAndParameterLists) {
  using ember::profile::detail::kernel_label;
  EXPECT_EQ(kernel_label("ember::ops::map_kernel<float, 2>(float*, int)"),
            "ember::ops::map_kernel");
  EXPECT_EQ(kernel_label("gemm(int)"), "gemm");
  EXPECT_EQ(kernel_label("plain"), "plain");
  EXPECT_EQ(kernel_label("<lambda>"), "<lambda>");
}

TEST(ProfileTrace, OneTraceRecordsAtATime) {
  Trace a, b;
  a.start();
  expect_error([&] { b.start(); }, {"another trace is recording"});
  a.start();  // again: cleared, still recording
  EXPECT_TRUE(a.recording());
  a.stop();
  b.start();
  EXPECT_TRUE(b.recording());
}  // destroying a recording trace stops it

TEST(ProfileTrace, ADestroyedTraceStopsRecording) {
  {
    Trace t;
    t.start();
  }
  EXPECT_EQ(ember::profile::active(), nullptr);
}

}  // namespace
