// The NCCL engine: CUDA tensors on the rank's GPU, collectives on a communication stream ordered
// after the calling stream by an event. Failures follow NCCL's documented handling: waits poll
// the work's event and ncclCommGetAsyncError; past the timeout, or on an asynchronous error, the
// communicator is aborted (ncclCommAbort: its kernels return) and the wait throws. A watchdog
// thread does the same for work that only a stream waits for (Work::wait(stream)), so that a lost
// peer can never hang the GPU: the next call reports it. The emulated-CUDA build runs this file
// against ember's NCCL shim (include/ember/simt/shim/nccl.h), over MPI.
#include "dist/backend.hpp"

namespace ember::dist::detail {
bool built_with_nccl() {
  return EMBER_WITH_NCCL != 0;
}
}  // namespace ember::dist::detail

#if !EMBER_WITH_NCCL
namespace ember::dist::detail {
std::unique_ptr<Backend> make_nccl_backend(const Launch& launch, double, Backend*) {
  EMBER_THROW("dist: rank {} of {}: CUDA collectives need NCCL, which this ember was built without",
              launch.rank, launch.world_size);
}
}  // namespace ember::dist::detail
#else
#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <condition_variable>
#include <iterator>
#include <mutex>
#include <thread>

#include "core/shared_library.hpp"
#include "ember/core/check_cuda.hpp"
#include "ember/core/enum_name.hpp"

namespace ember::dist::detail {
namespace {

// NCCL is loaded on first use, not linked (core/shared_library.hpp): libember.so starts on a
// machine without it. The emulated-CUDA build calls the shim's functions.
// clang-format off
#define EMBER_NCCL_FUNCTIONS(X)                                                   \
  X(ncclGetErrorString) X(ncclGetUniqueId) X(ncclCommInitRank) X(ncclCommDestroy) \
  X(ncclCommAbort) X(ncclCommGetAsyncError) X(ncclAllReduce) X(ncclBroadcast)     \
  X(ncclAllGather) X(ncclReduceScatter)
// clang-format on

struct NcclApi {
#define EMBER_DECLARE(name) decltype(&::name) name = nullptr;
  EMBER_NCCL_FUNCTIONS(EMBER_DECLARE)
#undef EMBER_DECLARE
};

const NcclApi& nccl() {
#if defined(EMBER_SIMT)
  static const NcclApi shim = [] {
    NcclApi functions;
#define EMBER_BIND(name) functions.name = &::name;
    EMBER_NCCL_FUNCTIONS(EMBER_BIND)
#undef EMBER_BIND
    return functions;
  }();
  return shim;
#else
  static const ember::detail::SharedLibrary library("libnccl.so." + std::to_string(NCCL_MAJOR));
  static const NcclApi* const table = []() -> const NcclApi* {
    if (!library.loaded()) return nullptr;
    auto* functions = new NcclApi();  // never freed: communicators made through it live on
#define EMBER_BIND(name) library.bind(#name, functions->name);
    EMBER_NCCL_FUNCTIONS(EMBER_BIND)
#undef EMBER_BIND
    return functions;
  }();
  EMBER_CHECK(table != nullptr,
              "dist: CUDA collectives need NCCL, which is not available ({}); install NCCL {} "
              "(Debian: libnccl2)",
              library.error(), NCCL_MAJOR);
  return *table;
#endif
}

#define EMBER_NCCL_CALL(expr)                                                                 \
  do {                                                                                        \
    const ncclResult_t ember_status_ = (expr);                                                \
    if (ember_status_ != ncclSuccess) [[unlikely]]                                            \
      EMBER_THROW("NCCL call '{}' failed: {} (code {})", #expr,                               \
                  nccl().ncclGetErrorString(ember_status_), static_cast<int>(ember_status_)); \
  } while (0)

// In DType's and ReduceOp's order.
ncclDataType_t nccl_type(DType d) {
  static constexpr ncclDataType_t kTypes[] = {ncclFloat32, ncclFloat16, ncclBfloat16,
                                              ncclInt32,   ncclInt64,   ncclUint8};
  static_assert(std::size(kTypes) == static_cast<size_t>(DType::u8) + 1);
  return enum_entry(d, kTypes, ncclFloat32);
}

ncclRedOp_t nccl_op(ReduceOp op) {
  static constexpr ncclRedOp_t kOps[] = {ncclSum, ncclAvg, ncclMax};
  static_assert(std::size(kOps) == static_cast<size_t>(ReduceOp::max) + 1);
  return enum_entry(op, kOps, ncclSum);
}

// What the works need of their communicator; alive as long as any of them.
struct NcclShared {
  Launch launch;
  double timeout = 0;
  std::mutex mutex;
  Broken broken;
  ncclComm_t comm = nullptr;  // null once destroyed

