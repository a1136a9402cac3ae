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
  EXPECT_GE(inner.start_us, outer.start_us);  // nested in time
  EXPECT_LE(inner.start_us + inner.duration_us, outer.start_us + outer.duration_us);
  EXPECT_GE(outer.duration_us, 4000);
  EXPECT_EQ(inner.thread, outer.thread);
  EXPECT_NE(other.thread, outer.thread);

  const std::string path = (std::filesystem::temp_directory_path() /
                            ("ember_trace_" + std::to_string(::getpid()) + ".json"))
                               .string();
  trace.write(path);
  std::ifstream in(path);
  const std::string json((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(json.starts_with("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[")) << json;
  EXPECT_NE(json.find(R"("name":"inner \"quoted\"","cat":"test","ph":"X")"), std::string::npos)
      << json;
  const std::regex event(
      R"(\{"name":"[^}]*","cat":"test","ph":"X","ts":[0-9]+,"dur":[0-9]+,"pid":1,"tid":[0-9]+\})");
  EXPECT_EQ(
      std::distance(std::sregex_iterator(json.begin(), json.end(), event), std::sregex_iterator()),
      3);
  std::filesystem::remove(path);
  expect_error([&] { trace.write("/nonexistent/dir/t.json"); },
               {"profile::Trace::write: cannot write /nonexistent/dir/t.json"});
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
