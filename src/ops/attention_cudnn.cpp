// cuDNN's fused attention through the cuDNN frontend's graph API (header-only; PyPI's
// nvidia-cudnn-frontend), with cuDNN loaded at run time as cuBLASLt is: the frontend's dynamic
// loading resolves every cuDNN call through the handle opened here, so libember starts without
// cuDNN and an attention call that needs it says why it cannot run. One handle per device, and a
// plan per case (shape, dtype, mask, scale; forward or backward) built once: graph, heuristics,
// support check, execution plan and workspace size.
//
// Built where CMake found the frontend's headers (EMBER_WITH_CUDNN_FRONTEND); elsewhere, the
// emulated build included, every case is unavailable, with the reason.
#include "ops/attention_cudnn.hpp"

#include <fmt/format.h>

#include "ember/core/error.hpp"

#if EMBER_WITH_CUDNN_FRONTEND
#define NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING
#include <cudnn_frontend.h>
#include <dlfcn.h>

#include <cuda_runtime.h>

#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <unordered_map>

#include "ember/core/scratch.hpp"
#include "ops/reduce/reduce_cuda.hpp"

// The frontend's dynamic loading reads cuDNN's functions from this handle (its own declaration:
// cudnn_frontend_shim.h).
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
}
#endif

namespace ember::ops::cudnn_attention {

#if !EMBER_WITH_CUDNN_FRONTEND

std::string unavailable() {
  return "this build of ember has no cuDNN attention (built without the cuDNN frontend headers, "
         "which ember.sh installs from PyPI's nvidia-cudnn-frontend; the emulated build never "
         "has it)";
}
std::string unsupported(Stream&, const Case&, bool) {
  return unavailable();
}
void forward(Stream&, const Case&, const void*, void*, float*) {
  EMBER_THROW("cuDNN attention: {}", unavailable());
}
void backward(Stream&, const Case&, const void*, const void*, const float*, const void*, void*) {
  EMBER_THROW("cuDNN attention: {}", unavailable());
}

#else

namespace {

namespace fe = cudnn_frontend;

// The oldest cuDNN ember asks for fused attention (9.5: the frontend's SDPA support surface as
// ember uses it; Blackwell's deterministic backward needs 9.18, which the support check says).
constexpr int64_t kMinimumVersion = 90500;

// The tensors' ids in a plan's variant pack.
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDout, kDq, kDk, kDv };

struct Library {
  std::string error;  // "" when loaded
  int64_t version = 0;
};

const Library& library() {
  static const Library lib = [] {
    Library l;
    dlerror();
    void* handle = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* why = dlerror();
      l.error = fmt::format(
          "libcudnn.so.9 could not be loaded ({}); install cuDNN 9 (Debian's "
          "nvidia-cudnn, or PyPI's nvidia-cudnn-cu12/13) where the loader finds it",
          why != nullptr ? why : "unknown reason");
      return l;
    }
    fe::cudnn_dlhandle = handle;
    try {
      l.version = static_cast<int64_t>(fe::detail::get_backend_version());
    } catch (const std::exception& e) {
      l.error = fmt::format("libcudnn.so.9 has no cudnnGetVersion: {}", e.what());
      return l;
    }
    if (l.version < kMinimumVersion) {
      l.error = fmt::format(
          "cuDNN {} is older than 9.5, the first with a deterministic fused "
          "attention backward",
          l.version);
    }
    return l;
  }();
  return lib;
}

// Making a handle or a plan calls the CUDA runtime (allocations, queries), which a stream capture
// in progress on this thread would refuse, abandoning the capture and caching a failure: the
// automatic kernel's first call may come inside ember::Graph::capture. Relaxed capture mode
// around them, as cuBLAS and PyTorch do for their handles and workspaces.
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() { cudaThreadExchangeStreamCaptureMode(&mode_); }
  ~RelaxedCaptureMode() { cudaThreadExchangeStreamCaptureMode(&mode_); }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
};

// One cuDNN handle per device, made on first use with that device current; calls on it are
// serialized (a handle has one stream at a time).
struct Handle {
  std::mutex mutex;
  cudnnHandle_t handle = nullptr;
  std::string error;
};

Handle& handle_for(const Stream& stream) {
  static std::mutex mutex;
  static std::map<int, std::unique_ptr<Handle> > handles;
  std::lock_guard lock(mutex);
  const auto it = handles.find(stream.device().index());
  if (it != handles.end()) return *it->second;
  // Made whole before it is kept: a failure leaves a handle that says why.
  auto h = std::make_unique<Handle>();
  const RelaxedCaptureMode relaxed;
  try {
    ember::ops::cuda::enter(stream);  // the handle belongs to the current device
    const cudnnStatus_t status = fe::detail::create_handle(&h->handle);
    if (status != CUDNN_STATUS_SUCCESS) {
      h->error = fmt::format("cudnnCreate failed on {}: {}", stream.device().to_string(),
                             fe::detail::get_error_string(status));
      h->handle = nullptr;
    }
  } catch (const std::exception& e) {
    h->error = fmt::format("cudnnCreate failed on {}: {}", stream.device().to_string(), e.what());
    h->handle = nullptr;
  }
  return *handles.emplace(stream.device().index(), std::move(h)).first->second;
}