  void abort_locked(const std::string& message) {
    if (broken.is()) return;
    broken.set(message);
    if (comm) nccl().ncclCommAbort(comm);  // as NCCL documents: pending kernels return
  }
  // Throws when the communicator failed, or fails now (an asynchronous error).
  void check_locked(const std::string& what) {
    if (!broken.is() && comm) {
      ncclResult_t async = ncclSuccess;
      if (nccl().ncclCommGetAsyncError(comm, &async) == ncclSuccess && async != ncclSuccess &&
          async != ncclInProgress) {
        abort_locked(fmt::format("dist: NCCL reported an asynchronous error on rank {} of {}: {}",
                                 launch.rank, launch.world_size, nccl().ncclGetErrorString(async)));
      }
    }
    broken.check(what);
  }
  void check(const std::string& what) {
    std::lock_guard lock(mutex);
    check_locked(what);
  }
  [[noreturn]] void time_out(const std::string& what) {
    {
      std::lock_guard lock(mutex);
      abort_locked(fmt::format("dist: {} timed out after {} s on rank {} of {}", what, timeout,
                               launch.rank, launch.world_size));
    }
    throw_timeout(what, launch.rank, launch.world_size, timeout,
                  "(NCCL: the communicator was aborted with ncclCommAbort)");
  }
};

// A collective captured into a CUDA graph, seen from the host at each replay: host functions
// captured before and after it set and clear the time its current replay began, which the
// watchdog compares with the timeout (it may not query the captured done event).
struct ReplayBeat {
  std::string what;
  std::atomic<int64_t> began_ns{0};  // steady clock; 0: no replay of it is running
  static int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  static void begin(void* beat) { static_cast<ReplayBeat*>(beat)->began_ns.store(now_ns()); }
  static void end(void* beat) { static_cast<ReplayBeat*>(beat)->began_ns.store(0); }
};

class NcclWork final : public PendingWork {
 public:
  NcclWork(std::shared_ptr<NcclShared> shared, std::string what, std::vector<Tensor> keep,
           Device device)
      : shared_(std::move(shared)),
        what_(std::move(what)),
        keep_(std::move(keep)),
        done_event_(device),
        deadline_(std::chrono::steady_clock::now()) {}
  bool test() override;
  void wait() override;
  void wait(const Stream& stream) override;
  std::string describe() const override { return what_; }
  Event& event() { return done_event_; }
  void set_deadline(std::chrono::steady_clock::time_point t) { deadline_ = t; }
  std::chrono::steady_clock::time_point deadline() const { return deadline_; }
  bool finished() const { return finished_.load(std::memory_order_acquire); }
  // The done event is recorded (the collective is queued): the watchdog may query it.
  void mark_recorded() { recorded_.store(true, std::memory_order_release); }
  bool recorded() const { return recorded_.load(std::memory_order_acquire); }
  // Queued while the caller's stream captured a CUDA graph: the collective runs at each replay,
  // and its done event (recorded in the capture) may not be queried. Streams wait on it inside
  // the capture (the join); test() is false and a host wait() an Error.
  void mark_captured() { captured_ = true; }

