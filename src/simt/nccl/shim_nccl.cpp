// Emulated NCCL over MPI (include/ember/simt/shim/nccl.h): each communicator is a duplicate of
// MPI_COMM_WORLD; each collective is work queued on its emulated CUDA stream that runs the
// matching non-blocking MPI collective and polls it, giving up when the communicator is aborted.
#include "ember/simt/shim/nccl.h"

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <iterator>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ember/core/dtype.hpp"
#include "ember/core/tensor.hpp"
#include "ember/simt/cuda_types.hpp"
#include "ember/simt/race_check.hpp"

struct ncclComm {
  MPI_Comm mpi = MPI_COMM_NULL;
  int rank = 0;
  int nranks = 0;
  std::atomic<bool> aborted{false};
  std::atomic<int> async_error{ncclSuccess};
  std::atomic<int> queued{0};  // collectives queued and not finished
};

namespace {

size_t type_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    default:
      return 8;
  }
}

bool valid_type(ncclDataType_t t) {
  return t >= ncclInt8 && t <= ncclBfloat16;
}
bool valid_op(ncclRedOp_t op) {
  return op >= ncclSum && op <= ncclAvg;
}

// Reduces `ranks` buffers of `count` T elements (laid out one after another) into out, in rank
// order.
template <class T>
void reduce_typed(const void* all_bytes, void* out_bytes, size_t count, int ranks, ncclRedOp_t op) {
  const T* all = static_cast<const T*>(all_bytes);
  T* out = static_cast<T*>(out_bytes);
  for (size_t i = 0; i < count; ++i) {
    T acc = all[i];
    for (int r = 1; r < ranks; ++r) {
      const T v = all[static_cast<size_t>(r) * count + i];
      switch (op) {
        case ncclSum:
        case ncclAvg:
          acc = acc + v;
          break;
        case ncclProd:
          acc = acc * v;
          break;
        case ncclMax:
          acc = v > acc ? v : acc;
          break;
        case ncclMin:
          acc = v < acc ? v : acc;
          break;
      }
    }
    if (op == ncclAvg) acc = static_cast<T>(acc / static_cast<T>(ranks));
    out[i] = acc;
  }
}

// reduce_typed for each ncclDataType_t, in the enum's order; null for the 16-bit floats, which
// reduce() reduces in f32.
using ReduceTyped = void (*)(const void*, void*, size_t, int, ncclRedOp_t);
constexpr ReduceTyped kReduceTyped[] = {reduce_typed<int8_t>,  reduce_typed<uint8_t>,
                                        reduce_typed<int32_t>, reduce_typed<uint32_t>,
                                        reduce_typed<int64_t>, reduce_typed<uint64_t>,
                                        nullptr /* f16 */,     reduce_typed<float>,
                                        reduce_typed<double>,  nullptr /* bf16 */};
static_assert(std::size(kReduceTyped) == ncclBfloat16 + 1);

void reduce(const void* all, void* out, size_t count, int ranks, ncclDataType_t type,
            ncclRedOp_t op) {
  if (type != ncclFloat16 && type != ncclBfloat16) {
    return kReduceTyped[type](all, out, count, ranks, op);
  }
  // In f32, each result rounded once to the 16-bit type.
  const ember::DType d = type == ncclFloat16 ? ember::DType::f16 : ember::DType::bf16;
  const size_t n = count * static_cast<size_t>(ranks);
  std::vector<float> wide(n), result(count);
  ember::convert_host(wide.data(), ember::DType::f32, all, d, static_cast<int64_t>(n));
  reduce_typed<float>(wide.data(), result.data(), count, ranks, op);
  ember::convert_host(out, d, result.data(), ember::DType::f32, static_cast<int64_t>(count));
}

