#include "ember/train/training_state.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <set>
#include <span>
#include <thread>
#include <utility>

#include "ember/core/error.hpp"
#include "ember/memory/pinned_host_upstream.hpp"
#include "ember/nn/dropout.hpp"
#include "ember/train/safetensors.hpp"
#include "train/durable_files.hpp"
#include "train/safetensors_internal.hpp"

namespace ember::train {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr int kFormatVersion = 1;
constexpr const char* kEmberVersion = "0.1.0";
constexpr const char* kReplicated = "replicated.safetensors";
// What the durable file I/O's messages begin with.
constexpr std::string_view kWho = "saved state";

std::string rank_file(int rank) {
  return fmt::format("rank-{:05d}.json", rank);
}

std::string hex(uint64_t h) {
  return fmt::format("{:016x}", h);
}

// A saved state that was read and is damaged (sizes, checksums, JSON, headers, tables that do
// not match): resume skips it, and it holds no keep_last slot. A plain std::runtime_error is a
// saved state that could not be read (an I/O error, a FIFO, a newer format): skipped too, but kept,
// since it may be fine (a transient error, a newer ember).
struct Damaged : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A manifest lists files and tensors: far below this unless something else took its place.
constexpr uint64_t kMaxManifestBytes = uint64_t{256} << 20;

// A file's bytes (at most kMaxManifestBytes); a std::runtime_error (the saved state is skipped)
// when it cannot be read.
std::string read_file(const fs::path& path) {
  try {
    return read_whole_file(path.string(), kMaxManifestBytes);
  } catch (const Error& e) {
    throw std::runtime_error(e.message());
  }
}

uint64_t checksum(std::string_view bytes) {
  return XXH3_64bits(bytes.data(), bytes.size());
}

// A file's bytes in CPU memory from ember's caching allocator (reused from one load to the next:
// no fresh pages to fault in), and their XXH3-64, hashed chunk by chunk as each is read, while it
// is still in cache: one pass over the bytes instead of three (zeroing, reading, hashing). A
// std::runtime_error (the saved state is skipped) when the file cannot be read or its size is not
// the manifest's.
struct HashedFile {
  Tensor buffer;    // u8, the file's size when it was opened
  size_t size = 0;  // bytes read: less than the buffer when the file shrank meanwhile
  uint64_t xxh3 = 0;
  std::span<const uint8_t> bytes() const {
    return {static_cast<const uint8_t*>(buffer.data()), size};
  }
};

HashedFile read_hashed(const fs::path& path, int64_t expected_bytes) {
  // O_NONBLOCK: a FIFO without a writer is refused below instead of blocking the open.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    throw std::runtime_error(
        fmt::format("cannot open '{}': {}", path.string(), std::strerror(errno)));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw std::runtime_error(fmt::format("'{}' is not a regular file", path.string()));
  }
  if (static_cast<int64_t>(st.st_size) != expected_bytes) {  // before allocating for it
    ::close(fd);
    throw Damaged(fmt::format("{} has {} bytes, not {} (truncated?)", path.filename().string(),
                              st.st_size, expected_bytes));
  }
  HashedFile out;
  out.buffer = Tensor::empty({static_cast<int64_t>(st.st_size)}, DType::u8, Device::cpu());
  auto* data = static_cast<uint8_t*>(out.buffer.data());
  const std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(),
                                                                       &XXH3_freeState);
  XXH3_64bits_reset(state.get());
  constexpr size_t kChunk = size_t{1} << 20;  // stays in L2 between the read and the hash
  const auto total = static_cast<size_t>(st.st_size);
  while (out.size < total) {
    const ssize_t k = ::read(fd, data + out.size, std::min(kChunk, total - out.size));
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;
    XXH3_64bits_update(state.get(), data + out.size, static_cast<size_t>(k));
    out.size += static_cast<size_t>(k);
  }
  ::close(fd);
  out.xxh3 = XXH3_64bits_digest(state.get());
  return out;
}

// What one save writes, prepared on the calling thread (copies when asynchronous).
// Page-locked host memory for asynchronous snapshots of device tensors, reused across saves
// (at most one is in flight).
struct PinnedBuffer {
  memory::PinnedHostUpstream upstream;
  void* data = nullptr;
  size_t bytes = 0;
  ~PinnedBuffer() {
    if (data) upstream.deallocate(data, bytes);
  }
};

struct Snapshot {
  int64_t step = 0;
  StateDict tensors;  // "<component>/<key>": the live tensors, or host copies (asynchronous)
  NamedViews views;   // what is written, in order: host memory
  std::vector<Stream> copies_on;  // streams the device-to-pinned copies were queued on
  std::vector<std::shared_ptr<Event>> copies_done;  // recorded after them: the writer waits
  std::map<std::string, std::string> metadata;
  Progress progress;
};

struct FileRecord {
  int64_t bytes = 0;
  uint64_t hash = 0;
};

json progress_json(const Progress& p, int rank) {
  return {{"rank", rank},
          {"step", p.step},
          {"epoch", p.epoch},
          {"data_position", p.data_position},
          {"micro_step", p.micro_step}};
}

}  // namespace

// ---- TrainingState -------------------------------------------------------------------------