// The device's compute capability as the frontend wants it (86, 90, ...), from ember's own CUDA
// runtime: given to each graph, the frontend needs no CUDA runtime of its own to find it.
int32_t sm_version(const Stream& stream) {
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, stream.device().index());
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, stream.device().index());
  return major * 10 + minor;
}

struct Plan {
  std::shared_ptr<fe::graph::Graph> graph;
  int64_t workspace = 0;
  std::string error;  // "" when the plan runs
};

using Key = std::tuple<int, int64_t, int64_t, int64_t, int64_t, int, bool, uint32_t, bool>;

Key key_of(const Stream& stream, const Case& c, bool backward) {
  uint32_t scale_bits = 0;
  std::memcpy(&scale_bits, &c.scale, sizeof scale_bits);
  return {stream.device().index(),   c.batch,  c.seq,      c.heads, c.dim,
          static_cast<int>(c.dtype), c.causal, scale_bits, backward};
}

// ember's layouts as cuDNN's [B, H, T, D] tensors: q, k and v interleaved in qkv, out and dout
// [B, T, H, D], the statistics (lse) [B, H, T, 1].
struct Layout {
  std::vector<int64_t> dims, qkv_stride, out_stride, stats_dims, stats_stride;
  explicit Layout(const Case& c)
      : dims{c.batch, c.heads, c.seq, c.dim},
        qkv_stride{c.seq * 3 * c.heads * c.dim, c.dim, 3 * c.heads * c.dim, 1},
        out_stride{c.seq * c.heads * c.dim, c.dim, c.heads * c.dim, 1},
        stats_dims{c.batch, c.heads, c.seq, 1},
        stats_stride{c.heads * c.seq, c.seq, 1, 1} {}
};

std::shared_ptr<fe::graph::Graph> make_graph(const Case& c, bool backward, int32_t sm) {
  const Layout l(c);
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_sm_version(sm);  // before the nodes: each copies the graph's context
  g->set_io_data_type(c.dtype == DType::bf16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  auto tensor = [&](const char* name, int64_t uid, const std::vector<int64_t>& dims,
                    const std::vector<int64_t>& stride) {
    return g->tensor(
        fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(dims).set_stride(
            stride));
  };
  auto q = tensor("Q", kQ, l.dims, l.qkv_stride);
  auto k = tensor("K", kK, l.dims, l.qkv_stride);
  auto v = tensor("V", kV, l.dims, l.qkv_stride);
  if (!backward) {
    auto options = fe::graph::SDPA_attributes()
                       .set_name("ember_attention")
                       .set_generate_stats(true)
                       .set_attn_scale(c.scale);
    if (c.causal) {
      options.set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
          .set_diagonal_band_right_bound(0);
    }
    auto [o, stats] = g->sdpa(q, k, v, options);
    o->set_output(true).set_uid(kO).set_dim(l.dims).set_stride(l.out_stride);
    stats->set_output(true)
        .set_uid(kStats)
        .set_data_type(fe::DataType_t::FLOAT)
        .set_dim(l.stats_dims)
        .set_stride(l.stats_stride);
    return g;
  }
  auto o = tensor("O", kO, l.dims, l.out_stride);
  auto dout = tensor("dO", kDout, l.dims, l.out_stride);
  auto stats = tensor("Stats", kStats, l.stats_dims, l.stats_stride);
  stats->set_data_type(fe::DataType_t::FLOAT);
  // Deterministic: a checkpoint's recomputed backward gives the bits of plain training.
  auto options = fe::graph::SDPA_backward_attributes()
                     .set_name("ember_attention_backward")
                     .set_attn_scale(c.scale)
                     .set_deterministic_algorithm(true);
  if (c.causal) {
    options.set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
        .set_diagonal_band_right_bound(0);
  }
  auto [dq, dk, dv] = g->sdpa_backward(q, k, v, o, dout, stats, options);
  dq->set_output(true).set_uid(kDq).set_dim(l.dims).set_stride(l.qkv_stride);
  dk->set_output(true).set_uid(kDk).set_dim(l.dims).set_stride(l.qkv_stride);
  dv->set_output(true).set_uid(kDv).set_dim(l.dims).set_stride(l.qkv_stride);
  return g;
}

Plan build_plan(cudnnHandle_t handle, const Case& c, bool backward, int32_t sm) {
  Plan plan;
  try {
    auto g = make_graph(c, backward, sm);
    auto run = [&](fe::error_t status, const char* step) {
      if (status.is_bad() && plan.error.empty()) {
        plan.error = fmt::format("{}: {}", step, status.get_message());
      }
      return plan.error.empty();
    };
    if (run(g->validate(), "validate") &&
        run(g->build_operation_graph(handle), "build_operation_graph") &&
        run(g->create_execution_plans({fe::HeurMode_t::A}), "create_execution_plans") &&
        run(g->check_support(handle), "check_support") &&
        run(g->build_plans(handle), "build_plans")) {
      int64_t workspace = 0;
      if (run(g->get_workspace_size(workspace), "get_workspace_size")) {
        plan.graph = std::move(g);
        plan.workspace = workspace;
      }
    }
  } catch (const std::exception& e) {  // the frontend's own exceptions (a missing symbol)
    plan.error = e.what();
  }
  return plan;
}

// The cached plan of a case (its error, when cuDNN cannot run it).
const Plan& plan_for(Stream& stream, Handle& h, const Case& c, bool backward) {
  static std::mutex mutex;
  static std::map<Key, Plan> plans;
  const Key key = key_of(stream, c, backward);
  {
    std::lock_guard lock(mutex);
    const auto it = plans.find(key);
    if (it != plans.end()) return it->second;
  }
  Plan plan;
  {
    std::lock_guard handle_lock(h.mutex);
    const RelaxedCaptureMode relaxed;
    ember::ops::cuda::enter(stream);
    plan = build_plan(h.handle, c, backward, sm_version(stream));
  }
  std::lock_guard lock(mutex);
  return plans.try_emplace(key, std::move(plan)).first->second;  // std::map: stable references
}

void execute(Stream& stream, Handle& h, const Plan& plan, std::unordered_map<int64_t, void*>& pack,
             const char* what) {
  const Scratch workspace(stream, static_cast<size_t>(plan.workspace));
  std::lock_guard lock(h.mutex);
  const cudaStream_t handle_stream = ember::ops::cuda::enter(stream);
  const cudnnStatus_t status = fe::detail::set_stream(h.handle, handle_stream);
  EMBER_CHECK(status == CUDNN_STATUS_SUCCESS, "cuDNN attention {}: cudnnSetStream: {}", what,
              fe::detail::get_error_string(status));
  std::string failure;
  try {
    fe::error_t result = plan.graph->execute(h.handle, pack, workspace.data());
    if (result.is_bad()) failure = result.get_message();
  } catch (const std::exception& e) {  // the frontend's own (a CUDA runtime it cannot load)
    failure = e.what();
  }
  EMBER_CHECK(failure.empty(), "cuDNN attention {}: {}", what, failure);
}

char* element(const void* base, int64_t elements, const Case& c) {
  return static_cast<char*>(const_cast<void*>(base)) +
         elements * static_cast<int64_t>(dtype_size(c.dtype));
}

}  // namespace