// Waits for `request` while polling for an abort; false when aborted (the request is left).
bool finish(ncclComm* comm, MPI_Request* request) {
  for (int i = 0;; ++i) {
    int done = 0;
    if (MPI_Test(request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
      comm->async_error = ncclSystemError;
      return false;
    }
    if (done) return true;
    if (comm->aborted.load()) return false;
    if (i > 100) std::this_thread::sleep_for(std::chrono::microseconds(i > 1000 ? 500 : 20));
  }
}

// Queues `body` on `stream` as the collective's kernel would be. On a capturing stream it joins
// the graph and runs at each replay (as NCCL's captured kernels do); `queued` counts only
// eager collectives (a graph's run at each launch, unknown here).
ncclResult_t enqueue(ncclComm* comm, cudaStream_t stream, std::vector<ember::simt::Access> accesses,
                     const char* name, std::function<void()> body) {
  if (comm == nullptr) return ncclInvalidArgument;
  if (comm->aborted.load()) return ncclInvalidUsage;
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess) return ncclUnhandledCudaError;
  if (capture != cudaStreamCaptureStatusNone) {
    ember::simt::stream_submit(
        stream,
        [comm, body = std::move(body)] {
          if (!comm->aborted.load()) body();
        },
        std::move(accesses), name);
    return ncclSuccess;
  }
  ++comm->queued;
  ember::simt::stream_submit(
      stream,
      [comm, body = std::move(body)] {
        if (!comm->aborted.load()) body();
        --comm->queued;
      },
      std::move(accesses), name);
  return ncclSuccess;
}

}  // namespace

const char* ncclGetErrorString(ncclResult_t result) {
  static constexpr const char* kStrings[] = {
      "no error",                                                    // ncclSuccess
      "unhandled cuda error",                                        // ncclUnhandledCudaError
      "unhandled system error (emulated NCCL: an MPI call failed)",  // ncclSystemError
      "internal error",                                              // ncclInternalError
      "invalid argument",                                            // ncclInvalidArgument
      "invalid usage (e.g. a call on an aborted communicator)",      // ncclInvalidUsage
      "remote process exited or there was a network error",          // ncclRemoteError
      "NCCL operation in progress",                                  // ncclInProgress
  };
  static_assert(std::size(kStrings) == ncclInProgress + 1);
  const auto index = static_cast<size_t>(result);
  return index < std::size(kStrings) ? kStrings[index] : "unknown result code";
}

