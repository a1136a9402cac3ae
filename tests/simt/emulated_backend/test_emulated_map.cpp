// ops::map on an (emulated) CUDA device alone: which operands let the kernels take the 128-bit
// path (ops::detail::map_vector_ok). Map's results on every device, through both paths, are
// tested in tests/ops/map_cases.cpp.
#include <gtest/gtest.h>

#include "ember/core/tensor.hpp"
#include "ember/ops/map.hpp"
#include "emulated_test_support.hpp"

namespace {

using ember::Device;
using ember::DType;
using ember::Tensor;
using ember::TensorView;
using ember::testing::offset_by_one;
namespace ops = ember::ops;

const Device kGpu = Device::cuda(0);

TEST(EmulatedMap, VectorPathNeedsAlignmentAndRowsOfEight) {
  using ops::detail::MapInputSpec;
  using ops::detail::MapKind;
  const Tensor x = Tensor::zeros({4, 48}, DType::f16, kGpu),
               r = Tensor::zeros({48}, DType::f32, kGpu);
  const TensorView shifted = offset_by_one(x, 8);
  const MapInputSpec aligned[] = {{MapKind::tensor, &x.view()}, {MapKind::row, &r.view()}};
  const MapInputSpec misaligned[] = {{MapKind::tensor, &shifted}};
  EXPECT_TRUE(ops::detail::map_vector_ok(&x.view(), 1, aligned, 2, 48));
  EXPECT_FALSE(ops::detail::map_vector_ok(&x.view(), 1, aligned, 2, 45));  // rows straddle chunks
  EXPECT_FALSE(ops::detail::map_vector_ok(&x.view(), 1, misaligned, 1, 48));
}

}  // namespace
