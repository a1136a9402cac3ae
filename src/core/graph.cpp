// ember::Graph (ember/core/graph.hpp).
#include "ember/core/graph.hpp"

#include <atomic>
#include <map>
#include <mutex>
#include <utility>

#include "ember/core/allocator.hpp"
#include "ember/core/error.hpp"

#if EMBER_WITH_CUDA
#include <cuda_runtime.h>

#include "ember/core/check_cuda.hpp"
#endif

namespace ember {
namespace {

// Graphs per (device, pool): the pool is released with its last graph.
struct PoolUsers {
  std::mutex mutex;
  std::map<std::pair<int, uint64_t>, int> count;
};
PoolUsers& pool_users() {
  static PoolUsers users;
  return users;
}

uint64_t new_pool() {
  static std::atomic<uint64_t> next{1};
  return next++;
}

// The captures running now, by stream: each capture's serial number (1, 2, ...).
struct RunningCaptures {
  std::mutex mutex;
  std::map<StreamId, uint64_t> serial;
  uint64_t next = 1;
};
RunningCaptures& running_captures() {
  static RunningCaptures captures;
  return captures;
}

}  // namespace

uint64_t Graph::capture_serial(const Stream& stream) {
  RunningCaptures& c = running_captures();
  std::lock_guard lock(c.mutex);
  const auto it = c.serial.find(stream.id());
  return it == c.serial.end() ? 0 : it->second;
}

struct Graph::Impl {
  Device device;
  uint64_t pool = 0;
  size_t nodes = 0;
#if EMBER_WITH_CUDA
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  cudaEvent_t replayed = nullptr;  // recorded after each replay: the destructor waits for it
#endif

  ~Impl() {
#if EMBER_WITH_CUDA
    if (replayed != nullptr) {
      cudaEventSynchronize(replayed);  // the pool's memory is free once the replays are done
      cudaEventDestroy(replayed);
    }
    if (exec != nullptr) cudaGraphExecDestroy(exec);
    if (graph != nullptr) cudaGraphDestroy(graph);
#endif
    if (pool == 0) return;
    bool last = false;
    {
      PoolUsers& users = pool_users();
      std::lock_guard lock(users.mutex);
      auto it = users.count.find({device.index(), pool});
      if (it != users.count.end() && --it->second == 0) {
        users.count.erase(it);
        last = true;
      }
    }
    if (last) allocator_for(device)->release_pool(pool);
  }
};

Graph::Graph(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Graph::Graph(Graph&&) noexcept = default;
Graph& Graph::operator=(Graph&&) noexcept = default;
Graph::~Graph() = default;

uint64_t Graph::pool() const {
  EMBER_CHECK(impl_ != nullptr, "Graph::pool: the graph was moved from");
  return impl_->pool;
}

size_t Graph::nodes() const {
  EMBER_CHECK(impl_ != nullptr, "Graph::nodes: the graph was moved from");
  return impl_->nodes;
}

#if EMBER_WITH_CUDA

Graph Graph::capture(Stream& stream, const std::function<void()>& record, Options options) {
  EMBER_CHECK(stream.device().is_cuda(),
              "Graph::capture: CUDA graphs capture a CUDA stream, not one of {}; on the CPU run "
              "the work directly",
              stream.device().to_string());
  EMBER_CHECK(!stream.capturing(), "Graph::capture: the stream is capturing already");
  auto impl = std::make_unique<Impl>();
  impl->device = stream.device();
  impl->pool = options.pool != 0 ? options.pool : new_pool();
  {
    PoolUsers& users = pool_users();
    std::lock_guard lock(users.mutex);
    const std::pair<int, uint64_t> key{impl->device.index(), impl->pool};
    if (options.pool != 0 && !users.count.contains(key)) {
      impl->pool = 0;  // not ours to release
      EMBER_THROW(
          "Graph::capture: pool {} belongs to no live graph on {}; share the pool() of a graph "
          "that is still alive",
          options.pool, impl->device.to_string());
    }
    ++users.count[key];  // from here on, the Impl's destructor releases the pool with its last
  }
  const std::shared_ptr<Allocator> allocator = allocator_for(stream.device());
  const auto native = static_cast<cudaStream_t>(stream.native());
  allocator->begin_capture(stream.id(), impl->pool);
  // Thread-local mode: other threads (a loader's workers, a training state writer) may go on
  // synchronizing and allocating; this thread may not.
  if (const cudaError_t e = cudaStreamBeginCapture(native, cudaStreamCaptureModeThreadLocal);
      e != cudaSuccess) {
    allocator->end_capture(stream.id());
    EMBER_THROW("Graph::capture: cudaStreamBeginCapture failed: {} ({})", cudaGetErrorName(e),
                cudaGetErrorString(e));
  }
  {
    RunningCaptures& c = running_captures();
    std::lock_guard lock(c.mutex);
    c.serial[stream.id()] = c.next++;
  }
  // Ends the capture whatever happens; the graph when CUDA made one.
  auto end = [&] {
    cudaGraph_t graph = nullptr;
    const cudaError_t e = cudaStreamEndCapture(native, &graph);
    allocator->end_capture(stream.id());
    RunningCaptures& c = running_captures();
    std::lock_guard lock(c.mutex);
    c.serial.erase(stream.id());
    return std::pair{e, graph};
  };
  try {
    record();
  } catch (...) {
    const auto [e, graph] = end();
    if (graph != nullptr) cudaGraphDestroy(graph);
    cudaGetLastError();  // the capture's error, reported by the exception below
    throw;
  }
  const auto [e, graph] = end();
  if (e != cudaSuccess) {
    if (graph != nullptr) cudaGraphDestroy(graph);
    EMBER_THROW(
        "Graph::capture: CUDA abandoned the capture: {} ({}); a call during it was not "
        "capturable (a host wait or query, a wait for another stream's work, a copy from or into "
        "pageable host memory)",
        cudaGetErrorName(e), cudaGetErrorString(e));
  }
  impl->graph = graph;
  EMBER_CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &impl->nodes));
  EMBER_CUDA_CHECK(cudaGraphInstantiate(&impl->exec, graph, 0));
  EMBER_CUDA_CHECK(cudaEventCreateWithFlags(&impl->replayed, cudaEventDisableTiming));
  return Graph(std::move(impl));
}

void Graph::replay(Stream& stream) {
  EMBER_CHECK(impl_ != nullptr, "Graph::replay: the graph was moved from");
  EMBER_CHECK(stream.device() == impl_->device,
              "Graph::replay: the graph was captured on {}, not {}", impl_->device.to_string(),
              stream.device().to_string());
  const auto native = static_cast<cudaStream_t>(stream.native());
  EMBER_CUDA_CHECK(cudaGraphLaunch(impl_->exec, native));
  EMBER_CUDA_CHECK(cudaEventRecord(impl_->replayed, native));
}

#else

Graph Graph::capture(Stream& stream, const std::function<void()>&, Options) {
  EMBER_THROW(
      "Graph::capture: CUDA graphs capture a CUDA stream, not one of {} (a build without CUDA); "
      "run the work directly",
      stream.device().to_string());
}

void Graph::replay(Stream&) {
  EMBER_THROW("Graph::replay: a build without CUDA has no graphs");
}

#endif

}  // namespace ember
