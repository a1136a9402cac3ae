// Compiled by the host compiler, as a user's .cpp file: ops::map, ops::map_reduce and ops::expr
// on a plain Stream compile (a CUDA one is refused at run time); on a CudaStream (a const one or
// a temporary too) they do not compile when EMBER_EXPECT_COMPILE_ERROR names a case
// (tests/CMakeLists.txt: ops.*_on_cuda_stream_in_a_cpp_file_does_not_compile).
#include "ember/core/cuda_stream.hpp"
#include "ember/ops/expr.hpp"
#include "ember/ops/map.hpp"

namespace expr = ember::ops::expr;

void on_any_stream(ember::Stream& stream, const ember::Tensor& y, const ember::Tensor& x) {
  ember::ops::map(
      stream, y, [](float v) { return 2 * v; }, x);
  ember::ops::map_reduce(
      stream, y, ember::ops::Sum{}, [](float v) { return v; }, x);
  expr::assign(stream, y, expr::tensor(x) * 2.f);
  expr::Out(stream, y) = expr::tensor(x) + 1.f;
}

#ifdef EMBER_EXPECT_COMPILE_ERROR
void on_a_cuda_stream(ember::CudaStream& stream, const ember::CudaStream& const_stream,
                      const ember::Tensor& y, const ember::Tensor& x) {
  (void)stream;
  (void)const_stream;
#if EMBER_EXPECT_COMPILE_ERROR == 1
  ember::ops::map(
      stream, y, [](float v) { return 2 * v; }, x);
#elif EMBER_EXPECT_COMPILE_ERROR == 2
  ember::ops::map_reduce(
      const_stream, y, ember::ops::Sum{}, [](float v) { return v; }, x);
#elif EMBER_EXPECT_COMPILE_ERROR == 3
  ember::ops::map(
      ember::CudaStream(0), ember::ops::outputs(y, y), [](float v) { return v; }, x);
#elif EMBER_EXPECT_COMPILE_ERROR == 4
  expr::assign(stream, y, expr::tensor(x) * 2.f);
#elif EMBER_EXPECT_COMPILE_ERROR == 5
  expr::Out(const_stream, y) = expr::tensor(x) + 1.f;
#endif
}
#endif
