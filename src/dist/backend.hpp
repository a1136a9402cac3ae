// Internal: what a communicator's engine (MPI, NCCL, a single process) provides.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ember/dist/communicator.hpp"

namespace ember::dist::detail {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::shared_ptr<PendingWork> all_reduce(Stream& stream, const Tensor& t, ReduceOp op,
                                                  std::string what) = 0;
  virtual std::shared_ptr<PendingWork> broadcast(Stream& stream, const Tensor& t, int root,
                                                 std::string what) = 0;
  virtual std::shared_ptr<PendingWork> all_gather(Stream& stream, const Tensor& out,
                                                  const Tensor& in, std::string what) = 0;
  virtual std::shared_ptr<PendingWork> reduce_scatter(Stream& stream, const Tensor& out,
                                                      const Tensor& in, ReduceOp op,
                                                      std::string what) = 0;
  virtual void barrier() = 0;
  // Host-side exchanges (blocking, with the timeout): every rank's `mine` (one length on every
  // rank) in rank order; root's bytes to every rank.
  virtual std::vector<int64_t> host_all_gather(const std::vector<int64_t>& mine,
                                               const std::string& what) = 0;
  virtual void host_broadcast(void* bytes, size_t n, int root, const std::string& what) = 0;
  // The error that broke this engine ("" while it works): its communicator then refuses all.
  virtual std::string failure() const { return ""; }
};

// The first error that broke a communicator: later calls repeat it.
class Broken {
 public:
  void set(const std::string& message) {
    if (message_.empty()) message_ = message;
  }
  bool is() const { return !message_.empty(); }
  void check(const std::string& what) const;  // throws when broken
  const std::string& message() const { return message_; }

 private:
  std::string message_;
};

// "dist: <what> timed out after <s> s on rank r of w: ..." (a deadline passed).
[[noreturn]] void throw_timeout(const std::string& what, int rank, int world, double seconds,
                                const std::string& engine_note);

void backoff(int iteration);  // spins, then yields, then sleeps up to 1 ms

// Polls `done` until it is true or `seconds` pass (then returns false), backing off from spinning
// to short sleeps so that waiting ranks leave the cores to ranks still computing.
template <class Done>
bool poll_until(Done done, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (int i = 0;; ++i) {
    if (done()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    backoff(i);
  }
}

std::unique_ptr<Backend> make_local_backend();
std::unique_ptr<Backend> make_mpi_backend(const Launch& launch, double timeout);
// The NCCL communicator of cuda:<local rank>; its unique id travels over `host` (MPI) or, with
// none, the TCP rendezvous of the env launch.
std::unique_ptr<Backend> make_nccl_backend(const Launch& launch, double timeout, Backend* host);
// torchrun-style launches: rank 0's `n` bytes to every rank over TCP at MASTER_ADDR:MASTER_PORT
// (rank 0 listens), within `timeout` seconds.
void tcp_rendezvous_broadcast(const Launch& launch, void* data, size_t n, double timeout);
bool built_with_mpi();
bool built_with_nccl();

// "f32[1024] on cpu"
std::string describe(const Tensor& t);
// In-place all_gather / reduce_scatter: `part` is exactly rank's chunk of `whole`.
bool is_rank_chunk(const Tensor& whole, const Tensor& part, int rank);
// Any other overlap of `part` with `whole` is an Error.
void check_in_place(const Tensor& whole, const Tensor& part, int rank, const char* what);

}  // namespace ember::dist::detail