void TrainingState::add(Component c) {
  EMBER_CHECK(!c.name.empty() && c.name.find('/') == std::string::npos,
              "TrainingState: the name '{}' must be non-empty and without '/'", c.name);
  for (const Component& other : components_) {
    EMBER_CHECK(other.name != c.name, "TrainingState: '{}' is registered twice", c.name);
  }
  components_.push_back(std::move(c));
}

// Each Dropout's Philox seed and last finished step, saved as "@rng.<i>" (i64 [2], -1 for
// none) beside the parameters: '@' keeps the keys apart from parameter paths.
constexpr const char* kRngPrefix = "@rng.";

void TrainingState::add_module(std::string name, nn::Module& module) {
  auto dropouts = [&module] {
    std::vector<nn::Dropout*> out;
    module.for_each_module([&](nn::Module& m) {
      if (auto* d = dynamic_cast<nn::Dropout*>(&m)) out.push_back(d);
    });
    return out;
  };
  add(Component{
      std::move(name),
      [&module, dropouts] {
        StateDict d = module.state_dict();
        const auto ds = dropouts();
        for (size_t i = 0; i < ds.size(); ++i) {
          const auto finished = ds[i]->finished_step();
          d.insert(fmt::format("{}{}", kRngPrefix, i),
                   Tensor::from_vector<int64_t>({static_cast<int64_t>(ds[i]->seed()),
                                                 finished ? static_cast<int64_t>(*finished) : -1},
                                                {2}, Device::cpu()));
        }
        return d;
      },
      [&module, dropouts](const StateDict& given) {
        StateDict params;
        for (const auto& [key, t] : given) {
          if (!key.starts_with(kRngPrefix)) params.insert(key, t);
        }
        module.load_state_dict(params);
        const auto ds = dropouts();
        for (size_t i = 0; i < ds.size(); ++i) {
          const auto v = given.at(fmt::format("{}{}", kRngPrefix, i)).to_vector<int64_t>();
          ds[i]->set_finished_step(v[1] < 0 ? std::nullopt
                                            : std::optional<uint64_t>(static_cast<uint64_t>(v[1])));
        }
      },
      [dropouts](const StateDict& given) {
        std::vector<std::string> problems;
        const auto ds = dropouts();
        for (size_t i = 0; i < ds.size(); ++i) {
          const Tensor* t = given.find(fmt::format("{}{}", kRngPrefix, i));
          if (t == nullptr || t->dtype() != DType::i64 || t->numel() != 2)
            continue;  // shapes: elsewhere
          const auto v = t->to_vector<int64_t>();
          if (static_cast<uint64_t>(v[0]) != ds[i]->seed()) {
            problems.push_back(fmt::format(
                "dropout {} ({}) has seed {}, the saved state's has seed {} (the model was built "
                "with other seeds)",
                i, ds[i]->name(), ds[i]->seed(), v[0]));
          }
        }
        return problems;
      }});
}

void TrainingState::add_optimizer(std::string name, Optimizer& optimizer) {
  add(Component{
      std::move(name),
      // With the learning rate of each parameter group.
      [&optimizer] {
        StateDict d = optimizer.state_dict();
        std::vector<float> lrs;
        for (size_t g = 0; g < optimizer.param_groups(); ++g) lrs.push_back(optimizer.lr(g));
        d.insert("lr", Tensor::from_vector(lrs, {static_cast<int64_t>(lrs.size())}, Device::cpu()));
        return d;
      },
      [&optimizer](const StateDict& given) {
        const Tensor* lr = given.find("lr");
        const auto groups = static_cast<int64_t>(optimizer.param_groups());
        EMBER_CHECK(lr != nullptr && lr->dtype() == DType::f32 && lr->numel() == groups,
                    "the optimizer's 'lr' must be f32 [{}] (a learning rate per "
                    "parameter group){}",
                    groups,
                    lr == nullptr ? ", and it is missing" : ", not " + lr->view().describe());
        StateDict rest;
        for (const auto& [key, t] : given) {
          if (key != "lr") rest.insert(key, t);
        }
        optimizer.load_state_dict(rest);
        const std::vector<float> lrs = lr->to_vector<float>();
        for (size_t g = 0; g < lrs.size(); ++g) optimizer.set_lr(g, lrs[g]);
      },
      // Before anything loads: the learning rates (the rest is names, shapes and dtypes).
      [&optimizer](const StateDict& given) {
        std::vector<std::string> problems;
        const Tensor* lr = given.find("lr");
        const auto groups = static_cast<int64_t>(optimizer.param_groups());
        if (lr == nullptr || lr->dtype() != DType::f32 || lr->rank() != 1 ||
            lr->numel() != groups) {
          problems.push_back(fmt::format(
              "the optimizer's 'lr' must be f32 [{}] (a learning rate per parameter group){}",
              groups, lr == nullptr ? ", and it is missing" : ", not " + lr->view().describe()));
          return problems;
        }
        const std::vector<float> lrs = lr->to_vector<float>();
        for (size_t g = 0; g < lrs.size(); ++g) {
          if (!(std::isfinite(lrs[g]) && lrs[g] >= 0)) {
            problems.push_back(
                fmt::format("the optimizer's 'lr' of parameter group {} is {}, not a learning rate",
                            g, lrs[g]));
          }
        }
        return problems;
      }});
}

