// data::Loader (ember/data/loader.hpp): worker threads fill slots of host buffers, batch by
// batch in index order; next() hands out the slot of the batch it needs, copying it to the
// device on a copy stream where the device is a GPU.
#include "ember/data/loader.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <exception>
#include <limits>
#include <mutex>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>

#include "ember/core/error.hpp"
#include "ember/data/token_shards.hpp"
#include "ember/memory/pinned_host_upstream.hpp"
#include "ember/train/training_state.hpp"

namespace ember::data {

using Clock = std::chrono::steady_clock;

constexpr int kMaxWorkers = 1024;
constexpr int kMaxPrefetch = 1 << 16;
constexpr int64_t kMaxFirst = int64_t{1} << 62;

struct Loader::Impl {
  // One batch's buffers. On a GPU they are pinned host memory, made once; the copy out of them
  // (`copied`) completes before a worker fills them again. On the CPU the slot's tensors are
  // handed out by next() and the slot gets new ones (from the caching allocator) for its next
  // batch.
  struct Slot {
    enum class State { free, filling, ready, failed };
    State state = State::free;
    int64_t index = -1;
    uint64_t generation = 0;  // the seek() it was taken under
    std::string error;
    std::vector<void*> pinned;  // GPU
    std::vector<Tensor> host;   // CPU
    std::unique_ptr<Event> copied;
  };

  std::vector<TensorSpec> specs;
  Producer producer;
  Device device;
  Options options;
  int worker_count = 0;
  std::shared_ptr<memory::PinnedHostUpstream> pinned;  // GPU only
  std::unique_ptr<Stream> copy_stream;                 // GPU only

  std::mutex mutex;
  std::condition_variable changed;
  std::vector<Slot> slots;
  int64_t next_fill = 0;    // the next batch a worker takes
  int64_t next_out = 0;     // the batch next() returns next
  uint64_t generation = 0;  // seek() count: a batch taken before the latest seek is dropped
  bool stopping = false;
  int running = 0;  // workers in their loop
  double waited = 0;
  std::vector<std::thread> threads;

  ~Impl() {
    for (Slot& slot : slots) {
      if (slot.copied) slot.copied->synchronize();
      for (size_t i = 0; i < slot.pinned.size(); ++i) {
        if (slot.pinned[i] != nullptr) pinned->deallocate(slot.pinned[i], bytes(specs[i]));
      }
    }
  }

  static size_t bytes(const TensorSpec& spec) {
    return static_cast<size_t>(spec.shape.numel()) * dtype_size(spec.dtype);
  }

  // Fills `slot` with batch `index` (no lock held). Returns "" or the producer's error.
  std::string fill(Slot& slot, int64_t index) {
    try {
      std::vector<TensorView> views;
      if (device.is_cuda()) {
        if (slot.copied) slot.copied->synchronize();  // the last copy out of these buffers
        for (size_t i = 0; i < specs.size(); ++i) {
          views.push_back({slot.pinned[i], specs[i].dtype, specs[i].shape, Device::cpu()});
        }
      } else {
        slot.host.clear();
        for (const TensorSpec& spec : specs) {
          slot.host.push_back(Tensor::empty(spec.shape, spec.dtype));
          views.push_back(slot.host.back());
        }
      }
      producer(index, views);
      for (const TensorView& v : views) mark_written(v);
      return {};
    } catch (const Error& e) {
      return described(e.message());
    } catch (const std::exception& e) {
      return described(e.what());
    } catch (...) {
      return "an exception that is not a std::exception";
    }
  }

  // An exception's message, never empty ("" is a batch made well).
  static std::string described(std::string message) {
    return message.empty() ? "an exception with an empty message" : message;
  }

  // The timeout as a wait's duration (an infinite or huge one waits for ever, in effect).
  std::chrono::duration<double> timeout() const {
    return std::chrono::duration<double>(std::min(options.timeout_seconds, 1e7));
  }

  Slot* free_slot() {
    for (Slot& slot : slots) {
      if (slot.state == Slot::State::free) return &slot;
    }
    return nullptr;
  }

