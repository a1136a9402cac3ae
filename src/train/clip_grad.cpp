#include "ember/train/clip_grad.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/cpu_parallel.hpp"
#include "ember/core/denormals.hpp"
#include "ember/core/error.hpp"

#if EMBER_WITH_CUDA
#include <cuda_runtime.h>

#include "cuda/clip_grad_cuda.hpp"
#include "ember/core/check_cuda.hpp"
#endif

namespace ember::train {
namespace {

constexpr int64_t kChunk = 32768;  // elements per partial sum, as the CUDA blocks

// The CPU pass: chunk partials in double (in parallel), combined in order, then the scaling.
void clip_on_cpu(const std::vector<std::pair<float*, int64_t>>& grads, float max_norm,
                 float* total_norm) {
  std::vector<std::pair<const float*, int64_t>> chunks;  // (start, length)
  for (const auto& [g, n] : grads) {
    for (int64_t begin = 0; begin < n; begin += kChunk) {
      chunks.emplace_back(g + begin, std::min(kChunk, n - begin));
    }
  }
  std::vector<double> partials(chunks.size());
  const auto count = static_cast<int64_t>(chunks.size());
  ember::detail::parallel_for(count, count > 1, [&](int64_t c) {
    double sum = 0.0;
    const auto [p, n] = chunks[static_cast<size_t>(c)];
    for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(p[i]) * p[i];
    partials[static_cast<size_t>(c)] = sum;
  });
  double sum = 0.0;
  for (double s : partials) sum += s;
  const auto norm = static_cast<float>(std::sqrt(sum));
  *total_norm = norm;
  const float f = max_norm / (norm + 1e-6f);
  const float factor = f > 1.0f ? 1.0f : f;  // nan stays nan, as PyTorch's clamp
  if (factor == 1.0f) return;
  for (const auto& [g, n] : grads) {
    const bool flush_mode = ember::detail::flush_denormals_now();
#pragma omp parallel if (n > 65536)
    {
      const ember::detail::CpuFloatScope float_scope(flush_mode);
#pragma omp for simd schedule(static) nowait
      for (int64_t i = 0; i < n; ++i) g[i] = g[i] * factor;
    }
  }
}

}  // namespace

Tensor clip_grad_norm(Stream& stream, const std::vector<nn::Parameter*>& parameters,
                      float max_norm) {
  constexpr const char* kOp = "clip_grad_norm";
  EMBER_CHECK(std::isfinite(max_norm) && max_norm > 0,
              "{}: max_norm must be finite and > 0, not {}", kOp, max_norm);
  const Device device = stream.device();
  std::vector<std::pair<float*, int64_t>> grads;
  for (size_t i = 0; i < parameters.size(); ++i) {
    const nn::Parameter* p = parameters[i];
    EMBER_CHECK(p != nullptr, "{}: parameter {} is null", kOp, i);
    // A gradient zero_grad left pending is zero (filled now); the clip writes them all anyway.
    const Tensor& g = const_cast<nn::Parameter*>(p)->materialized_grad();
    EMBER_CHECK(g.defined() && g.dtype() == DType::f32 && g.device() == device,
                "{}: the gradient of parameter {} ('{}') must be f32 on {} (the stream's "
                "device), not {}",
                kOp, i, p->name, device.to_string(),
                g.defined() ? g.view().describe() : std::string("undefined"));
    for (const auto& [other, n] : grads) {
      EMBER_CHECK(g.numel() == 0 || other != g.data(),
                  "{}: parameter {} ('{}') is given twice; its gradient would count twice", kOp, i,
                  p->name);
    }
    mark_written(g);
    if (g.numel() > 0) grads.emplace_back(const_cast<Tensor&>(g).data<float>(), g.numel());
  }
  Tensor total = Tensor::empty({1}, DType::f32, stream);
  if (device.is_cpu()) {
    clip_on_cpu(grads, max_norm, total.data<float>());
    return total;
  }
#if EMBER_WITH_CUDA
  // After the gradients' pending work on their own streams; later work there sees the scaling.
  std::vector<Stream> others;
  for (const nn::Parameter* p : parameters) {
    const Stream& s = p->grad.stream();
    if (s == stream || std::find(others.begin(), others.end(), s) != others.end()) continue;
    stream.wait(s);
    others.push_back(s);
  }
  const int64_t chunks = cuda::clip_grad_chunks(grads);
  Tensor partials = Tensor::empty({std::max<int64_t>(chunks, 1)}, DType::i64, stream);  // doubles
  Tensor factor = Tensor::empty({1}, DType::f32, stream);
  EMBER_CUDA_CHECK(cudaSetDevice(device.index()));
  cuda::clip_grad_norm(grads, max_norm, static_cast<double*>(partials.data()), total.data<float>(),
                       factor.data<float>(), static_cast<cudaStream_t>(stream.native()));
  for (const Stream& s : others) s.wait(stream);
  return total;
#else
  EMBER_THROW("{}: gradients on {} need a build with CUDA", kOp, device.to_string());
#endif
}

}  // namespace ember::train
