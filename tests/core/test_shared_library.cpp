// The loader behind ember's optional CUDA libraries (cuBLASLt, NCCL): a missing library or symbol
// is an Error naming it, raised when something needs it, never at startup.
#include "core/shared_library.hpp"

#include <gtest/gtest.h>

#include "ember/core/error.hpp"
#include "test_support.hpp"

namespace {

using ember::detail::SharedLibrary;

TEST(SharedLibrary, AMissingLibraryIsAnErrorNamingItWhenUsed) {
  const SharedLibrary library("libember-no-such-library.so.7");
  EXPECT_FALSE(library.loaded());
  EXPECT_NE(library.error().find("libember-no-such-library.so.7"), std::string::npos)
      << library.error();
  ember::testing::expect_error([&] { library.symbol("anything"); },
                               "libember-no-such-library.so.7 could not be loaded");
}

TEST(SharedLibrary, BindsFunctionsAndNamesAMissingSymbol) {
  const SharedLibrary zlib("libz.so.1");  // ember links zlib: always present
  ASSERT_TRUE(zlib.loaded()) << zlib.error();
  EXPECT_EQ(zlib.error(), "");
  const char* (*version)() = nullptr;
  zlib.bind("zlibVersion", version);
  ASSERT_NE(version, nullptr);
  EXPECT_EQ(version()[0], '1');
  ember::testing::expect_error([&] { zlib.symbol("ncclAllReduce"); },
                               "libz.so.1 has no ncclAllReduce");
}

}  // namespace