  // A worker: takes the next index while it is within the look-ahead and a slot is free.
  void work() {
    omp_set_num_threads(1);  // a producer's OpenMP loops stay on this worker's core
    std::unique_lock lock(mutex);
    for (;;) {
      const int64_t ahead = options.prefetch + worker_count;
      changed.wait(lock, [&] {
        return stopping || (next_fill < next_out + ahead && free_slot() != nullptr);
      });
      if (stopping) break;
      Slot& slot = *free_slot();
      const int64_t index = next_fill++;
      slot.state = Slot::State::filling;
      slot.index = index;
      slot.generation = generation;
      lock.unlock();
      std::string error = fill(slot, index);
      lock.lock();
      if (slot.generation != generation) {  // a seek() meanwhile: not wanted any more
        slot.state = Slot::State::free;
        slot.index = -1;
      } else {
        slot.error = std::move(error);
        slot.state = slot.error.empty() ? Slot::State::ready : Slot::State::failed;
      }
      changed.notify_all();
    }
    --running;
    changed.notify_all();
  }

  // The slot's batch written into the caller's tensors (checked), ready on `stream`; the slot is
  // free again.
  void deliver_into(Slot& slot, const Stream& stream, std::span<const Tensor> into) {
    if (device.is_cuda()) {
      copy_stream->wait(stream);  // the last batch's readers on `stream` first
      for (size_t i = 0; i < specs.size(); ++i) {
        mark_written(into[i]);
        copy_bytes(into[i].data(), device, slot.pinned[i], Device::cpu(), bytes(specs[i]),
                   *copy_stream);
        into[i].record_stream(*copy_stream);
      }
      if (!slot.copied) slot.copied = std::make_unique<Event>(device);
      slot.copied->record(*copy_stream);
      stream.wait(*slot.copied);
    } else {
      for (size_t i = 0; i < specs.size(); ++i) {
        mark_written(into[i]);
        std::memcpy(into[i].data(), slot.host[i].data(), bytes(specs[i]));
      }
      slot.host.clear();
    }
    slot.state = Slot::State::free;
    slot.index = -1;
  }

  // The slot of batch next_out, made or waited for (the lock held); an Error for a failed batch.
  // `op` names the caller, `start` is when it began.
  Slot& take(std::unique_lock<std::mutex>& lock, std::string_view op, Clock::time_point start) {
    Slot* slot = nullptr;
    if (worker_count == 0) {
      slot = &slots[0];
      if (slot->state != Slot::State::failed) {
        slot->index = next_out;
        slot->error = fill(*slot, next_out);
        slot->state = slot->error.empty() ? Slot::State::ready : Slot::State::failed;
      }
      waited += std::chrono::duration<double>(Clock::now() - start).count();  // made here
    } else {
      auto find = [&]() -> Slot* {
        for (Slot& s : slots) {
          if (s.index == next_out &&
              (s.state == Slot::State::ready || s.state == Slot::State::failed)) {
            return &s;
          }
        }
        return nullptr;
      };
      const bool ready =
          changed.wait_for(lock, timeout(), [&] { return stopping || (slot = find()) != nullptr; });
      waited += std::chrono::duration<double>(Clock::now() - start).count();
      EMBER_CHECK(!stopping, "{}: the loader was destroyed while it waited", op);
      EMBER_CHECK(ready,
                  "data::Loader: batch {} was not ready after {} s: a worker is hung, or the "
                  "producer takes longer than the timeout (Options::timeout_seconds)",
                  next_out, options.timeout_seconds);
    }
    // A failed batch stays failed: every later call says so too.
    EMBER_CHECK(slot->state != Slot::State::failed, "data::Loader: batch {}: {}", slot->index,
                slot->error);
    return *slot;
  }