 private:
  std::shared_ptr<NcclShared> shared_;
  std::string what_;
  std::vector<Tensor> keep_;
  Event done_event_;
  std::chrono::steady_clock::time_point deadline_;
  std::atomic<bool> finished_{false};
  std::atomic<bool> recorded_{false};
  bool captured_ = false;
};

class NcclBackend final : public Backend {
 public:
  NcclBackend(const Launch& launch, double timeout, Backend* host)
      : launch_(launch), timeout_(timeout), device_(rank_device(launch)), stream_(device_) {
    shared_->launch = launch;
    shared_->timeout = timeout;
    ncclUniqueId id{};
    if (launch.rank == 0) EMBER_NCCL_CALL(nccl().ncclGetUniqueId(&id));
    if (host != nullptr) {
      host->host_broadcast(&id, sizeof(id), 0, "the NCCL unique id's broadcast");
    } else {
      tcp_rendezvous_broadcast(launch, &id, sizeof(id), timeout);  // torchrun style, no MPI
    }
    EMBER_CUDA_CHECK(cudaSetDevice(device_.index()));
    EMBER_NCCL_CALL(nccl().ncclCommInitRank(&shared_->comm, launch.world_size, id, launch.rank));
    watchdog_ = std::thread([this] { watch(); });
  }

