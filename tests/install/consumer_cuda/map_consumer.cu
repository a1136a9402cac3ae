// ops::map with the user's own functor in the user's .cu file: the CUDA kernel is instantiated
// here by nvcc; the run uses a CPU stream (no GPU needed), the same functor and call.
#include <cstdio>
#include <vector>

#include <ember/ember.hpp>

struct Saxpy {
  float a;
  EMBER_HOST_DEVICE float operator()(float x, float y) const { return a * x + y; }
};

int main() {
  using namespace ember;
  Stream stream;  // the CPU's
  const Tensor x = Tensor::from_vector<float>({1, 2, 3}, {3});
  const Tensor y = Tensor::from_vector<float>({10, 20, 30}, {3});
  Tensor out = Tensor::empty({3});
  ops::map(stream, out, Saxpy{2.0f}, x, y);
  const std::vector<float> v = out.to_vector<float>();
  std::printf("%g %g %g\n", v[0], v[1], v[2]);
  return v == std::vector<float>{12, 24, 36} ? 0 : 1;
}