  // The slot's batch as the caller's tensors, ready on `stream`; the slot is free again.
  std::vector<Tensor> deliver(Slot& slot, const Stream& stream) {
    std::vector<Tensor> out;
    if (device.is_cuda()) {
      for (size_t i = 0; i < specs.size(); ++i) {
        Tensor t = Tensor::empty(specs[i].shape, specs[i].dtype, *copy_stream);
        t.copy_(TensorView{slot.pinned[i], specs[i].dtype, specs[i].shape, Device::cpu()});
        out.push_back(std::move(t));
      }
      if (!slot.copied) slot.copied = std::make_unique<Event>(device);
      slot.copied->record(*copy_stream);
      stream.wait(*slot.copied);
      for (const Tensor& t : out) t.record_stream(stream);
    } else {
      out = std::move(slot.host);
      slot.host.clear();
    }
    slot.state = Slot::State::free;
    slot.index = -1;
    return out;
  }
};

Loader::Loader(std::vector<TensorSpec> specs, Producer producer, Device device, Options options)
    : impl_(std::make_shared<Impl>()) {
  EMBER_CHECK(!specs.empty(), "data::Loader: a batch needs at least one tensor");
  for (const TensorSpec& spec : specs) {
    EMBER_CHECK(spec.shape.numel() > 0,
                "data::Loader: a batch tensor of shape {} holds nothing "
                "(a batch size of 0?)",
                spec.shape.to_string());
  }
  EMBER_CHECK(producer != nullptr, "data::Loader: no producer");
  EMBER_CHECK(options.workers >= -1 && options.workers <= kMaxWorkers,
              "data::Loader: workers must be -1 (automatic) or in 0..{}, not {}", kMaxWorkers,
              options.workers);
  EMBER_CHECK(options.prefetch >= 0 && options.prefetch <= kMaxPrefetch,
              "data::Loader: prefetch must be in 0..{}, not {}", kMaxPrefetch, options.prefetch);
  EMBER_CHECK(options.prefetch >= 1 || options.workers == 0,
              "data::Loader: a prefetch depth of 0 leaves the {} workers nothing to do ahead; "
              "use prefetch >= 1, or workers 0",
              options.workers);
  EMBER_CHECK(options.timeout_seconds > 0, "data::Loader: timeout_seconds must be positive, not {}",
              options.timeout_seconds);
  EMBER_CHECK(options.first >= 0 && options.first <= kMaxFirst,
              "data::Loader: the first batch index must be in 0..2^62, not {}", options.first);
  EMBER_CHECK(device.is_cpu() || device.is_cuda(), "data::Loader: unknown device {}",
              device.to_string());
  Impl& m = *impl_;
  m.specs = std::move(specs);
  m.producer = std::move(producer);
  m.device = device;
  m.options = options;
  // The cores OpenMP's compute threads leave free, at least one.
  m.worker_count = options.workers >= 0 ? options.workers
                                        : std::max(1, omp_get_num_procs() - omp_get_max_threads());
  m.next_fill = m.next_out = options.first;
  const int slot_count = m.worker_count == 0 ? 1 : options.prefetch + m.worker_count;
  m.slots.resize(static_cast<size_t>(slot_count));
  if (device.is_cuda()) {
    m.pinned = std::make_shared<memory::PinnedHostUpstream>();
    m.copy_stream = std::make_unique<Stream>(device);
    for (Impl::Slot& slot : m.slots) {
      for (const TensorSpec& spec : m.specs) {
        void* p = m.pinned->allocate(Impl::bytes(spec));
        EMBER_CHECK(p != nullptr, "data::Loader: cannot pin {} bytes of host memory for a batch",
                    Impl::bytes(spec));
        slot.pinned.push_back(p);
      }
    }
  }
  m.running = m.worker_count;
  try {
    for (int w = 0; w < m.worker_count; ++w) {
      m.threads.emplace_back([impl = impl_] { impl->work(); });
    }
  } catch (const std::system_error& e) {
    {
      std::lock_guard lock(m.mutex);
      m.stopping = true;
      m.running -= m.worker_count - static_cast<int>(m.threads.size());
    }
    m.changed.notify_all();
    for (std::thread& t : m.threads) t.join();
    EMBER_THROW("data::Loader: cannot start worker {} of {}: {}", m.threads.size() + 1,
                m.worker_count, e.what());
  }
}

Loader::~Loader() {
  Impl& m = *impl_;
  std::unique_lock lock(m.mutex);
  m.stopping = true;
  m.changed.notify_all();
  // Each worker finishes the batch in hand; one that is still busy after the timeout (a hung
  // producer) is left to finish on its own, holding the loader's state until it does.
  const bool done = m.changed.wait_for(lock, m.timeout(), [&] { return m.running == 0; });
  lock.unlock();
  for (std::thread& t : m.threads) {
    if (done) {
      t.join();
    } else {
      t.detach();
    }
  }
  if (!done) {
    std::fprintf(stderr,
                 "warning: data::Loader: a worker was still making a batch %g s after the loader "
                 "was destroyed; it finishes on its own\n",
                 m.options.timeout_seconds);
  }
}

std::vector<Tensor> Loader::next(const Stream& stream) {
  const std::shared_ptr<Impl> keep = impl_;  // the state outlives a destructor running meanwhile
  Impl& m = *keep;
  EMBER_CHECK(stream.device() == m.device,
              "data::Loader::next: the loader's batches go to {}, not {}", m.device.to_string(),
              stream.device().to_string());
  const auto start = Clock::now();
  std::unique_lock lock(m.mutex);
  std::vector<Tensor> out = m.deliver(m.take(lock, "data::Loader::next", start), stream);
  ++m.next_out;
  m.changed.notify_all();
  return out;
}

void Loader::next_into(const Stream& stream, std::span<const Tensor> into) {
  const std::shared_ptr<Impl> keep = impl_;
  Impl& m = *keep;
  EMBER_CHECK(stream.device() == m.device,
              "data::Loader::next_into: the loader's batches go to {}, not {}",
              m.device.to_string(), stream.device().to_string());
  EMBER_CHECK(into.size() == m.specs.size(),
              "data::Loader::next_into: a batch is {} tensors, not {}", m.specs.size(),
              into.size());
  for (size_t i = 0; i < into.size(); ++i) {
    const Tensor& t = into[i];
    const TensorSpec& spec = m.specs[i];
    EMBER_CHECK(
        t.defined() && t.shape() == spec.shape && t.dtype() == spec.dtype && t.device() == m.device,
        "data::Loader::next_into: tensor {} must be {}{} on {}, not {}", i, dtype_name(spec.dtype),
        spec.shape.to_string(), m.device.to_string(),
        t.defined() ? t.view().describe() : std::string("undefined"));
  }
  // Between replays, not inside a capture (its copy is from host memory): refused before a batch
  // is taken.
  stream.refuse_capture("data::Loader::next_into");
  const auto start = Clock::now();
  std::unique_lock lock(m.mutex);
  m.deliver_into(m.take(lock, "data::Loader::next_into", start), stream, into);
  ++m.next_out;
  m.changed.notify_all();
}

int64_t Loader::position() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->next_out;
}

