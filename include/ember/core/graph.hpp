// ember::Graph: a stream's work captured once as a CUDA graph and replayed as one launch.
//
//   Graph step = Graph::capture(stream, [&] { run_step(); });  // records, runs nothing
//   for (...) { refill_inputs(); step.replay(stream); }
//
// While `record` runs, the stream captures (thread-local mode): kernels, copies between device
// buffers, library calls (cuBLASLt, NCCL) join the graph. Tensors made on the stream meanwhile
// come from the graph's memory pool (Allocator::begin_capture) and keep their memory for every
// replay: a replay writes the same addresses, so outputs made during the capture (a loss) hold
// the latest replay's values. A host wait cannot be captured: Stream::synchronize, item(),
// to_vector and copies to or from host memory inside `record` are an Error naming the call, and
// the capture is abandoned (nothing is kept). Inputs a replay should read anew go into tensors
// made before the capture, refilled between replays (copy_ into them outside the graph).
//
// Graphs of one stream may share a pool (Options::pool = other.pool()) when they never run at
// the same time: their temporaries then take the same memory. The pool is released when its last
// graph is destroyed, after that graph's replays have finished (the destructor waits for them).
// On the CPU there is nothing to capture: capture() is an Error (run the step directly).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "ember/core/stream.hpp"

namespace ember {

class Graph {
 public:
  struct Options {
    uint64_t pool = 0;  // 0: a new pool; else another graph's pool() (same stream)
  };
  static Graph capture(Stream& stream, const std::function<void()>& record, Options options);
  static Graph capture(Stream& stream, const std::function<void()>& record) {
    return capture(stream, record, Options{});
  }
  // The serial number of the capture running on `stream` (1, 2, ... over the process), 0 when
  // none is: state kept across steps (a weight's 16-bit copy) tells a copy made in this capture,
  // which its replays rewrite, from one made outside it, which they would only read.
  static uint64_t capture_serial(const Stream& stream);

  Graph(Graph&&) noexcept;
  Graph& operator=(Graph&&) noexcept;
  ~Graph();

  // Queues the graph's work on `stream` (the capture's stream or another of its device): one
  // launch, no host wait.
  void replay(Stream& stream);
  uint64_t pool() const;
  size_t nodes() const;  // the work items (kernels, copies, library calls) it holds

  struct Impl;

 private:
  explicit Graph(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ember
