// Fits y = 3x - 1 with one Linear layer and SGD, through the installed ember.
#include <cmath>
#include <cstdio>

#include <ember/ember.hpp>

int main() {
  using namespace ember;
  std::printf("CUDA devices: %d\n", cuda_device_count());
  Stream stream;
  nn::Context ctx{stream};
  nn::Linear layer(1, 1, {.seed = 1});
  train::SGD sgd(layer.parameters(), {.lr = 0.1f, .momentum = 0.5f});
  const Tensor x = Tensor::from_vector<float>({-1, -0.5f, 0, 0.5f, 1}, {5, 1});
  const Tensor target = Tensor::from_vector<float>({-4, -2.5f, -1, 0.5f, 2}, {5, 1});
  Tensor dy = Tensor::empty({5, 1});
  for (int step = 0; step < 200; ++step) {
    sgd.zero_grad();
    const Tensor y = layer.forward(ctx, x);
    ops::scale(stream, dy, target, -1.0f);  // dy = y - target: the gradient of 0.5 |y - t|^2
    ops::add(stream, dy, dy, y);
    layer.backward(ctx, dy);
    sgd.step();
  }
  const float w = layer.weight().value.to_vector<float>()[0];
  const float b = layer.bias().value.to_vector<float>()[0];
  std::printf("learned w=%.4f b=%.4f\n", w, b);
  return std::abs(w - 3) < 1e-3f && std::abs(b + 1) < 1e-3f ? 0 : 1;
}