void TrainingState::add_progress(std::function<void(Progress&)> save,
                                 std::function<void(const Progress&)> load,
                                 std::function<std::vector<std::string>(const Progress&)> fit) {
  EMBER_CHECK(save && load, "TrainingState::add_progress: save and load are both needed");
  progress_hooks_.push_back({std::move(save), std::move(load), std::move(fit)});
}

void TrainingState::add_state(std::string name, std::function<StateDict()> save,
                              std::function<void(const StateDict&)> load,
                              std::function<std::vector<std::string>(const StateDict&)> fit) {
  EMBER_CHECK(save && load, "TrainingState::add_state('{}'): save and load are both needed", name);
  add(Component{std::move(name), std::move(save), std::move(load), nullptr, std::move(fit)});
}

// ---- TrainingStateStore --------------------------------------------------------------------

struct TrainingStateStore::Impl {
  StateStoreOptions options;
  SaveGroup group;
  fs::path dir;

  // The writer's lock on <dir>/.lock (rank 0), taken at the first save and held for this
  // TrainingStateStore's life: a second writer's save is an Error naming the holder.
  int lock_fd = -1;

  void take_writer_lock() {
    if (lock_fd >= 0 || group.rank != 0) return;
    const fs::path path = dir / ".lock";
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    EMBER_CHECK(fd >= 0, "TrainingStateStore: cannot open the lock file '{}': {}", path.string(),
                std::strerror(errno));
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int e = errno;
      char holder[256] = {};
      const ssize_t n = ::pread(fd, holder, sizeof(holder) - 1, 0);
      ::close(fd);
      EMBER_CHECK(
          e != EWOULDBLOCK,
          "TrainingStateStore: another writer is saving into '{}' ({}): one TrainingStateStore per "
          "directory; give this job its own directory",
          options.dir,
          n > 0 ? std::string(holder, static_cast<size_t>(n)) : std::string("unknown"));
      EMBER_THROW("TrainingStateStore: cannot lock '{}': {}", path.string(), std::strerror(e));
    }
    char host[128] = {};
    ::gethostname(host, sizeof(host) - 1);
    const std::string who = fmt::format("pid {} on {}", ::getpid(), host);
    if (::ftruncate(fd, 0) == 0) {
      [[maybe_unused]] const ssize_t written = ::pwrite(fd, who.data(), who.size(), 0);
    }
    lock_fd = fd;
  }

  // The save in flight (asynchronous).
  std::thread writer;
  std::exception_ptr writer_error;
  bool pending_commit = false;  // files written, the commit left to wait() (several ranks)
  Snapshot pending;
  std::vector<int64_t> pending_records;

  void warn(const std::string& text) const {
    if (options.warn) {
      options.warn(text);
    } else {
      std::fprintf(stderr, "ember: %s\n", text.c_str());
    }
  }

  std::vector<int64_t> gather(const std::vector<int64_t>& mine) const {
    if (group.world_size == 1) return mine;
    std::vector<int64_t> all = group.all_gather(mine);
    // A custom group's answer is checked before it is indexed: world_size entries of ours.
    EMBER_CHECK(
        all.size() == mine.size() * static_cast<size_t>(group.world_size),
        "TrainingStateStore: the group's all_gather returned {} values for {} ranks of {} each "
        "(expected {}): it must return every rank's values in rank order",
        all.size(), group.world_size, mine.size(),
        mine.size() * static_cast<size_t>(group.world_size));
    return all;
  }

  std::string name_of(int64_t step) const { return fmt::format("step-{:012d}", step); }
  fs::path tmp_of(int64_t step) const { return durable::temporary_path(dir / name_of(step)); }

  std::shared_ptr<PinnedBuffer> pinned;

  // What a save writes. Synchronous: the live tensors (device ones copied to the host). Async:
  // copies made now, at the step boundary: host tensors cloned; device tensors copied into
  // pinned memory on their own streams (queued: the host does not wait; the writer thread does).
  Snapshot snapshot(TrainingState& state, bool copy) {
    Snapshot s;
    s.step = state.progress.step;
    s.progress = state.progress;
    s.metadata = state.metadata;
    if (group.rank != 0) return s;  // rank 0 alone writes the replicated state
    for (const auto& c : state.components()) {
      for (const auto& [key, t] : c.save()) s.tensors.insert(c.name + "/" + key, t);
    }
    constexpr size_t kAlign = 64;
    size_t device_bytes = 0;
    for (const auto& [key, t] : s.tensors) {
      if (copy && !t.device().is_cpu()) device_bytes += (t.nbytes() + kAlign - 1) / kAlign * kAlign;
    }
    if (device_bytes > 0 && (!pinned || pinned->bytes < device_bytes)) {
      pinned.reset();
      auto buffer = std::make_shared<PinnedBuffer>();
      buffer->data = buffer->upstream.allocate(device_bytes);
      EMBER_CHECK(buffer->data != nullptr,
                  "TrainingStateStore: cannot allocate {} bytes of pinned host memory for an "
                  "asynchronous save",
                  device_bytes);
      buffer->bytes = device_bytes;
      pinned = buffer;
    }
    StateDict kept;
    size_t offset = 0;
    for (const auto& [key, t] : s.tensors) {
      if (!copy) {
        const Tensor host = t.to(Device::cpu());  // no copy for host tensors
        kept.insert(key, host);
        s.views.emplace_back(key, host.view());
      } else if (t.device().is_cpu()) {
        const Tensor clone = t.clone();
        kept.insert(key, clone);
        s.views.emplace_back(key, clone.view());
      } else {
        void* dst = static_cast<char*>(pinned->data) + offset;
        copy_bytes(dst, Device::cpu(), t.data(), t.device(), t.nbytes(), t.stream());
        if (std::find(s.copies_on.begin(), s.copies_on.end(), t.stream()) == s.copies_on.end()) {
          s.copies_on.push_back(t.stream());
        }
        s.views.emplace_back(key, TensorView{dst, t.dtype(), t.shape(), Device::cpu()});
        offset += (t.nbytes() + kAlign - 1) / kAlign * kAlign;
      }
    }
    for (const Stream& stream : s.copies_on) {
      auto done = std::make_shared<Event>(stream.device());
      done->record(stream);
      s.copies_done.push_back(std::move(done));
    }
    s.tensors = std::move(kept);  // the views point into these (and into `pinned`)
    return s;
  }

  // This rank's files into the temporary directory: {rank file bytes, hash, replicated bytes,
  // hash}.
  std::vector<int64_t> write_files(const Snapshot& s) {
    const fs::path tmp = tmp_of(s.step);
    durable::create_temporary_directory(tmp);
    const std::string progress = progress_json(s.progress, group.rank).dump(2);
    durable::write_file(tmp / rank_file(group.rank), progress, kWho, durable::WriteMode::in_place);
    std::vector<int64_t> records{static_cast<int64_t>(progress.size()),
                                 static_cast<int64_t>(checksum(progress)), 0, 0};
    if (group.rank == 0) {
      for (const auto& done : s.copies_done) done->synchronize();  // the pinned copies landed
      const WrittenFile f = write_safetensors((tmp / kReplicated).string(), s.views, s.metadata,
                                              durable::WriteMode::in_place);
      records[2] = f.bytes;
      records[3] = static_cast<int64_t>(f.xxh3);
    }
    return records;
  }

  // Every rank's records and outcome gathered (`failure`: why this rank could not write its
  // files, empty when it could); if every rank wrote its files, rank 0 writes the manifest and
  // renames the directory into place, and the ranks agree on that too. Any failure throws the
  // same Error on every rank, naming the first failing rank's cause: no rank waits for a commit
  // another rank abandoned, and every rank skips the same saved state.
  void commit(const Snapshot& s, const std::vector<int64_t>& records,
              const std::string& failure = {}) {
    std::vector<int64_t> mine = records;
    mine.resize(kRecords);
    append_failure(mine, failure);
    const std::vector<int64_t> gathered = gather(mine);
    const size_t stride = mine.size();
    std::vector<int64_t> all;
    for (int r = 0; r < group.world_size; ++r) {
      const auto* rec = &gathered[static_cast<size_t>(r) * stride];
      all.insert(all.end(), rec, rec + kRecords);
    }
    fail_if_any(s.step, gathered, stride, kRecords);
    std::string commit_failure;
    try {
      if (group.rank == 0) write_manifest_and_rename(s, all);
    } catch (const std::exception& e) {
      if (group.world_size == 1) throw;
      commit_failure = e.what();
    }
    if (group.world_size == 1) return;
    std::vector<int64_t> outcome;
    append_failure(outcome, commit_failure);
    const std::vector<int64_t> outcomes = gather(outcome);  // every rank: committed, or not
    fail_if_any(s.step, outcomes, outcome.size(), 0);
  }

  static constexpr size_t kRecords = 4;
  static constexpr size_t kFailureBytes = 240;  // of a failure's message, shared with every rank

  // A failure's message as int64 words after `out`: its length (0: none), then its bytes.
  static void append_failure(std::vector<int64_t>& out, const std::string& failure) {
    const std::string text = failure.substr(0, kFailureBytes);
    out.push_back(failure.empty() ? 0 : static_cast<int64_t>(std::max<size_t>(text.size(), 1)));
    std::vector<int64_t> words(kFailureBytes / sizeof(int64_t), 0);
    std::memcpy(words.data(), text.data(), text.size());
    out.insert(out.end(), words.begin(), words.end());
  }

  // Throws the first failing rank's message (every rank throws the same), after rank 0 has
  // removed the abandoned temporary directory (every rank is past writing into it).
  void fail_if_any(int64_t step, const std::vector<int64_t>& gathered, size_t stride,
                   size_t offset) const {
    for (int r = 0; r < group.world_size; ++r) {
      const int64_t* at = &gathered[static_cast<size_t>(r) * stride + offset];
      if (at[0] == 0) continue;
      const std::string message(reinterpret_cast<const char*>(at + 1),
                                static_cast<size_t>(std::min<int64_t>(at[0], kFailureBytes)));
      if (group.rank == 0) {
        std::error_code ignored;
        fs::remove_all(tmp_of(step), ignored);
      }
      EMBER_THROW("TrainingStateStore: saving step {} in '{}' failed on rank {} of {}: {}", step,
                  options.dir, r, group.world_size, message);
    }
  }

  // Rank 0: the manifest from every rank's records, then the directory into place. Every rank's
  // file must be there: a directory that is not shared (node-local paths) fails the save on
  // every rank now, not at resume.
  void write_manifest_and_rename(const Snapshot& s, const std::vector<int64_t>& all) {
    for (int r = 0; r < group.world_size; ++r) {
      const fs::path file = tmp_of(s.step) / rank_file(r);
      EMBER_CHECK(fs::is_regular_file(file),
                  "rank {} wrote its progress, but '{}' is not in '{}' of rank 0: is the "
                  "directory shared by every rank?",
                  r, rank_file(r), options.dir);
    }
    json files = json::object();
    files[kReplicated] = {{"bytes", all[2]}, {"xxh3", hex(static_cast<uint64_t>(all[3]))}};
    for (int r = 0; r < group.world_size; ++r) {
      const int64_t* rec = &all[static_cast<size_t>(r) * 4];
      files[rank_file(r)] = {{"bytes", rec[0]}, {"xxh3", hex(static_cast<uint64_t>(rec[1]))}};
    }
    json tensors = json::object();
    for (const auto& [key, v] : s.views) {
      std::vector<int64_t> shape(v.shape.dims().begin(), v.shape.dims().end());
      tensors[key] = {{"dtype", dtype_name(v.dtype)}, {"shape", shape}};
    }
    const json manifest = {{"format", "ember-checkpoint"},
                           {"format_version", kFormatVersion},
                           {"ember_version", kEmberVersion},
                           {"world_size", group.world_size},
                           {"step", s.step},
                           {"files", files},
                           {"tensors", tensors},
                           {"metadata", s.metadata}};
    const fs::path tmp = tmp_of(s.step);
    std::string text;
    try {
      text = manifest.dump(2);
    } catch (const json::exception& e) {
      EMBER_THROW("{}: the metadata must be valid UTF-8 text: {}", kWho, e.what());
    }
    durable::write_file(tmp / "manifest.json", text, kWho, durable::WriteMode::in_place);
    // The same step saved again replaces the old saved state in one atomic step: a crash leaves
    // one complete saved state of that step.
    durable::rename_into_place(tmp, dir / name_of(s.step), kWho);
    prune(s.step);
  }

  // Removes the temporary directories of earlier saves that never committed (a full disk, a
  // crash): on a small disk they would keep it full, and every later save would fail too. Rank 0
  // alone, and never the step being saved now (other ranks may be writing into it).
  void clear_stale_temporaries(int64_t saving) const {
    if (group.rank != 0) return;
    std::error_code error;
    for (const auto& entry : fs::directory_iterator(dir, error)) {
      const std::string n = entry.path().filename().string();
      if ((n.starts_with(durable::kTemporaryPrefix) && entry.path() != tmp_of(saving)) ||
          n.starts_with(".old-")) {
        std::error_code ignored;
        fs::remove_all(entry.path(), ignored);
      }
    }
  }

  // A failed save's temporary directory, removed at once when this rank is the only writer.
  void discard_failed(int64_t step) const {
    if (group.world_size != 1) return;  // other ranks may still write into it: the next save
    std::error_code ignored;            // clears it (clear_stale_temporaries)
    fs::remove_all(tmp_of(step), ignored);
  }

  // Saved states a resume skipped as corrupt (on some rank): they hold no keep_last slot.
  std::set<int64_t> known_corrupt;

  // Keeps the newest keep_last saved states that are not known to be corrupt, and always
  // `written`; known-corrupt ones go when a later saved state commits (resume never takes them).
  void prune(int64_t written) {
    known_corrupt.erase(written);  // written again just now: whole
    std::vector<int64_t> all = steps();
    std::erase(all, written);
    std::vector<int64_t> valid;
    for (int64_t step : all) {
      std::error_code ignored;
      if (known_corrupt.contains(step)) {
        fs::remove_all(dir / name_of(step), ignored);
        known_corrupt.erase(step);
      } else {
        valid.push_back(step);
      }
    }
    for (size_t i = static_cast<size_t>(options.keep_last - 1); i < valid.size(); ++i) {
      std::error_code ignored;
      fs::remove_all(dir / name_of(valid[i]), ignored);
    }
    // Leftovers of interrupted saves (their step is not in flight: we just committed).
    for (const auto& entry : fs::directory_iterator(dir)) {
      const std::string n = entry.path().filename().string();
      if (n.starts_with(durable::kTemporaryPrefix) || n.starts_with(".old-")) {
        std::error_code ignored;
        fs::remove_all(entry.path(), ignored);
      }
    }
  }

  std::vector<int64_t> steps() const {
    std::vector<int64_t> out;
    if (!fs::is_directory(dir)) return out;
    static const std::regex pattern("step-([0-9]{12})");
    for (const auto& entry : fs::directory_iterator(dir)) {
      std::smatch m;
      const std::string n = entry.path().filename().string();
      if (entry.is_directory() && std::regex_match(n, m, pattern)) out.push_back(std::stoll(m[1]));
    }
    std::sort(out.rbegin(), out.rend());
    return out;
  }

  // Waits for the writer thread. Several ranks: the commit, in which the ranks agree whether
  // every rank wrote its files (a failed writer takes part, so that no rank is left waiting).
  void join_writer() {
    if (writer.joinable()) writer.join();
    const std::exception_ptr e = std::exchange(writer_error, nullptr);
    if (pending_commit) {
      pending_commit = false;
      commit(pending, pending_records, e ? message_of(e) : std::string());
      return;
    }
    if (e) std::rethrow_exception(e);
  }

  static std::string message_of(const std::exception_ptr& e) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      return x.what()[0] != '\0' ? x.what() : "an exception without a message";
    } catch (...) {
      return "an exception that is not a std::exception";
    }
  }
};

