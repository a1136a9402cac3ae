// The MPI engine: CPU tensors, reduced by MPI's blocking collectives on a duplicate of
// MPI_COMM_WORLD, run in call order on a communication thread; waits have the communicator's
// timeout.
#include "dist/backend.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#if EMBER_WITH_MPI
#include <mpi.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <limits>
#include <thread>

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
  EMBER_CHECK(provided >= MPI_THREAD_MULTIPLE,
              "dist: MPI provides thread level {}, but ember needs MPI_THREAD_MULTIPLE (its "
              "collectives run on a communication thread); initialize MPI with MPI_Init_thread("
              "..., MPI_THREAD_MULTIPLE, ...) or let ember do it",
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

// One collective's outcome, shared by its Work handles and the communication thread.
struct WorkState {
  std::mutex mutex;
  std::condition_variable finished;
  std::atomic<bool> done_flag{false};  // done, readable without the lock (for spinning)
  bool done = false;
  int rc = MPI_SUCCESS;
  std::string what;
};

// What the works need of their communicator, alive as long as any of them.
struct Shared {
  Launch launch;
  double timeout = 0;
  std::mutex mutex;
  Broken broken;

  void check(const std::string& what) {
    std::lock_guard lock(mutex);
    broken.check(what);
  }
  [[noreturn]] void fail(const std::string& message) {
    {
      std::lock_guard lock(mutex);
      broken.set(message);
    }
    any_failure = true;
    EMBER_THROW("{}", message);
  }
  // `waited`: the seconds the wait really took (the deadline counts from its start, but a loaded
  // machine may wake the waiter later than that).
  [[noreturn]] void time_out(const std::string& what, double waited) {
    {
      std::lock_guard lock(mutex);
      broken.set(fmt::format("dist: {} timed out after {:.1f} s on rank {} of {}", what, waited,
                             launch.rank, launch.world_size));
    }
    any_failure = true;
    throw_timeout(what, launch.rank, launch.world_size, waited,
                  "(MPI: under mpirun a rank that exits makes mpirun end the job at once; the "
                  "survivors see this only when mpirun lets them run on, e.g. "
                  "--mca orte_abort_on_non_zero_status 0)");
  }
};

class MpiWork final : public PendingWork {
 public:
  MpiWork(std::shared_ptr<WorkState> state, std::shared_ptr<Shared> shared)
      : state_(std::move(state)), shared_(std::move(shared)) {}
  bool test() override {
    {
      std::lock_guard lock(state_->mutex);
      if (state_->done) {
        report(state_->rc);
        return true;
      }
    }
    shared_->check(state_->what);
    return false;
  }
  void wait() override {
    shared_->check(state_->what);
    // The deadline counts from here, whatever the polling below costs on a loaded machine.
    const auto start = std::chrono::steady_clock::now();
    const auto deadline = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                      std::chrono::duration<double>(shared_->timeout));
    // A small collective is done within microseconds: poll briefly (yielding the core to the
    // communication thread) before sleeping on the condition variable.
    for (int i = 0; i < 2000 && !state_->done_flag.load(std::memory_order_acquire) &&
                    std::chrono::steady_clock::now() < deadline;
         ++i) {
      std::this_thread::yield();
    }
    std::unique_lock lock(state_->mutex);
    if (!state_->finished.wait_until(lock, deadline, [&] { return state_->done; })) {
      lock.unlock();
      shared_->time_out(
          state_->what,
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    report(state_->rc);
  }
  std::string describe() const override { return state_->what; }

 private:
  void report(int rc) {
    if (rc != MPI_SUCCESS) {
      shared_->fail(fmt::format("dist: {} failed on rank {} of {}: MPI error: {}", state_->what,
                                shared_->launch.rank, shared_->launch.world_size,
                                ::ember::detail::mpi_error_string(rc)));
    }
  }
  std::shared_ptr<WorkState> state_;
  std::shared_ptr<Shared> shared_;
};

// The MPI engine. Collectives run in call order on a communication thread, as MPI's blocking
// collectives (OpenMPI's tuned algorithms, several times faster than its non-blocking ones here),
// while the calling thread goes on: backward computes while buckets are reduced. Waits have the
// timeout; a collective stuck on a lost peer is abandoned with its thread.
class MpiBackend final : public Backend {
 public:
  MpiBackend(const Launch& launch, double timeout) : shared_(std::make_shared<Shared>()) {
    shared_->launch = launch;
    shared_->timeout = timeout;
    ensure_mpi(launch);
    EMBER_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm_));
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    thread_ = std::thread([this] { serve(); });
  }
  ~MpiBackend() override {
    {
      std::lock_guard lock(queue_mutex_);
      stopping_ = true;
      has_work_.store(true, std::memory_order_release);
    }
    queue_changed_.notify_all();
    bool broken = false;
    {
      std::lock_guard lock(shared_->mutex);
      broken = shared_->broken.is();
    }
    if (broken) {
      thread_.detach();  // it may be stuck in a collective that will never complete
      return;
    }
    thread_.join();  // after every queued collective: works outliving us have finished
    MPI_Comm_free(&comm_);
  }

  std::shared_ptr<PendingWork> all_reduce(Stream&, const Tensor& t, ReduceOp op,
                                          std::string what) override {
    const MPI_Datatype type = mpi_type(t.dtype(), what);
    const int n = count(t, what);
    const int ranks = shared_->launch.world_size;
    return post(
        std::move(what),
        [=, this] {
          const int rc = MPI_Allreduce(MPI_IN_PLACE, t.data(), n, type, mpi_op(op), comm_);
          if (rc == MPI_SUCCESS && op == ReduceOp::avg) divide(t, ranks);
          return rc;
        },
        t);
  }

  std::shared_ptr<PendingWork> broadcast(Stream&, const Tensor& t, int root,
                                         std::string what) override {
    const int n = bytes(t, what);
    return post(
        std::move(what), [=, this] { return MPI_Bcast(t.data(), n, MPI_BYTE, root, comm_); }, t);
  }

  std::shared_ptr<PendingWork> all_gather(Stream&, const Tensor& out, const Tensor& in,
                                          std::string what) override {
    const int n = bytes(in, what);
    const bool in_place = is_rank_chunk(out, in, shared_->launch.rank);
    return post(
        std::move(what),
        [=, this] {
          return in_place ? MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, out.data(), n,
                                          MPI_BYTE, comm_)
                          : MPI_Allgather(in.data(), n, MPI_BYTE, out.data(), n, MPI_BYTE, comm_);
        },
        out, in);
  }

  std::shared_ptr<PendingWork> reduce_scatter(Stream&, const Tensor& out, const Tensor& in,
                                              ReduceOp op, std::string what) override {
    const MPI_Datatype type = mpi_type(in.dtype(), what);
    const int n = count(out, what);
    const int ranks = shared_->launch.world_size;
    const bool in_place = is_rank_chunk(in, out, shared_->launch.rank);
    return post(
        std::move(what),
        [=, this] {
          int rc = MPI_SUCCESS;
          if (in_place) {  // MPI leaves the result in the first chunk: moved to this rank's
            rc = MPI_Reduce_scatter_block(MPI_IN_PLACE, in.data(), n, type, mpi_op(op), comm_);
            if (rc == MPI_SUCCESS) std::memmove(out.data(), in.data(), out.nbytes());
          } else {
            rc = MPI_Reduce_scatter_block(in.data(), out.data(), n, type, mpi_op(op), comm_);
          }
          if (rc == MPI_SUCCESS && op == ReduceOp::avg) divide(out, ranks);
          return rc;
        },
        out, in);
  }

  void barrier() override {
    post("barrier", [this] { return MPI_Barrier(comm_); })->wait();
  }
  std::string failure() const override {
    std::lock_guard lock(shared_->mutex);
    return shared_->broken.message();
  }

  std::vector<int64_t> host_all_gather(const std::vector<int64_t>& mine,
                                       const std::string& what) override {
    std::vector<int64_t> all(mine.size() * static_cast<size_t>(shared_->launch.world_size));
    post(what, [&] {
      return MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_INT64_T, all.data(),
                           static_cast<int>(mine.size()), MPI_INT64_T, comm_);
    })->wait();
    return all;
  }

  void host_broadcast(void* data, size_t n, int root, const std::string& what) override {
    post(what, [&] { return MPI_Bcast(data, static_cast<int>(n), MPI_BYTE, root, comm_); })->wait();
  }

 private:
  struct Task {
    std::function<int()> run;  // the MPI call (and the average's division); its MPI code
    std::shared_ptr<WorkState> state;
    std::vector<Tensor> keep;  // alive until the collective has run
  };

  template <class... Rest>
  static const Tensor& output(const Tensor& first, const Rest&...) {
    return first;  // each collective's first tensor is the one it writes
  }

  static void divide(const Tensor& t, int ranks) {
    float* x = t.data<float>();
    const float n = static_cast<float>(ranks);
    for (int64_t i = 0; i < t.numel(); ++i) x[i] /= n;
  }

  template <class... Tensors>
  std::shared_ptr<PendingWork> post(std::string what, std::function<int()> run,
                                    const Tensors&... keep) {
    shared_->check(what);
    auto state = std::make_shared<WorkState>();
    state->what = std::move(what);
    if constexpr (sizeof...(keep) > 0) mark_written(output(keep...));
    {
      std::lock_guard lock(queue_mutex_);
      queue_.push_back(Task{std::move(run), state, {keep...}});
      has_work_.store(true, std::memory_order_release);
    }
    queue_changed_.notify_all();
    return std::make_shared<MpiWork>(state, shared_);
  }

  void serve() {
    for (;;) {
      Task task;
      {
        // Back-to-back collectives (DDP's buckets) find the thread awake: poll a moment before
        // sleeping, since a wake-up costs tens of microseconds on a busy node.
        for (int i = 0; i < 2000 && !has_work_.load(std::memory_order_acquire); ++i) {
          std::this_thread::yield();
        }
        std::unique_lock lock(queue_mutex_);
        queue_changed_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping, everything done
        task = std::move(queue_.front());
        queue_.pop_front();
        has_work_.store(!queue_.empty() || stopping_, std::memory_order_release);
      }
      const int rc = task.run();
      task.keep.clear();
      {
        std::lock_guard lock(task.state->mutex);
        task.state->done = true;
        task.state->rc = rc;
        task.state->done_flag.store(true, std::memory_order_release);
      }
      task.state->finished.notify_all();
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

  std::shared_ptr<Shared> shared_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  std::mutex queue_mutex_;
  std::condition_variable queue_changed_;
  std::deque<Task> queue_;
  std::atomic<bool> has_work_{false};
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace

std::unique_ptr<Backend> make_mpi_backend(const Launch& launch, double timeout) {
  return std::make_unique<MpiBackend>(launch, timeout);
}
#endif

}  // namespace ember::dist::detail
