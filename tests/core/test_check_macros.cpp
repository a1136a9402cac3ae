// The status-code check macros of the vendor libraries, where the build has them.
#include <gtest/gtest.h>

#include <string>

#include "ember/core/error.hpp"
#include "test_support.hpp"
#if EMBER_WITH_CUDA
#include "ember/core/check_cuda.hpp"
#endif
#if EMBER_TEST_HAS_NCCL
#include "ember/core/check_nccl.hpp"
#endif
#if EMBER_TEST_HAS_MPI
#include "ember/core/check_mpi.hpp"
#endif

namespace {

#if EMBER_WITH_CUDA
TEST(CheckMacros, CudaNamesTheCallAndTheError) {
  EXPECT_NO_THROW(EMBER_CUDA_CHECK(cudaSuccess));
  const std::string m =
      ember::testing::error_message([] { EMBER_CUDA_CHECK(cudaErrorInvalidValue); });
  EXPECT_NE(m.find("CUDA call 'cudaErrorInvalidValue' failed: cudaErrorInvalidValue"),
            std::string::npos)
      << m;
}
#endif

#if EMBER_TEST_HAS_NCCL
TEST(CheckMacros, NcclNamesTheResult) {
  EXPECT_NO_THROW(EMBER_NCCL_CHECK(ncclSuccess));
  const std::string m =
      ember::testing::error_message([] { EMBER_NCCL_CHECK(ncclInvalidArgument); });
  EXPECT_NE(m.find("NCCL call 'ncclInvalidArgument' failed"), std::string::npos) << m;
  EXPECT_NE(m.find("code 4"), std::string::npos) << m;
}
#endif

#if EMBER_TEST_HAS_MPI
// Open MPI aborts when MPI_Error_string runs before MPI_Init, so only the success
// path runs here; the failure path is compile-checked.
TEST(CheckMacros, MpiSuccessPasses) {
  EXPECT_NO_THROW(EMBER_MPI_CHECK(MPI_SUCCESS));
}
#endif

TEST(CheckMacros, ConditionCheckFormatsArguments) {
  const std::string m =
      ember::testing::error_message([] { EMBER_CHECK(2 < 1, "{} is not below {}", 2, 1); });
  EXPECT_EQ(m, "2 is not below 1");
}

}  // namespace