TrainingStateStore::TrainingStateStore(StateStoreOptions options, SaveGroup group)
    : impl_(std::make_unique<Impl>()) {
  EMBER_CHECK(!options.dir.empty(), "TrainingStateStore: StateStoreOptions::dir is empty");
  EMBER_CHECK(options.keep_last >= 1, "TrainingStateStore: keep_last must be >= 1, not {}",
              options.keep_last);
  EMBER_CHECK(
      group.world_size >= 1 && group.rank >= 0 && group.rank < group.world_size &&
          (group.world_size == 1 || group.all_gather),
      "TrainingStateStore: rank {} of {} is not a valid group (several ranks need all_gather: "
      "dist::save_group)",
      group.rank, group.world_size);
  impl_->options = std::move(options);
  impl_->group = std::move(group);
  impl_->dir = impl_->options.dir;
  std::error_code error;
  EMBER_CHECK(
      !(fs::is_symlink(impl_->dir, error) && !fs::exists(impl_->dir, error)),
      "TrainingStateStore: '{}' is a symbolic link to '{}', which does not exist: create it, "
      "or point the link at a directory",
      impl_->options.dir, fs::read_symlink(impl_->dir, error).string());
  fs::create_directories(impl_->dir, error);
  EMBER_CHECK(fs::is_directory(impl_->dir),
              "TrainingStateStore: cannot create the directory '{}'{}", impl_->options.dir,
              error ? ": " + error.message() : "");
}