ncclResult_t ncclGetVersion(int* version) {
  if (!version) return ncclInvalidArgument;
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (!id) return ncclInvalidArgument;
  std::random_device device;
  for (char& c : id->internal) c = static_cast<char>(device());
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* out, int nranks, ncclUniqueId id, int rank) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!out || !initialized || nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  int world = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  if (world != nranks) return ncclInvalidUsage;  // the emulation spans all of MPI_COMM_WORLD
  auto comm = std::make_unique<ncclComm>();
  comm->rank = rank;
  comm->nranks = nranks;
  // Ranked as NCCL ranks them, and the same id everywhere (checked: a wrong id is a hang in NCCL).
  if (MPI_Comm_split(MPI_COMM_WORLD, 0, rank, &comm->mpi) != MPI_SUCCESS) return ncclSystemError;
  MPI_Comm_set_errhandler(comm->mpi, MPI_ERRORS_RETURN);
  ncclUniqueId root_id = id;
  if (MPI_Bcast(root_id.internal, NCCL_UNIQUE_ID_BYTES, MPI_BYTE, 0, comm->mpi) != MPI_SUCCESS) {
    return ncclSystemError;
  }
  if (std::memcmp(root_id.internal, id.internal, NCCL_UNIQUE_ID_BYTES) != 0) {
    MPI_Comm_free(&comm->mpi);
    return ncclInvalidUsage;
  }
  *out = comm.release();
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (!comm) return ncclInvalidArgument;
  // NCCL waits for the communicator's pending work; an aborted one has none that will finish.
  while (comm->queued.load() > 0 && !comm->aborted.load()) {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  if (!comm->aborted.load()) MPI_Comm_free(&comm->mpi);
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (!comm) return ncclInvalidArgument;
  // A running collective gives up at its next poll and queued ones skip their work. The
  // communicator is not freed: queued work still refers to it, and with a peer gone its MPI
  // communicator cannot be freed collectively (a small leak, once, after a fatal error).
  comm->aborted = true;
  if (comm->async_error.load() == ncclSuccess) comm->async_error = ncclRemoteError;
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error) {
  if (!comm || !async_error) return ncclInvalidArgument;
  *async_error = static_cast<ncclResult_t>(comm->async_error.load());
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (!comm || !count) return ncclInvalidArgument;
  *count = comm->nranks;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (!comm || !rank) return ncclInvalidArgument;
  *rank = comm->rank;
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  if (!valid_type(type) || !valid_op(op) || (count > 0 && (!send || !recv)))
    return ncclInvalidArgument;
  const size_t bytes = count * type_size(type);
  return enqueue(comm, stream, {{send, bytes, false}, {recv, bytes, true}}, "ncclAllReduce", [=] {
    std::vector<char> all(bytes * static_cast<size_t>(comm->nranks));
    MPI_Request request;
    MPI_Iallgather(send, static_cast<int>(bytes), MPI_BYTE, all.data(), static_cast<int>(bytes),
                   MPI_BYTE, comm->mpi, &request);
    if (finish(comm, &request)) reduce(all.data(), recv, count, comm->nranks, type, op);
  });
}

ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type,
                           int root, ncclComm_t comm, cudaStream_t stream) {
  if (!valid_type(type) || !comm || root < 0 || root >= comm->nranks) return ncclInvalidArgument;
  const size_t bytes = count * type_size(type);
  return enqueue(comm, stream, {{send, bytes, false}, {recv, bytes, true}}, "ncclBroadcast", [=] {
    if (comm->rank == root && send != recv) std::memmove(recv, send, bytes);
    MPI_Request request;
    MPI_Ibcast(recv, static_cast<int>(bytes), MPI_BYTE, root, comm->mpi, &request);
    finish(comm, &request);
  });
}

ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t type,
                           ncclComm_t comm, cudaStream_t stream) {
  if (!valid_type(type) || !comm) return ncclInvalidArgument;
  const size_t bytes = count * type_size(type);
  return enqueue(comm, stream,
                 {{send, bytes, false}, {recv, bytes * static_cast<size_t>(comm->nranks), true}},
                 "ncclAllGather", [=] {
                   std::vector<char> mine(static_cast<const char*>(send),
                                          static_cast<const char*>(send) + bytes);
                   MPI_Request request;
                   MPI_Iallgather(mine.data(), static_cast<int>(bytes), MPI_BYTE, recv,
                                  static_cast<int>(bytes), MPI_BYTE, comm->mpi, &request);
                   finish(comm, &request);
                 });
}

ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t count, ncclDataType_t type,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  if (!valid_type(type) || !valid_op(op) || !comm) return ncclInvalidArgument;
  const size_t bytes = count * type_size(type);
  const size_t total = bytes * static_cast<size_t>(comm->nranks);
  return enqueue(
      comm, stream, {{send, total, false}, {recv, bytes, true}}, "ncclReduceScatter", [=] {
        std::vector<char> all(total * static_cast<size_t>(comm->nranks));
        MPI_Request request;
        MPI_Iallgather(send, static_cast<int>(total), MPI_BYTE, all.data(), static_cast<int>(total),
                       MPI_BYTE, comm->mpi, &request);
        if (!finish(comm, &request)) return;
        // Rank r's chunk of every rank's input, then reduced in rank order.
        std::vector<char> chunks(bytes * static_cast<size_t>(comm->nranks));
        for (int r = 0; r < comm->nranks; ++r) {
          std::memcpy(
              chunks.data() + static_cast<size_t>(r) * bytes,
              all.data() + static_cast<size_t>(r) * total + static_cast<size_t>(comm->rank) * bytes,
              bytes);
        }
        reduce(chunks.data(), recv, count, comm->nranks, type, op);
      });
}

ncclResult_t ncclGroupStart() {
  return ncclSuccess;
}
ncclResult_t ncclGroupEnd() {
  return ncclSuccess;
}