std::string unavailable() {
  return library().error;
}

std::string unsupported(Stream& stream, const Case& c, bool backward) {
  if (!library().error.empty()) return library().error;
  if (c.dtype != DType::bf16 && c.dtype != DType::f16) {
    return fmt::format("cuDNN's fused attention takes f16 or bf16, not {}", dtype_name(c.dtype));
  }
  Handle& h = handle_for(stream);
  if (!h.error.empty()) return h.error;
  const Plan& plan = plan_for(stream, h, c, backward);
  return plan.error.empty()
             ? std::string()
             : fmt::format("cuDNN {} does not run this case: {}", library().version, plan.error);
}

void forward(Stream& stream, const Case& c, const void* qkv, void* out, float* lse) {
  const std::string why = unsupported(stream, c, false);
  EMBER_CHECK(why.empty(), "cuDNN attention forward: {}", why);
  Handle& h = handle_for(stream);
  const int64_t width = c.heads * c.dim;
  std::unordered_map<int64_t, void*> pack{{kQ, element(qkv, 0, c)},
                                          {kK, element(qkv, width, c)},
                                          {kV, element(qkv, 2 * width, c)},
                                          {kO, out},
                                          {kStats, lse}};
  execute(stream, h, plan_for(stream, h, c, false), pack, "forward");
}

void backward(Stream& stream, const Case& c, const void* qkv, const void* out, const float* lse,
              const void* dout, void* dqkv) {
  const std::string why = unsupported(stream, c, true);
  EMBER_CHECK(why.empty(), "cuDNN attention backward: {}", why);
  Handle& h = handle_for(stream);
  const int64_t width = c.heads * c.dim;
  std::unordered_map<int64_t, void*> pack{
      {kQ, element(qkv, 0, c)},          {kK, element(qkv, width, c)},
      {kV, element(qkv, 2 * width, c)},  {kO, const_cast<void*>(out)},
      {kStats, const_cast<float*>(lse)}, {kDout, const_cast<void*>(dout)},
      {kDq, element(dqkv, 0, c)},        {kDk, element(dqkv, width, c)},
      {kDv, element(dqkv, 2 * width, c)}};
  execute(stream, h, plan_for(stream, h, c, true), pack, "backward");
}

#endif

}  // namespace ember::ops::cudnn_attention