TrainingStateStore::~TrainingStateStore() {
  struct ReleaseLock {  // after the last save is done
    int fd;
    ~ReleaseLock() {
      if (fd >= 0) ::close(fd);  // closing the descriptor releases the flock
    }
  } release{impl_->lock_fd};
  try {
    impl_->join_writer();
  } catch (const std::exception& e) {
    impl_->warn(
        fmt::format("the last asynchronous save of the training state failed: {}", e.what()));
  }
}

void TrainingStateStore::save(TrainingState& state) {
  EMBER_CHECK(state.progress.step >= 0 && state.progress.step < 1'000'000'000'000,
              "TrainingStateStore::save: the step {} is outside [0, 10^12)", state.progress.step);
  for (const auto& hook : state.progress_hooks()) hook.save(state.progress);
  // At most one save in flight. Its failure is reported after this save is done (or started),
  // so that one failed save does not also lose the next.
  std::string earlier_failure;
  const int64_t earlier_step = impl_->pending.step;
  try {
    impl_->join_writer();
  } catch (const std::exception& e) {
    earlier_failure = e.what();
  }
  const std::vector<int64_t> committed = impl_->steps();
  if (!committed.empty() && committed.front() > state.progress.step && impl_->group.rank == 0) {
    impl_->warn(fmt::format(
        "saving step {} below the newest saved state in '{}' (step {}): resume takes the highest "
        "step",
        state.progress.step, impl_->options.dir, committed.front()));
  }
  const int64_t step = state.progress.step;
  const bool several = impl_->group.world_size > 1;
  // Before any file is written: the writer's lock, stale temporaries, the snapshot. With several
  // ranks a failure here (rank 0 cannot take the lock, a component's save() throws) goes into the
  // commit like a write failure: no rank is left waiting in the commit's gather.
  std::string early_failure;
  Snapshot early;
  early.step = step;
  auto prepare = [&](bool copy) -> Snapshot {
    try {
      impl_->take_writer_lock();
      impl_->clear_stale_temporaries(step);
      return impl_->snapshot(state, copy);
    } catch (const std::exception& e) {
      if (!several) throw;
      early_failure = e.what()[0] != '\0' ? e.what() : "an exception without a message";
      return early;
    }
  };
  try {
    if (!impl_->options.async) {
      const Snapshot s = prepare(/*copy=*/false);
      if (several) {
        // This rank's failure goes into the commit, where every rank learns of it and throws.
        std::vector<int64_t> records;
        std::string failure = early_failure;
        if (failure.empty()) {
          try {
            records = impl_->write_files(s);
          } catch (const std::exception& e) {
            failure = e.what()[0] != '\0' ? e.what() : "an exception without a message";
          }
        }
        impl_->commit(s, records, failure);
      } else {
        try {
          impl_->commit(s, impl_->write_files(s));
        } catch (...) {
          impl_->discard_failed(step);
          throw;
        }
      }
    } else {
      impl_->pending = prepare(/*copy=*/true);
      const bool alone = !several;
      impl_->pending_commit = several;
      if (!early_failure.empty()) {  // several ranks: the commit at the next call reports it
        impl_->pending_records.clear();
        impl_->writer_error = std::make_exception_ptr(Error(early_failure));
      } else {
        impl_->writer = std::thread([this, alone, step] {
          try {
            impl_->pending_records = impl_->write_files(impl_->pending);
            if (alone) impl_->commit(impl_->pending, impl_->pending_records);
          } catch (const fs::filesystem_error& e) {  // an ember::Error, as the synchronous path
            impl_->discard_failed(step);
            impl_->writer_error = std::make_exception_ptr(
                Error(fmt::format("TrainingStateStore: saving step {} in '{}' failed: {}", step,
                                  impl_->options.dir, e.what())));
          } catch (...) {
            impl_->discard_failed(step);
            impl_->writer_error = std::current_exception();
          }
        });
      }
    }
  } catch (const fs::filesystem_error& e) {
    EMBER_THROW("TrainingStateStore: saving step {} in '{}' failed: {}", step, impl_->options.dir,
                e.what());
  }
  EMBER_CHECK(
      earlier_failure.empty(),
      "TrainingStateStore: the earlier asynchronous save of step {} failed ({}); this save of "
      "step {} was {}",
      earlier_step, earlier_failure, state.progress.step,
      impl_->options.async ? "started" : "done");
}