  ~NcclBackend() override {
    // Collectives in flight finish, or pass their deadline and the watchdog aborts them: a peer
    // that never joins cannot hang the destructor (it runs while an error unwinds, too).
    for (;;) {
      {
        std::lock_guard lock(shared_->mutex);
        std::erase_if(in_flight_, [](const std::weak_ptr<NcclWork>& w) {
          auto work = w.lock();
          return !work || work->finished() || (work->recorded() && work->event().query());
        });
        if (in_flight_.empty() || shared_->broken.is()) break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    // Replays of graphs that captured collectives may still be queued or running: the device
    // finishes them first (the watchdog still runs, and aborts one past its deadline). A graph
    // must not be replayed after this (docs/distributed.md).
    bool captured_any = false;
    {
      std::lock_guard lock(shared_->mutex);
      captured_any = !beats_.empty() && !shared_->broken.is();
    }
    if (captured_any && cudaSetDevice(device_.index()) == cudaSuccess) {
      (void)cudaDeviceSynchronize();
      (void)cudaGetLastError();
    }
    {
      std::lock_guard lock(shared_->mutex);
      stopping_ = true;
    }
    wake_.notify_all();
    watchdog_.join();
    // Works may outlive us: they find the communicator gone (null), their events complete.
    std::lock_guard lock(shared_->mutex);
    if (!shared_->broken.is()) {
      try {
        stream_.synchronize();
      } catch (...) {
      }
      nccl().ncclCommDestroy(shared_->comm);
    }
    shared_->comm = nullptr;
  }

  std::shared_ptr<PendingWork> all_reduce(Stream& stream, const Tensor& t, ReduceOp op,
                                          std::string what) override {
    return run(stream, std::move(what), {t},
               [&](cudaStream_t s) {
                 return nccl().ncclAllReduce(t.data(), t.data(), static_cast<size_t>(t.numel()),
                                             nccl_type(t.dtype()), nccl_op(op), shared_->comm, s);
               },
               {t});
  }
  std::shared_ptr<PendingWork> broadcast(Stream& stream, const Tensor& t, int root,
                                         std::string what) override {
    return run(stream, std::move(what), {t},
               [&](cudaStream_t s) {
                 return nccl().ncclBroadcast(t.data(), t.data(), t.nbytes(), ncclUint8, root,
                                             shared_->comm, s);
               },
               {t});
  }
  std::shared_ptr<PendingWork> all_gather(Stream& stream, const Tensor& out, const Tensor& in,
                                          std::string what) override {
    return run(stream, std::move(what), {out, in},
               [&](cudaStream_t s) {
                 return nccl().ncclAllGather(in.data(), out.data(), in.nbytes(), ncclUint8,
                                             shared_->comm, s);
               },
               {out});
  }
  std::shared_ptr<PendingWork> reduce_scatter(Stream& stream, const Tensor& out, const Tensor& in,
                                              ReduceOp op, std::string what) override {
    return run(stream, std::move(what), {out, in},
               [&](cudaStream_t s) {
                 return nccl().ncclReduceScatter(
                     in.data(), out.data(), static_cast<size_t>(out.numel()),
                     nccl_type(out.dtype()), nccl_op(op), shared_->comm, s);
               },
               {out});
  }
  std::string failure() const override {
    std::lock_guard lock(shared_->mutex);
    return shared_->broken.message();
  }
  void barrier() override {
    Tensor t = Tensor::zeros({1}, DType::f32, stream_);
    all_reduce(stream_, t, ReduceOp::sum, "barrier")->wait();
  }
  std::vector<int64_t> host_all_gather(const std::vector<int64_t>& mine,
                                       const std::string& what) override {
    const auto n = static_cast<int64_t>(mine.size());
    Tensor in = Tensor::from_vector(mine, {n}, stream_);
    Tensor out = Tensor::empty({n * launch_.world_size}, DType::i64, stream_);
    all_gather(stream_, out, in, what)->wait();
    return out.to_vector<int64_t>();
  }
  void host_broadcast(void* bytes, size_t n, int root, const std::string& what) override {
    std::vector<uint8_t> host(static_cast<const uint8_t*>(bytes),
                              static_cast<const uint8_t*>(bytes) + n);
    Tensor t = Tensor::from_vector(host, {static_cast<int64_t>(n)}, stream_);
    broadcast(stream_, t, root, what)->wait();
    const auto got = t.to_vector<uint8_t>();
    std::copy(got.begin(), got.end(), static_cast<uint8_t*>(bytes));
  }

 private:
  template <class Call>
  std::shared_ptr<PendingWork> run(Stream& stream, std::string what, std::vector<Tensor> keep,
                                   Call call, std::vector<Tensor> written) {
    for (const Tensor& t : keep) {
      EMBER_CHECK(t.device() == device_,
                  "dist: {}: the tensor is on {}, but rank {}'s GPU is {} (NCCL runs on the rank's "
                  "own GPU: see dist::rank_device)",
                  what, t.device().to_string(), launch_.rank, device_.to_string());
    }
    EMBER_CHECK(stream.device() == device_,
                "dist: {}: the stream is on {}, but the tensors are on {}: pass the stream that "
                "produced them (the collective is ordered after it)",
                what, stream.device().to_string(), device_.to_string());
    for (const Tensor& t : keep) t.record_stream(stream_);  // used there until it is done
    auto work = std::make_shared<NcclWork>(shared_, what, std::move(keep), device_);
    // A capturing caller (a step captured as a CUDA graph): the collective joins the graph, and
    // the communication stream joins the capture by waiting on the caller (CUDA's fork); the
    // caller's wait on the done event joins it back. The watchdog may not query an event
    // recorded in a capture: host functions captured around the collective (ReplayBeat) tell
    // it when a replay of it began, and it aborts the communicator past the timeout.
    const bool captured = stream.capturing();
    if (captured) work->mark_captured();
    work->set_deadline(std::chrono::steady_clock::now() +
                       std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                           std::chrono::duration<double>(timeout_)));
    {
      // Registered before the call: the watchdog can abort a call that blocks (the emulator's
      // immediate streams run the collective inside it). The lock is not held across the call.
      std::lock_guard lock(shared_->mutex);
      shared_->check_locked(what);
      if (!captured) in_flight_.push_back(work);
    }
    wake_.notify_all();
    // After the work queued on the caller's stream (which produced the inputs).
    if (!(stream == stream_)) stream_.wait(stream);
    EMBER_CUDA_CHECK(cudaSetDevice(device_.index()));
    const auto native = static_cast<cudaStream_t>(stream_.native());
    ReplayBeat* beat = nullptr;
    if (captured) {
      auto made = std::make_shared<ReplayBeat>();
      made->what = what;
      beat = made.get();
      std::lock_guard lock(shared_->mutex);
      beats_.push_back(std::move(made));  // kept while the communicator lives (graphs may replay)
    }
    if (beat != nullptr) EMBER_CUDA_CHECK(cudaLaunchHostFunc(native, &ReplayBeat::begin, beat));
    const ncclResult_t rc = call(native);
    if (rc != ncclSuccess) {
      std::lock_guard lock(shared_->mutex);
      shared_->abort_locked(fmt::format("dist: {} failed to start on rank {} of {}: NCCL: {}", what,
                                        launch_.rank, launch_.world_size,
                                        nccl().ncclGetErrorString(rc)));
    }
    {
      // Aborted by the watchdog while the call blocked (a peer that never came): the timeout.
      std::unique_lock lock(shared_->mutex);
      if (shared_->broken.message().starts_with("dist: " + what + " timed out")) {
        lock.unlock();
        shared_->time_out(what);
      }
      shared_->check_locked(what);
    }
    for (const Tensor& t : written) mark_written(t);
    if (beat != nullptr) EMBER_CUDA_CHECK(cudaLaunchHostFunc(native, &ReplayBeat::end, beat));
    work->event().record(stream_);
    work->mark_recorded();
    return work;
  }

  // The watchdog: aborts the communicator when an unfinished collective passes its deadline or
  // NCCL reports an asynchronous error, even when only the GPU waits for it.
  void watch() {
    std::unique_lock lock(shared_->mutex);
    while (!stopping_) {
      wake_.wait_for(lock, std::chrono::milliseconds(50));
      if (stopping_ || shared_->broken.is()) continue;
      const auto now = std::chrono::steady_clock::now();
      std::erase_if(in_flight_, [](const std::weak_ptr<NcclWork>& w) {
        auto work = w.lock();
        return !work || work->finished() || (work->recorded() && work->event().query());
      });
      for (const auto& w : in_flight_) {
        auto work = w.lock();
        if (work && now >= work->deadline()) {
          shared_->abort_locked(
              fmt::format("dist: {} timed out after {} s on rank {} of {} (found by the "
                          "watchdog; the communicator was aborted with ncclCommAbort)",
                          work->describe(), timeout_, launch_.rank, launch_.world_size));
          break;
        }
      }
      const int64_t now_ns = ReplayBeat::now_ns();
      for (const auto& beat : beats_) {
        const int64_t began = beat->began_ns.load();
        if (!shared_->broken.is() && began != 0 &&
            static_cast<double>(now_ns - began) * 1e-9 > timeout_) {
          shared_->abort_locked(
              fmt::format("dist: {}, replayed from a CUDA graph, timed out after {} s on rank {} "
                          "of {}: a peer rank did not take part (found by the watchdog; the "
                          "communicator was aborted with ncclCommAbort)",
                          beat->what, timeout_, launch_.rank, launch_.world_size));
        }
      }
      if (!shared_->broken.is()) {
        try {
          shared_->check_locked("the watchdog's check");
        } catch (const Error&) {
        }
      }
    }
  }

  std::shared_ptr<NcclShared> shared_ = std::make_shared<NcclShared>();
  Launch launch_;
  double timeout_;
  Device device_;
  Stream stream_;  // the communication stream
  std::condition_variable wake_;
  std::vector<std::weak_ptr<NcclWork> > in_flight_;
  std::vector<std::shared_ptr<ReplayBeat> > beats_;  // the captured collectives (shared_->mutex)
  bool stopping_ = false;
  std::thread watchdog_;
};

bool NcclWork::test() {
  if (finished()) return true;
  shared_->check(what_);
  if (captured_) return false;  // it runs at each replay of its graph, never on its own
  if (!done_event_.query()) return false;
  keep_.clear();
  finished_.store(true, std::memory_order_release);
  return true;
}

void NcclWork::wait() {
  EMBER_CHECK(!captured_,
              "dist: {} was captured into a CUDA graph: it runs at each replay, so the host cannot "
              "wait for it; wait on a stream (Work::wait(stream)) inside the capture",
              what_);
  const double left =
      std::chrono::duration<double>(deadline_ - std::chrono::steady_clock::now()).count();
  if (!poll_until([&] { return test(); }, std::max(left, 0.0))) shared_->time_out(what_);
}

void NcclWork::wait(const Stream& stream) {
  if (stream.device().is_cpu()) {  // a CPU stream runs on the host: the host waits
    wait();
    return;
  }
  shared_->check(what_);
  if (!finished()) stream.wait(done_event_);
}

}  // namespace

std::unique_ptr<Backend> make_nccl_backend(const Launch& launch, double timeout, Backend* host) {
  return std::make_unique<NcclBackend>(launch, timeout, host);
}

}  // namespace ember::dist::detail
#endif
