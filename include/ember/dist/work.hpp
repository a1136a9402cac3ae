// Work: the handle an asynchronous collective returns.
//
// On the CPU (MPI) a collective runs in the background of MPI's progress engine; wait() blocks
// the host until it is done. On CUDA (NCCL) it runs on the communicator's stream, ordered after
// the work queued on the calling stream; wait(stream) orders `stream` after it on the device
// without blocking the host, and wait() blocks the host. Every wait has the communicator's
// timeout: past it, the collective is abandoned (MPI) or its communicator aborted (NCCL, as
// NCCL documents: ncclCommAbort), and the wait throws an ember::Error naming the collective,
// the rank and the seconds. After such an error the communicator refuses further collectives.
#pragma once

#include <memory>
#include <string>

#include "ember/core/stream.hpp"

namespace ember::dist {

namespace detail {
// What a backend's pending collective does; Work shares it.
class PendingWork {
 public:
  virtual ~PendingWork() = default;
  virtual bool test() = 0;  // true once done; throws the collective's failure
  virtual void wait() = 0;  // blocks the host until done, or throws (timeout, failure)
  virtual void wait(const Stream& stream) { (void)stream, wait(); }
  virtual std::string describe() const = 0;  // "all_reduce(sum, f32[1024] on cpu)"
};
}  // namespace detail

class Work {
 public:
  Work() = default;  // nothing to wait for
  explicit Work(std::shared_ptr<detail::PendingWork> pending) : pending_(std::move(pending)) {}

  // True when the collective has finished (never blocks).
  bool done() const { return !pending_ || pending_->test(); }
  // Blocks the host until the collective has finished.
  void wait() const {
    if (pending_) pending_->wait();
  }
  // Work queued on `stream` from now on runs after the collective (a CUDA collective: on the
  // device, the host does not wait; a CPU one: waits).
  void wait(const Stream& stream) const {
    if (pending_) pending_->wait(stream);
  }
  const std::shared_ptr<detail::PendingWork>& pending() const { return pending_; }

 private:
  std::shared_ptr<detail::PendingWork> pending_;
};

}  // namespace ember::dist