void TrainingStateStore::wait() {
  impl_->join_writer();
}

std::vector<int64_t> TrainingStateStore::steps() const {
  return impl_->steps();
}

std::string TrainingStateStore::path_of(int64_t step) const {
  return (impl_->dir / impl_->name_of(step)).string();
}

namespace {

// One saved state as this rank reads it, verified.
struct Loaded {
  Safetensors replicated;
  Progress progress;
};

int64_t get_int(const json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_number_integer()) {
    throw Damaged(fmt::format("'{}' is missing or not an integer", key));
  }
  if (j[key].is_number_unsigned() &&
      j[key].get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    throw Damaged(fmt::format("'{}' is {}: out of range", key, j[key].get<uint64_t>()));
  }
  return j[key].get<int64_t>();
}

// Verifies `path` for `rank` (sizes and checksums of its files): the loaded state, or a
// std::runtime_error saying what is wrong (the caller skips it). A world size that differs is an
// ember::Error (the job does not fit the saved state).
// The manifest's tensor table against the tensor file's own header: the same names, dtypes and
// shapes, or a std::runtime_error naming the first difference.
void check_tensor_table(const json& manifest, const Safetensors& replicated) {
  if (!manifest.contains("tensors") || !manifest["tensors"].is_object()) {
    throw Damaged("its manifest has no tensor table");
  }
  const json& table = manifest["tensors"];
  if (table.size() != replicated.tensors.size()) {
    throw Damaged(fmt::format("its manifest lists {} tensors, its tensor file holds {}",
                              table.size(), replicated.tensors.size()));
  }
  for (const auto& [key, t] : replicated.tensors) {
    if (!table.contains(key) || !table[key].is_object()) {
      throw Damaged(fmt::format("'{}' is in its tensor file, not in its manifest", key));
    }
    const json& entry = table[key];
    const std::vector<int64_t> shape(t.shape().dims().begin(), t.shape().dims().end());
    if (entry.value("dtype", "") != dtype_name(t.dtype()) || !entry.contains("shape") ||
        entry["shape"] != json(shape)) {
      throw Damaged(fmt::format("'{}' is {} in its tensor file but {} in its manifest", key,
                                t.view().describe(), entry.dump()));
    }
  }
}

