// EMBER_ALLOC_CONF parsing: every key, and clear errors for the rest.
#include <gtest/gtest.h>

#include "ember/core/error.hpp"
#include "ember/memory/config.hpp"
#include "test_support.hpp"

namespace ember::memory {
namespace {

std::string error_of(std::string_view text) {
  return ember::testing::error_message([&] { parse_allocator_config(text); });
}

TEST(AllocatorConfig, ParsesEveryKey) {
  const AllocatorConfig c = parse_allocator_config(
      " max_split_size_mb:128, roundup_power2_divisions:4,garbage_collection_threshold:0.8,"
      "expandable_segments:false,max_reserved_mb:1024,memory_fraction:0.5,max_map_mb:48,"
      "growth_granularity_mb:8,debug_guard:true");
  EXPECT_TRUE(c.debug_guard);
  EXPECT_EQ(c.max_split_size, size_t{128} << 20);
  EXPECT_EQ(c.roundup_power2_divisions, 4);
  EXPECT_DOUBLE_EQ(c.garbage_collection_threshold, 0.8);
  EXPECT_FALSE(c.expandable_segments);
  EXPECT_EQ(c.max_reserved, size_t{1024} << 20);
  EXPECT_DOUBLE_EQ(c.memory_fraction, 0.5);
  EXPECT_EQ(c.max_map_size, size_t{48} << 20);
  EXPECT_EQ(c.growth_granularity, size_t{8} << 20);
  const AllocatorConfig round_trip = parse_allocator_config(to_string(c));
  EXPECT_EQ(round_trip.max_split_size, c.max_split_size);
  EXPECT_EQ(round_trip.max_map_size, c.max_map_size);
  EXPECT_EQ(round_trip.growth_granularity, c.growth_granularity);
  EXPECT_EQ(round_trip.expandable_segments, c.expandable_segments);
  EXPECT_EQ(round_trip.debug_guard, c.debug_guard);
  EXPECT_FALSE(parse_allocator_config("").debug_guard);
  EXPECT_THROW(parse_allocator_config("debug_guard:maybe"), ember::Error);
}

TEST(AllocatorConfig, MegabyteCountsThatWrapAreErrors) {
  // 2^44 MiB is 2^64 bytes: one more than fits.
  for (const char* key :
       {"max_split_size_mb", "max_reserved_mb", "max_map_mb", "growth_granularity_mb"}) {
    ember::testing::expect_error(
        [&] { parse_allocator_config(std::string(key) + ":17592186044416"); },
        {key, "more than 2^64 bytes"});
  }
  EXPECT_EQ(parse_allocator_config("max_reserved_mb:17592186044415").max_reserved,
            size_t{17592186044415} << 20);
}

TEST(AllocatorConfig, EmptyIsDefault) {
  const AllocatorConfig c = parse_allocator_config("");
  EXPECT_TRUE(c.expandable_segments);
  EXPECT_EQ(c.max_split_size, 0u);
}

TEST(AllocatorConfig, PyTorchPolicy) {
  const AllocatorConfig c = parse_allocator_config("max_split_size_mb:64,policy:pytorch");
  EXPECT_FALSE(c.expandable_segments);
  EXPECT_EQ(c.max_split_size, size_t{64} << 20);  // later keys override the policy anywhere
  EXPECT_EQ(c.large_buffer, size_t{20} << 20);
  EXPECT_EQ(c.min_large_alloc, size_t{10} << 20);
  // With expandable segments PyTorch maps 20 MiB handles (kLargeBuffer).
  EXPECT_EQ(c.max_map_size, size_t{20} << 20);
  EXPECT_EQ(c.growth_granularity, size_t{20} << 20);
}

TEST(AllocatorConfig, UnknownKeyListsValidKeys) {
  const std::string m = error_of("max_split_size:128");
  EXPECT_NE(m.find("unknown key 'max_split_size'"), std::string::npos) << m;
  EXPECT_NE(m.find("max_split_size_mb:"), std::string::npos) << m;
  EXPECT_NE(m.find("expandable_segments:<true|false>"), std::string::npos) << m;
}

TEST(AllocatorConfig, BadValuesSayWhatIsExpected) {
  EXPECT_NE(error_of("max_split_size_mb:abc").find("needs a whole number of MiB"),
            std::string::npos);
  EXPECT_NE(error_of("roundup_power2_divisions:3").find("power of two"), std::string::npos);
  EXPECT_NE(error_of("garbage_collection_threshold:1.5").find("0 < t < 1"), std::string::npos);
  EXPECT_NE(error_of("expandable_segments:yes").find("true or false"), std::string::npos);
  EXPECT_NE(error_of("memory_fraction:2").find("0 < f <= 1"), std::string::npos);
  EXPECT_NE(error_of("policy:tf").find("ember or pytorch"), std::string::npos);
  EXPECT_NE(error_of("expandable_segments").find("expected key:value"), std::string::npos);
  EXPECT_NE(error_of("max_split_size_mb:-1").find("found '-1'"), std::string::npos);
}

}  // namespace
}  // namespace ember::memory
