// The MPI engine: CPU tensors, with MPI's non-blocking collectives on a duplicate of
// MPI_COMM_WORLD, polled with the communicator's timeout.
#include "dist/backend.hpp"

#include <cstdio>
#include <cstdlib>

#if EMBER_WITH_MPI
#include <mpi.h>

#include <atomic>
#include <functional>
#include <limits>

#include <cstdlib>
#include <mutex>

#include "ember/core/check_mpi.hpp"
#endif

namespace ember::dist::detail {

bool built_with_mpi() {
  return EMBER_WITH_MPI != 0;
}

}  // namespace ember::dist::detail

namespace ember::dist {

void abort_job(int exit_code) {
  std::fflush(stdout);
  std::fflush(stderr);
#if EMBER_WITH_MPI
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, exit_code);
#endif
  std::_Exit(exit_code);
}

}  // namespace ember::dist

namespace ember::dist::detail {

#if !EMBER_WITH_MPI
std::unique_ptr<Backend> make_mpi_backend(const Launch& launch, double) {
  EMBER_THROW(
      "dist: rank {} of {} ({} launch) needs MPI for CPU collectives, but this ember was built "
      "without it (install libopenmpi-dev and rebuild)",
      launch.rank, launch.world_size, launch.launcher);
}
#else
namespace {

// MPI is initialized once per process (MPI_THREAD_MULTIPLE: the emulator's NCCL shim calls MPI
// from its stream worker) and finalized at exit, unless a collective failed: then a peer may
// never join MPI_Finalize, and the process exits without it.
std::mutex mpi_mutex;
bool ember_initialized_mpi = false;
std::atomic<bool> any_failure{false};

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && !any_failure.load()) MPI_Finalize();
}

void ensure_mpi(const Launch& launch) {
  std::lock_guard lock(mpi_mutex);
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    EMBER_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided));
    ember_initialized_mpi = true;
    std::atexit(finalize_at_exit);
  }
  int provided = 0;
  MPI_Query_thread(&provided);
  EMBER_CHECK(provided >= MPI_THREAD_SERIALIZED,
              "dist: MPI was initialized with thread level {} by the program; ember needs at "
              "least MPI_THREAD_SERIALIZED (MPI_THREAD_MULTIPLE for emulated NCCL)",
              provided);
  int size = 0;
  int rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  EMBER_CHECK(size == launch.world_size && rank == launch.rank,
              "dist: the {} launch says rank {} of {}, but MPI says rank {} of {} (was the program "
              "started by that launcher? under srun, Open MPI needs --mpi=pmix)",
              launch.launcher, launch.rank, launch.world_size, rank, size);
}

MPI_Datatype mpi_type(DType dtype, const std::string& what) {
  switch (dtype) {
    case DType::f32:
      return MPI_FLOAT;
    case DType::i32:
      return MPI_INT32_T;
    case DType::i64:
      return MPI_INT64_T;
    case DType::u8:
      return MPI_UINT8_T;
    default:
      EMBER_THROW(
          "dist: {}: MPI reductions take f32, i32, i64 or u8 tensors, not {} (reduce in "
          "f32: DDP's gradient buckets are f32)",
          what, dtype_name(dtype));
  }
}

MPI_Op mpi_op(ReduceOp op) {
  return op == ReduceOp::max ? MPI_MAX : MPI_SUM;
}

class MpiBackend;

class MpiWork final : public PendingWork {
 public:
  MpiWork(MpiBackend& backend, std::string what, std::vector<Tensor> keep,
          std::function<void()> finish)
      : backend_(backend),
        what_(std::move(what)),
        keep_(std::move(keep)),
        finish_(std::move(finish)) {}
  MPI_Request* request() { return &request_; }
  bool test() override;
  void wait() override;
  std::string describe() const override { return what_; }

 private:
  MpiBackend& backend_;
  std::string what_;
  std::vector<Tensor> keep_;      // alive until done
  std::function<void()> finish_;  // after completion (avg: the division)
  MPI_Request request_ = MPI_REQUEST_NULL;
  bool done_ = false;
};