Loaded load_verified(const fs::path& path, int64_t step, int rank, int world_size) {
  json manifest;
  try {
    manifest = json::parse(read_file(path / "manifest.json"));
  } catch (const json::exception& e) {
    throw Damaged(fmt::format("its manifest is not valid JSON: {}", e.what()));
  }
  if (!manifest.is_object() || manifest.value("format", "") != "ember-checkpoint") {
    throw Damaged("its manifest is not an ember saved state's");
  }
  if (get_int(manifest, "format_version") != kFormatVersion) {
    throw std::runtime_error(fmt::format("format version {} is not {}",
                                         get_int(manifest, "format_version"), kFormatVersion));
  }
  const int64_t saved_world = get_int(manifest, "world_size");
  EMBER_CHECK(saved_world == world_size,
              "saved state '{}' was saved by {} ranks, but this job has {}: resume with the same "
              "world size",
              path.string(), saved_world, world_size);
  if (!manifest.contains("files") || !manifest["files"].is_object()) {
    throw Damaged("its manifest lists no files");
  }
  auto verified = [&](const std::string& file) {
    const json& files = manifest["files"];
    if (!files.contains(file)) throw Damaged(fmt::format("the manifest lacks {}", file));
    const json& rec = files[file];
    HashedFile read = read_hashed(path / file, get_int(rec, "bytes"));
    if (static_cast<int64_t>(read.size) != get_int(rec, "bytes")) {
      throw Damaged(fmt::format("{} has {} bytes, not {} (truncated?)", file, read.size,
                                get_int(rec, "bytes")));
    }
    if (!rec.contains("xxh3") || !rec["xxh3"].is_string() || hex(read.xxh3) != rec["xxh3"]) {
      throw Damaged(fmt::format("{}'s checksum does not match the manifest", file));
    }
    return read;
  };
  Loaded out;
  try {  // checksum-valid but undecodable (a writer's bug, a hand-made file): skipped too
    out.replicated =
        decode_safetensors(verified(kReplicated).bytes(), (path / kReplicated).string());
  } catch (const Error& e) {
    throw Damaged(e.message());
  }
  json progress;
  try {
    const HashedFile progress_file = verified(rank_file(rank));
    const std::span<const uint8_t> text = progress_file.bytes();
    progress = json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    throw Damaged(fmt::format("{} is not valid JSON: {}", rank_file(rank), e.what()));
  }
  out.progress.step = get_int(progress, "step");
  out.progress.epoch = get_int(progress, "epoch");
  out.progress.data_position = get_int(progress, "data_position");
  out.progress.micro_step = static_cast<uint64_t>(get_int(progress, "micro_step"));
  // The directory's step, the manifest's and this rank's progress agree: a step directory copied
  // or renamed is not a saved state of the step its name says.
  const int64_t manifest_step = get_int(manifest, "step");
  if (manifest_step != step || out.progress.step != step) {
    throw Damaged(
        fmt::format("its directory says step {}, but its manifest says {} and {} says {} (copied "
                    "or renamed?)",
                    step, manifest_step, rank_file(rank), out.progress.step));
  }
  check_tensor_table(manifest, out.replicated);
  return out;
}

}  // namespace

