#include "ember/dist/communicator.hpp"
#include "ember/core/enum_name.hpp"
#include "ember/core/profile.hpp"

#include <cstdlib>
#include <iterator>
#include <thread>

#include <fmt/format.h>

#include "dist/backend.hpp"

namespace ember::dist {

const char* reduce_op_name(ReduceOp op) {
  static constexpr const char* kNames[] = {"sum", "avg", "max"};
  static_assert(std::size(kNames) == static_cast<size_t>(ReduceOp::max) + 1);
  return enum_name(op, kNames);
}

namespace detail {

void Broken::check(const std::string& what) const {
  EMBER_CHECK(!is(),
              "dist: {} refused: this communicator failed earlier and cannot be used again "
              "({})",
              what, message_);
}

void throw_timeout(const std::string& what, int rank, int world, double seconds,
                   const std::string& engine_note) {
  EMBER_THROW(
      "dist: {} timed out after {:.1f} s on rank {} of {}: a peer rank did not take part in time "
      "(it "
      "died, hangs, or called a different collective). The communicator is unusable now; end "
      "the job (dist::abort_job) and resume from a saved state. {}",
      what, seconds, rank, world, engine_note);
}

void backoff(int iteration) {
  // Waiting on an engine with no completion callback (NCCL's event queries): keep polling
  // (yielding the core to other ranks on an oversubscribed node) for the first ~100k polls, a
  // large collective's whole life; sleep only when waiting long (a slow or lost peer).
  if (iteration < 1024) return;
  if (iteration < 100000) {
    std::this_thread::yield();
    return;
  }
  std::this_thread::sleep_for(std::chrono::microseconds(100));
}

std::string describe(const Tensor& t) {
  return t.view().describe();
}

bool is_rank_chunk(const Tensor& whole, const Tensor& part, int rank) {
  return static_cast<const char*>(part.data()) ==
         static_cast<const char*>(whole.data()) + static_cast<size_t>(rank) * part.nbytes();
}

void check_in_place(const Tensor& whole, const Tensor& part, int rank, const char* what) {
  const auto* w = static_cast<const char*>(whole.data());
  const auto* p = static_cast<const char*>(part.data());
  const bool overlap = part.nbytes() > 0 && p < w + whole.nbytes() && w < p + part.nbytes();
  EMBER_CHECK(!overlap || is_rank_chunk(whole, part, rank),
              "dist: {}: the single-rank tensor overlaps the whole one other than at this rank's "
              "chunk (rank {}: bytes [{}, {})); in place, pass exactly that chunk "
              "(whole.slice(rank * n, (rank + 1) * n))",
              what, rank, static_cast<size_t>(rank) * part.nbytes(),
              static_cast<size_t>(rank + 1) * part.nbytes());
}

void check_parts(const char* what, const Tensor& out, const Tensor& in, bool whole_is_out,
                 int world_size, int rank) {
  const Tensor& whole = whole_is_out ? out : in;
  const Tensor& part = whole_is_out ? in : out;
  EMBER_CHECK(out.defined() && in.defined() && out.dtype() == in.dtype() &&
                  out.device() == in.device() && whole.numel() == part.numel() * world_size,
              "dist: {} needs an {} of {} x the {}'s elements, dtype and device: got output {} and "
              "input {}",
              what, whole_is_out ? "output" : "input", world_size,
              whole_is_out ? "input" : "output", out.defined() ? describe(out) : "undefined",
              in.defined() ? describe(in) : "undefined");
  check_in_place(whole, part, rank, what);
}

}  // namespace detail

namespace {

double default_timeout() {
  if (const char* text = std::getenv("EMBER_DIST_TIMEOUT")) {
    // Decimal seconds only ("10", "2.5"): no hex, no exponents, at least a millisecond.
    const std::string v = text;
    char* end = nullptr;
    const double s = std::strtod(text, &end);
    EMBER_CHECK(!v.empty() && *end == '\0' &&
                    v.find_first_not_of("0123456789.") == std::string::npos && s >= 1e-3 &&
                    s <= 1e8,
                "EMBER_DIST_TIMEOUT='{}' is not a number of seconds from 0.001 to 1e8", v);
    return s;
  }
  return 600.0;
}

double checked_timeout(const CommOptions& options) {
  EMBER_CHECK(options.timeout_seconds == 0 ||
                  (options.timeout_seconds >= 1e-3 && options.timeout_seconds <= 1e8),
              "dist: CommOptions::timeout_seconds must be from 0.001 to 1e8 seconds (or 0 for the "
              "default), not {}",
              options.timeout_seconds);
  return options.timeout_seconds > 0 ? options.timeout_seconds : default_timeout();
}

int checked_metadata(const CommOptions& options);

int default_check() {
  if (const char* text = std::getenv("EMBER_DIST_CHECK")) {
    const std::string v = text;
    EMBER_CHECK(v == "0" || v == "1" || v == "2", "EMBER_DIST_CHECK='{}' must be 0, 1 or 2", v);
    return v[0] - '0';
  }
#ifdef NDEBUG
  return 0;
#else
  return 2;
#endif
}

// The communicator whose collectives this thread issues under an AgreedCollectives.
thread_local const Communicator* agreed_on = nullptr;

// Metadata compared across ranks: collective kind, dtype, elements, root, op.
enum Kind : int64_t { kAllReduce = 1, kBroadcast, kAllGather, kReduceScatter };

const char* kind_name(int64_t kind) {
  static constexpr const char* kNames[] = {"all_reduce", "broadcast", "all_gather",
                                           "reduce_scatter"};
  return kind >= kAllReduce && kind <= kReduceScatter ? kNames[kind - kAllReduce] : "?";
}

// avg divides, so it needs a float tensor.
void check_avg(const char* what, const Tensor& tensor, ReduceOp op) {
  EMBER_CHECK(op != ReduceOp::avg || is_floating(tensor.dtype()),
              "dist: {}: avg needs a float tensor, not {}", what, detail::describe(tensor));
}

int checked_metadata(const CommOptions& options) {
  EMBER_CHECK(options.check_metadata >= -1 && options.check_metadata <= 2,
              "dist: CommOptions::check_metadata must be -1 (the default), 0, 1 or 2, not {}",
              options.check_metadata);
  return options.check_metadata < 0 ? default_check() : options.check_metadata;
}

}  // namespace

Device rank_device(const Launch& launch) {
  const int count = cuda_device_count();
  EMBER_CHECK(count > 0, "dist: rank {} needs a GPU for CUDA collectives, but none is visible",
              launch.rank);
  if (count == 1) return Device::cuda(0);
  EMBER_CHECK(launch.local_rank < count,
              "dist: rank {} has local rank {}, which picks cuda:{}, but this node has {} GPUs: "
              "start at most one rank per GPU",
              launch.rank, launch.local_rank, launch.local_rank, count);
  return Device::cuda(launch.local_rank);
}

Communicator::Communicator(const Launch& launch, CommOptions options)
    : launch_(launch),
      timeout_(checked_timeout(options)),
      check_metadata_(checked_metadata(options)) {
  EMBER_CHECK(launch.world_size >= 1 && launch.rank >= 0 && launch.rank < launch.world_size,
              "dist: rank {} of {} is not a valid launch", launch.rank, launch.world_size);
  if (launch.world_size == 1) {
    local_ = detail::make_local_backend();
  } else if (launch.launcher != "env" && detail::built_with_mpi()) {
    mpi_ = detail::make_mpi_backend(launch, timeout_);
  }
}

Communicator::~Communicator() = default;

void Communicator::refuse_if_failed(const char* what) const {
  for (const auto* b : {mpi_.get(), nccl_.get()}) {
    if (b == nullptr) continue;
    const std::string failure = b->failure();
    EMBER_CHECK(failure.empty(),
                "dist: {} refused: this communicator failed earlier and cannot be used again ({})",
                what, failure);
  }
}

detail::Backend& Communicator::backend_for(const Tensor& t, const char* what) {
  EMBER_CHECK(t.defined(), "dist: {}: the tensor is undefined", what);
  refuse_if_failed(what);
  if (local_) return *local_;
  if (t.device().is_cuda()) {
    if (!nccl_) nccl_ = detail::make_nccl_backend(launch_, timeout_, mpi_.get());
    return *nccl_;
  }
  if (!mpi_) {
    EMBER_CHECK(launch_.launcher != "env",
                "dist: {} of a CPU tensor across {} ranks needs MPI, but this is a {} launch "
                "(RANK/WORLD_SIZE): start the job with mpirun or srun, or use CUDA tensors (NCCL)",
                what, launch_.world_size, launch_.launcher);
    mpi_ = detail::make_mpi_backend(launch_, timeout_);  // throws: built without MPI
  }
  return *mpi_;
}

void Communicator::check(const char* what, const Tensor& t, int64_t elements, int root,
                         ReduceOp op) {
  if (check_metadata_ == 0 || local_) return;
  if (check_metadata_ == 2 && agreed_on == this) return;
  detail::Backend* host = mpi_ ? mpi_.get() : nccl_.get();
  if (host == nullptr) return;
  const int64_t kind = std::string_view(what) == "all_reduce"   ? kAllReduce
                       : std::string_view(what) == "broadcast"  ? kBroadcast
                       : std::string_view(what) == "all_gather" ? kAllGather
                                                                : kReduceScatter;
  const std::vector<int64_t> mine{kind, static_cast<int64_t>(t.dtype()), elements, root,
                                  static_cast<int64_t>(op)};
  ++metadata_checks_;
  const std::vector<int64_t> all =
      host->host_all_gather(mine, fmt::format("{}'s metadata check", what));
  bool same = true;
  for (size_t i = 0; i < all.size(); ++i) same = same && all[i] == mine[i % mine.size()];
  if (same) return;
  std::string table;
  for (int r = 0; r < launch_.world_size; ++r) {
    const int64_t* m = &all[static_cast<size_t>(r) * mine.size()];
    const bool reduces = m[0] == kAllReduce || m[0] == kReduceScatter;
    table +=
        fmt::format("\n  rank {}: {}{} of {} x {}{}", r, kind_name(m[0]),
                    reduces ? fmt::format("({})", reduce_op_name(static_cast<ReduceOp>(m[4]))) : "",
                    dtype_name(static_cast<DType>(m[1])), m[2],
                    m[0] == kBroadcast ? fmt::format(" from rank {}", m[3]) : "");
  }
  EMBER_THROW(
      "dist: the ranks called mismatched collectives (rank {} is at {}); each would "
      "corrupt or hang the others:{}",
      launch_.rank, what, table);
}

Communicator::AgreedCollectives::AgreedCollectives(const Communicator& comm)
    : previous_(agreed_on) {
  agreed_on = &comm;
}

Communicator::AgreedCollectives::~AgreedCollectives() {
  agreed_on = previous_;
}

Work Communicator::all_reduce(Stream& stream, const Tensor& tensor, ReduceOp op) {
  EMBER_OP_RANGE("all_reduce");
  detail::Backend& b = backend_for(tensor, "all_reduce");
  check_avg("all_reduce", tensor, op);
  check("all_reduce", tensor, tensor.numel(), -1, op);
  ++collectives_;
  return Work(b.all_reduce(
      stream, tensor, op,
      fmt::format("all_reduce({}, {})", reduce_op_name(op), detail::describe(tensor))));
}

Work Communicator::broadcast(Stream& stream, const Tensor& tensor, int root) {
  EMBER_OP_RANGE("broadcast");
  EMBER_CHECK(root >= 0 && root < launch_.world_size,
              "dist: broadcast from rank {}: there are {} ranks", root, launch_.world_size);
  detail::Backend& b = backend_for(tensor, "broadcast");
  check("broadcast", tensor, tensor.numel(), root, ReduceOp::sum);
  ++collectives_;
  return Work(
      b.broadcast(stream, tensor, root,
                  fmt::format("broadcast({} from rank {})", detail::describe(tensor), root)));
}

Work Communicator::all_gather(Stream& stream, const Tensor& out, const Tensor& in) {
  EMBER_OP_RANGE("all_gather");
  detail::check_parts("all_gather", out, in, /*whole_is_out=*/true, launch_.world_size,
                      launch_.rank);
  detail::Backend& b = backend_for(in, "all_gather");
  check("all_gather", in, in.numel(), -1, ReduceOp::sum);
  ++collectives_;
  return Work(b.all_gather(stream, out, in, fmt::format("all_gather({})", detail::describe(in))));
}

Work Communicator::reduce_scatter(Stream& stream, const Tensor& out, const Tensor& in,
                                  ReduceOp op) {
  EMBER_OP_RANGE("reduce_scatter");
  detail::check_parts("reduce_scatter", out, in, /*whole_is_out=*/false, launch_.world_size,
                      launch_.rank);
  detail::Backend& b = backend_for(in, "reduce_scatter");
  check_avg("reduce_scatter", in, op);
  check("reduce_scatter", in, in.numel(), -1, op);
  ++collectives_;
  return Work(b.reduce_scatter(
      stream, out, in, op,
      fmt::format("reduce_scatter({}, {})", reduce_op_name(op), detail::describe(in))));
}

void Communicator::barrier() {
  if (local_) return;
  refuse_if_failed("barrier");
  detail::Backend* b = mpi_ ? mpi_.get() : nccl_.get();
  if (b == nullptr) {
    EMBER_CHECK(launch_.launcher != "env" || nccl_,
                "dist: barrier on a {} launch needs a CUDA collective first (NCCL carries it)",
                launch_.launcher);
    mpi_ = detail::make_mpi_backend(launch_, timeout_);
    b = mpi_.get();
  }
  b->barrier();
}

std::vector<int64_t> Communicator::host_all_gather(const std::vector<int64_t>& mine) {
  if (local_) return mine;
  refuse_if_failed("host_all_gather");
  detail::Backend* b = mpi_ ? mpi_.get() : nccl_.get();
  if (b == nullptr) {
    EMBER_CHECK(launch_.launcher != "env",
                "dist: host_all_gather on a {} launch needs a CUDA collective first (NCCL carries "
                "it)",
                launch_.launcher);
    mpi_ = detail::make_mpi_backend(launch_, timeout_);
    b = mpi_.get();
  }
  const std::vector<int64_t> n =
      b->host_all_gather({static_cast<int64_t>(mine.size())}, "host_all_gather's size check");
  for (int64_t k : n) {
    EMBER_CHECK(k == static_cast<int64_t>(mine.size()),
                "dist: host_all_gather: rank {} gives {} values, another rank {}", launch_.rank,
                mine.size(), k);
  }
  return b->host_all_gather(mine, "host_all_gather");
}

std::unique_ptr<Communicator> init(CommOptions options) {
  return std::make_unique<Communicator>(detect_launch(), options);
}

}  // namespace ember::dist