class MpiBackend final : public Backend {
 public:
  MpiBackend(const Launch& launch, double timeout) : launch_(launch), timeout_(timeout) {
    ensure_mpi(launch);
    EMBER_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm_));
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  }
  ~MpiBackend() override {
    // A communicator with abandoned requests cannot be freed collectively.
    if (!broken_.is()) MPI_Comm_free(&comm_);
  }

  std::shared_ptr<PendingWork> all_reduce(Stream&, const Tensor& t, ReduceOp op,
                                          std::string what) override {
    const MPI_Datatype type = mpi_type(t.dtype(), what);
    std::function<void()> finish;
    if (op == ReduceOp::avg) {
      EMBER_CHECK(t.dtype() == DType::f32, "dist: {}: avg needs a float tensor", what);
      finish = [t, w = launch_.world_size] {
        float* x = t.data<float>();
        const float n = static_cast<float>(w);
        for (int64_t i = 0; i < t.numel(); ++i) x[i] /= n;
        mark_written(t);
      };
    } else {
      finish = [t] { mark_written(t); };
    }
    auto work = start(what, {t}, std::move(finish));
    post(*work, MPI_Iallreduce(MPI_IN_PLACE, t.data(), count(t, what), type, mpi_op(op), comm_,
                               work->request()));
    return work;
  }

  std::shared_ptr<PendingWork> broadcast(Stream&, const Tensor& t, int root,
                                         std::string what) override {
    auto work = start(what, {t}, [t] { mark_written(t); });
    post(*work, MPI_Ibcast(t.data(), bytes(t, what), MPI_BYTE, root, comm_, work->request()));
    return work;
  }

  std::shared_ptr<PendingWork> all_gather(Stream&, const Tensor& out, const Tensor& in,
                                          std::string what) override {
    auto work = start(what, {out, in}, [out] { mark_written(out); });
    post(*work, MPI_Iallgather(in.data(), bytes(in, what), MPI_BYTE, out.data(), bytes(in, what),
                               MPI_BYTE, comm_, work->request()));
    return work;
  }

  std::shared_ptr<PendingWork> reduce_scatter(Stream&, const Tensor& out, const Tensor& in,
                                              ReduceOp op, std::string what) override {
    const MPI_Datatype type = mpi_type(in.dtype(), what);
    std::function<void()> finish = [out] { mark_written(out); };
    if (op == ReduceOp::avg) {
      EMBER_CHECK(out.dtype() == DType::f32, "dist: {}: avg needs a float tensor", what);
      finish = [out, w = launch_.world_size] {
        float* x = out.data<float>();
        for (int64_t i = 0; i < out.numel(); ++i) x[i] /= static_cast<float>(w);
        mark_written(out);
      };
    }
    auto work = start(what, {out, in}, std::move(finish));
    post(*work, MPI_Ireduce_scatter_block(in.data(), out.data(), count(out, what), type, mpi_op(op),
                                          comm_, work->request()));
    return work;
  }

  void barrier() override {
    auto work = start("barrier", {}, nullptr);
    post(*work, MPI_Ibarrier(comm_, work->request()));
    work->wait();
  }

  std::vector<int64_t> host_all_gather(const std::vector<int64_t>& mine,
                                       const std::string& what) override {
    std::vector<int64_t> all(mine.size() * static_cast<size_t>(launch_.world_size));
    auto work = start(what, {}, nullptr);
    post(*work, MPI_Iallgather(mine.data(), static_cast<int>(mine.size()), MPI_INT64_T, all.data(),
                               static_cast<int>(mine.size()), MPI_INT64_T, comm_, work->request()));
    work->wait();
    return all;
  }

  void host_broadcast(void* data, size_t n, int root, const std::string& what) override {
    auto work = start(what, {}, nullptr);
    post(*work, MPI_Ibcast(data, static_cast<int>(n), MPI_BYTE, root, comm_, work->request()));
    work->wait();
  }

  // Called by MpiWork.
  bool poll(MPI_Request* request, const std::string& what) {
    std::lock_guard lock(mutex_);
    int done = 0;
    const int rc = MPI_Test(request, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS)
      fail(fmt::format("dist: {} failed on rank {} of {}: MPI error: {}", what, launch_.rank,
                       launch_.world_size, ::ember::detail::mpi_error_string(rc)));
    return done != 0;
  }
  [[noreturn]] void time_out(const std::string& what) {
    broken_.set(fmt::format("dist: {} timed out after {} s on rank {} of {}", what, timeout_,
                            launch_.rank, launch_.world_size));
    any_failure = true;
    throw_timeout(what, launch_.rank, launch_.world_size, timeout_,
                  "(MPI: under mpirun a rank that exits makes mpirun end the job at once; the "
                  "survivors see this only when mpirun lets them run on, e.g. "
                  "--mca orte_abort_on_non_zero_status 0)");
  }
  [[noreturn]] void fail(const std::string& message) {
    broken_.set(message);
    any_failure = true;
    EMBER_THROW("{}", message);
  }
  double timeout() const { return timeout_; }

 private:
  std::shared_ptr<MpiWork> start(const std::string& what, std::vector<Tensor> keep,
                                 std::function<void()> finish) {
    broken_.check(what);
    return std::make_shared<MpiWork>(*this, what, std::move(keep), std::move(finish));
  }
  void post(MpiWork& work, int rc) {
    if (rc != MPI_SUCCESS) {
      fail(fmt::format("dist: {} failed to start on rank {} of {}: MPI error: {}", work.describe(),
                       launch_.rank, launch_.world_size, ::ember::detail::mpi_error_string(rc)));
    }
  }
  int count(const Tensor& t, const std::string& what) const {
    EMBER_CHECK(t.numel() <= std::numeric_limits<int>::max(),
                "dist: {}: {} elements exceed MPI's int count; split the tensor", what, t.numel());
    return static_cast<int>(t.numel());
  }
  int bytes(const Tensor& t, const std::string& what) const {
    EMBER_CHECK(t.nbytes() <= static_cast<size_t>(std::numeric_limits<int>::max()),
                "dist: {}: {} bytes exceed MPI's int count; split the tensor", what, t.nbytes());
    return static_cast<int>(t.nbytes());
  }

  Launch launch_;
  double timeout_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  Broken broken_;
  std::mutex mutex_;  // MPI calls on comm_'s requests, one at a time
};

bool MpiWork::test() {
  if (done_) return true;
  if (!backend_.poll(&request_, what_)) return false;
  done_ = true;
  if (finish_) finish_();
  keep_.clear();
  return true;
}

void MpiWork::wait() {
  if (!poll_until([&] { return test(); }, backend_.timeout())) backend_.time_out(what_);
}

}  // namespace

std::unique_ptr<Backend> make_mpi_backend(const Launch& launch, double timeout) {
  return std::make_unique<MpiBackend>(launch, timeout);
}
#endif

}  // namespace ember::dist::detail