std::optional<int64_t> TrainingStateStore::resume(TrainingState& state) {
  impl_->join_writer();
  const std::vector<int64_t> candidates = impl_->steps();
  // Every rank sees the same directory; each verifies its files; the newest saved state that
  // verifies on every rank wins.
  const std::vector<int64_t> count = impl_->gather({static_cast<int64_t>(candidates.size())});
  for (int64_t c : count) {
    EMBER_CHECK(
        c == static_cast<int64_t>(candidates.size()),
        "TrainingStateStore::resume: the ranks see different saved states in '{}' ({} here): is "
        "the directory shared by every rank?",
        impl_->options.dir, candidates.size());
  }
  for (int64_t step : candidates) {
    const fs::path path = impl_->dir / impl_->name_of(step);
    std::optional<Loaded> loaded;
    std::string reason;
    bool damaged = false;
    try {
      loaded = load_verified(path, step, impl_->group.rank, impl_->group.world_size);
    } catch (const Error&) {
      throw;
    } catch (const Damaged& e) {
      reason = e.what();
      damaged = true;
    } catch (const std::exception& e) {
      reason = e.what();
    }
    if (!loaded) impl_->warn(fmt::format("skipping saved state '{}': {}", path.string(), reason));
    // 1: loaded here; 0: unreadable here (kept); 2: damaged here (it holds no keep_last slot).
    const std::vector<int64_t> outcome = impl_->gather({loaded ? 1 : (damaged ? 2 : 0)});
    if (std::find(outcome.begin(), outcome.end(), 2) != outcome.end()) {
      impl_->known_corrupt.insert(step);
    }
    if (std::find_if(outcome.begin(), outcome.end(), [](int64_t o) { return o != 1; }) !=
        outcome.end()) {
      continue;
    }

    // The saved state must fit everything registered before anything is loaded.
    // Every rank reaches the gather below, whatever it finds (a check that throws included): one
    // that left here alone would leave the others waiting in it.
    std::vector<std::pair<const TrainingState::Component*, StateDict>> parts;
    std::string problems;
    try {
      std::set<std::string> used;
      for (const auto& c : state.components()) {
        StateDict given;
        for (const auto& [key, t] : loaded->replicated.tensors) {
          if (key.starts_with(c.name + "/")) {
            given.insert(key.substr(c.name.size() + 1), t);
            used.insert(key);
          }
        }
        if (c.fit) {
          for (const std::string& p : c.fit(given))
            problems += fmt::format("\n  {}: {}", c.name, p);
          parts.emplace_back(&c, std::move(given));
          continue;
        }
        const StateDictMismatch m = compare_state_dicts(c.save(), given);
        if (!m.empty()) problems += fmt::format("\n  {}: {}", c.name, m.describe());
        if (m.empty() && c.check) {
          for (const std::string& p : c.check(given))
            problems += fmt::format("\n  {}: {}", c.name, p);
        }
        parts.emplace_back(&c, std::move(given));
      }
      for (const auto& [key, t] : loaded->replicated.tensors) {
        if (!used.contains(key)) problems += fmt::format("\n  unexpected entry '{}'", key);
      }
      for (const auto& hook : state.progress_hooks()) {
        if (!hook.fit) continue;
        for (const std::string& p : hook.fit(loaded->progress)) problems += "\n  " + p;
      }
    } catch (const std::exception& e) {
      problems += fmt::format("\n  {}", e.what());
    }
    // The progress is each rank's own: the ranks decide together, so that one rank's misfit
    // stops all of them (the others would load and then wait for it at the next collective).
    const std::vector<int64_t> fits = impl_->gather({problems.empty() ? 1 : 0});
    const auto misfit = std::find(fits.begin(), fits.end(), 0);
    if (problems.empty() && misfit != fits.end()) {
      problems = fmt::format("\n  rank {}'s part does not fit (its Error says why)",
                             misfit - fits.begin());
    }
    EMBER_CHECK(problems.empty(),
                "saved state '{}' does not fit this training state (nothing was loaded):{}",
                path.string(), problems);
    for (auto& [c, given] : parts) c->load(given);
    state.progress = loaded->progress;
    for (const auto& hook : state.progress_hooks()) hook.load(state.progress);
    state.metadata = loaded->replicated.metadata;
    return step;
  }
  return std::nullopt;
}

}  // namespace ember::train