void Loader::seek(int64_t index) {
  EMBER_CHECK(index >= 0 && index <= kMaxFirst,
              "data::Loader::seek: the batch index must be in 0..2^62, not {}", index);
  Impl& m = *impl_;
  std::lock_guard lock(m.mutex);
  if (index == m.next_out) return;  // what is made ahead stays good
  ++m.generation;
  m.next_out = m.next_fill = index;
  for (Impl::Slot& slot : m.slots) {
    if (slot.state == Impl::Slot::State::ready || slot.state == Impl::Slot::State::failed) {
      slot.state = Impl::Slot::State::free;
      slot.index = -1;
      slot.error.clear();
      slot.host.clear();
    }
  }
  m.changed.notify_all();
}

int Loader::workers() const {
  return impl_->worker_count;
}

double Loader::wait_seconds() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->waited;
}

void track_in(train::TrainingState& state, Loader& loader, int64_t batches_per_epoch) {
  EMBER_CHECK(
      batches_per_epoch >= 0,
      "data::track_in: batches_per_epoch must be positive (or 0: one endless epoch), not {}",
      batches_per_epoch);
  // A position at an epoch's end (batch == batches_per_epoch, as TokenShards saves it after an
  // epoch's last batch) is the next epoch's start.
  const auto problems = [batches_per_epoch](const train::Progress& p) {
    std::vector<std::string> out;
    // (The last term keeps epoch * batches_per_epoch + data_position within int64.)
    if (!(p.epoch >= 0 && p.data_position >= 0 &&
          (batches_per_epoch == 0
               ? p.epoch == 0
               : p.data_position <= batches_per_epoch &&
                     p.epoch <= (std::numeric_limits<int64_t>::max() - p.data_position) /
                                    batches_per_epoch))) {
      out.push_back(fmt::format(
          "data::track_in: the saved state's data position (epoch {}, batch {}) does not fit {} "
          "batches per epoch",
          p.epoch, p.data_position, batches_per_epoch));
    }
    return out;
  };
  state.add_progress(
      [&loader, batches_per_epoch](train::Progress& p) {
        const int64_t at = loader.position();
        p.epoch = batches_per_epoch > 0 ? at / batches_per_epoch : 0;
        p.data_position = batches_per_epoch > 0 ? at % batches_per_epoch : at;
      },
      [&loader, batches_per_epoch, problems](const train::Progress& p) {
        const std::vector<std::string> found = problems(p);
        EMBER_CHECK(found.empty(), "{}", found.empty() ? "" : found.front());
        loader.seek(batches_per_epoch > 0 ? p.epoch * batches_per_epoch + p.data_position
                                          : p.data_position);
      },
      problems);
}

std::unique_ptr<Loader> token_shards_loader(const TokenShards& shards, Device device,
                                            Loader::Options options) {
  options.first = shards.index_of(shards.position());
  const Shape shape{shards.batch(), shards.seq()};
  return std::make_unique<Loader>(
      std::vector<TensorSpec>{{shape, DType::i32}, {shape, DType::i32}},
      [&shards](int64_t index, std::span<const TensorView> host) {
        shards.fill(index, host[0], host[1]);
      },
      device, options);
}

}  // namespace ember::data
