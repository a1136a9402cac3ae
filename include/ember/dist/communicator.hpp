// Communicator: collectives among the ranks of a launch (ember/dist/launch.hpp).
//
//   dist::Communicator comm = dist::init();           // mpirun, srun or torchrun-style variables
//   Work w = comm.all_reduce(stream, grads, dist::ReduceOp::avg);
//   w.wait(stream);                                    // or w.wait() on the host
//
// Every collective is asynchronous and returns a Work (ember/dist/work.hpp). Which engine runs
// it follows the tensor's device: MPI for CPU tensors (blocking collectives on a communication
// thread, in call order), NCCL for CUDA tensors (on a communication stream ordered with the
// calling stream by events; the GPU is cuda:<local rank>). A single process without a launcher
// needs neither. Collectives must be called in the same order with matching tensors on every
// rank, as in MPI and NCCL; with CommOptions::check_metadata each call first compares every
// rank's (collective, dtype, elements, root) and a mismatch is an Error listing them, instead
// of corrupted results.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ember/core/device.hpp"
#include "ember/core/stream.hpp"
#include "ember/core/tensor.hpp"
#include "ember/dist/launch.hpp"
#include "ember/dist/work.hpp"

namespace ember::dist {

enum class ReduceOp { sum, avg, max };
const char* reduce_op_name(ReduceOp op);

struct CommOptions {
  // How long any wait lasts before it is an Error (the collective, the rank, the seconds): from
  // 0.001 to 1e8 s. Default 600 s, or EMBER_DIST_TIMEOUT (decimal seconds) when set.
  double timeout_seconds = 0;  // 0: the default
  // Compare (collective, dtype, elements, root) across ranks before each collective: one small
  // blocking host collective each. 0: off; 1: every collective; 2: every collective but those
  // agreed across ranks beforehand (AgreedCollectives: DDP's buckets, whose layout DDP compares
  // once at construction). -1, the default: EMBER_DIST_CHECK (0, 1 or 2) when set, else 2 in a
  // build without NDEBUG and 0 with it.
  int check_metadata = -1;
};

// The GPU a rank drives: cuda:0 when the process sees one GPU (CUDA_VISIBLE_DEVICES per rank, as
// Slurm's --gpus-per-task sets it), else cuda:<local rank>. An Error when that GPU does not exist.
Device rank_device(const Launch& launch);

namespace detail {
class Backend;
}

class Communicator {
 public:
  // The ranks of `launch` (every rank constructs one, in the same order).
  explicit Communicator(const Launch& launch, CommOptions options = {});
  virtual ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return launch_.rank; }
  int world_size() const { return launch_.world_size; }
  int local_rank() const { return launch_.local_rank; }
  const Launch& launch() const { return launch_; }
  double timeout_seconds() const { return timeout_; }
  bool checks_metadata() const { return check_metadata_ != 0; }
  int check_metadata_mode() const { return check_metadata_; }  // 0, 1 or 2 (CommOptions)

  // While one lives, the collectives this thread issues on `comm` count as agreed across ranks
  // beforehand: check_metadata 2 (the debug default) skips their check, 1 still checks them.
  class AgreedCollectives {
   public:
    explicit AgreedCollectives(const Communicator& comm);
    ~AgreedCollectives();
    AgreedCollectives(const AgreedCollectives&) = delete;
    AgreedCollectives& operator=(const AgreedCollectives&) = delete;

   private:
    const Communicator* previous_;
  };

  // In place: every rank's `tensor` becomes the sum (average, maximum) over ranks. CUDA (NCCL):
  // f32, f16, bf16, i32, i64, u8; CPU (MPI): f32, i32, i64, u8. avg: float types only.
  virtual Work all_reduce(Stream& stream, const Tensor& tensor, ReduceOp op = ReduceOp::sum);
  // In place: every rank's `tensor` becomes rank `root`'s.
  virtual Work broadcast(Stream& stream, const Tensor& tensor, int root);
  // `out` (world_size x in.numel() elements) gets every rank's `in`, in rank order.
  virtual Work all_gather(Stream& stream, const Tensor& out, const Tensor& in);
  // `in` (world_size x out.numel() elements) is reduced over ranks; rank r keeps chunk r.
  virtual Work reduce_scatter(Stream& stream, const Tensor& out, const Tensor& in,
                              ReduceOp op = ReduceOp::sum);
  // Returns when every rank has called it (within the timeout).
  virtual void barrier();
  // Every rank's `mine` (the same length on every rank), in rank order, on the host; blocks
  // (with the timeout). For small agreements: which saved state to resume, whether to stop.
  std::vector<int64_t> host_all_gather(const std::vector<int64_t>& mine);

  // Collectives issued through this communicator (barriers and metadata checks excluded).
  uint64_t collectives() const { return collectives_.load(); }
  // Metadata checks run (each a small blocking host collective).
  uint64_t metadata_checks() const { return metadata_checks_.load(); }

 private:
  detail::Backend& backend_for(const Tensor& t, const char* what);
  void refuse_if_failed(const char* what) const;
  void check(const char* what, const Tensor& t, int64_t elements, int root, ReduceOp op);

  Launch launch_;
  double timeout_;
  int check_metadata_;                      // 0, 1 or 2
  std::unique_ptr<detail::Backend> mpi_;    // CPU tensors (world > 1) and host-side checks
  std::unique_ptr<detail::Backend> nccl_;   // CUDA tensors, made at the first one
  std::unique_ptr<detail::Backend> local_;  // a single process
  std::atomic<uint64_t> collectives_{0};
  std::atomic<uint64_t> metadata_checks_{0};
};

// A Communicator over every rank of this launch (detect_launch()).
std::unique_ptr<Communicator> init(CommOptions options = {});

// Ends the whole job at once (MPI_Abort under MPI; else exit): what a rank does after a
// collective failed, since the others may be waiting for it.
[[noreturn]] void abort_job(int exit_code);

}  // namespace ember::dist
