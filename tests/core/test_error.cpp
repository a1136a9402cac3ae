#include <gtest/gtest.h>

#include "ember/core/error.hpp"

namespace {

TEST(Error, CarriesMessageAndLocation) {
  try {
    EMBER_CHECK(1 + 1 == 3, "arithmetic is off: {} != {}", 2, 3);
    FAIL() << "EMBER_CHECK did not throw";
  } catch (const ember::Error& e) {
    EXPECT_EQ(e.message(), "arithmetic is off: 2 != 3");
    EXPECT_NE(std::string(e.what()).find("tests/core/test_error.cpp:"), std::string::npos)
        << e.what();
    EXPECT_GT(e.where().line(), 0u);
  }
}

TEST(Error, CheckPassesSilently) { EXPECT_NO_THROW(EMBER_CHECK(true, "never {}", 1)); }

TEST(Error, IsARuntimeError) {
  EXPECT_THROW(EMBER_THROW("boom {}", 1), std::runtime_error);
}

}  // namespace
