#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <utility>

#include "ember/core/error.hpp"
#include "ember/core/stream.hpp"
#include "test_support.hpp"

namespace {

using ember::testing::error_message;

using ember::Device;
using ember::Event;
using ember::Stream;

TEST(Stream, CpuStreamRunsInline) {
  Stream stream;
  EXPECT_EQ(stream.device(), Device::cpu());
  EXPECT_EQ(stream.native(), nullptr);
  EXPECT_NO_THROW(stream.synchronize());
  Stream moved(std::move(stream));
  EXPECT_EQ(moved.device(), Device::cpu());
  Stream assigned(Device::cpu());
  assigned = std::move(moved);
  EXPECT_NO_THROW(assigned.synchronize());
}

TEST(Event, RecordQuerySynchronize) {
  Stream stream;
  Event event;
  event.record(stream);
  EXPECT_TRUE(event.query());  // CPU work is done by the time record returns
  EXPECT_NO_THROW(event.synchronize());
  EXPECT_GE(event.elapsed_ms(event), 0.0f);
  Event second;
  second.record(stream);
  EXPECT_GE(second.elapsed_ms(event), 0.0f);
}

TEST(Event, ElapsedMatchesASleep) {
  Stream stream;
  Event start, end;
  start.record(stream);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  end.record(stream);
  end.synchronize();
  const float ms = end.elapsed_ms(start);
  EXPECT_GE(ms, 19.9f);    // sleep_for never returns early on a steady clock
  EXPECT_LT(ms, 2000.0f);  // loose: a loaded machine may oversleep
}

TEST(Event, UnrecordedEventsAreErrors) {
  Event never;
  EXPECT_NE(error_message([&] { (void)never.query(); }).find("never recorded"), std::string::npos);
  EXPECT_NE(error_message([&] { never.synchronize(); }).find("never recorded"), std::string::npos);
  Event recorded;
  recorded.record(Stream());
  EXPECT_NE(error_message([&] { (void)recorded.elapsed_ms(never); }).find("both events"),
            std::string::npos);
  EXPECT_THROW((void)never.elapsed_ms(recorded), ember::Error);
}

TEST(Event, MoveKeepsTheRecording) {
  Stream stream;
  Event a;
  a.record(stream);
  Event b(std::move(a));
  EXPECT_TRUE(b.query());
  Event c;
  c = std::move(b);
  EXPECT_TRUE(c.query());
  EXPECT_GE(c.elapsed_ms(c), 0.0f);
}

}  // namespace
