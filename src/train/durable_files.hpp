// Durable file I/O, shared by training_state_store.cpp (saved training states) and
// safetensors.cpp: files written and fsynced before they are relied on, and directories written
// under a temporary name, fsynced, then renamed (or exchanged) into place with their parent
// fsynced, so that a crash at any moment leaves either the old or the new one whole.
//
// Failures are ember::Errors whose messages begin with `who` (the caller's name for itself in
// messages, e.g. "safetensors" or "saved state"), but for create_temporary_directory's and
// rename_into_place's std::filesystem calls, which throw std::filesystem::filesystem_error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace ember::train::durable {

// How a FileWriter puts its bytes at `path`.
enum class WriteMode {
  // The file appears at `path` only whole: written as a temporary beside it
  // (temporary_file_path), fsynced, renamed over `path`, and the directory fsynced. A failed or
  // interrupted write never destroys the file it would replace. The temporary is unnamed while
  // it is written (O_TMPFILE) and named only by sync(), so a writer killed before then leaves
  // nothing behind; where the file system has no O_TMPFILE or /proc is not mounted, it is named
  // from the start, and a kill leaves it.
  // A symlink is followed, also one whose target does not exist yet (final_target): its target
  // is replaced or created, and the link stays. An existing `path` that is not a regular file (a
  // device, a FIFO) and anything under /dev or /proc (/dev/stdout) are written in place, as
  // in_place.
  replace,
  // Created or truncated at `path` itself and fsynced: for files in a directory that is itself
  // renamed into place when complete (a saved state's), where a rename per file adds nothing.
  in_place,
};

// A file written in pieces (see WriteMode), finished by finish(). Destroyed without finish() (a
// failure meanwhile), it is closed unsynced and a temporary is removed.
class FileWriter {
 public:
  FileWriter(const std::filesystem::path& path, std::string_view who,
             WriteMode mode = WriteMode::replace);
  ~FileWriter();
  FileWriter(const FileWriter&) = delete;
  FileWriter& operator=(const FileWriter&) = delete;

  // Appends `n` bytes (short writes and EINTR retried).
  void write(const void* data, size_t n);
  // fsyncs the file (and renames it into place): when this returns, it is on the disk at `path`.
  // The same as sync() then commit().
  void finish();
  // The two halves of finish(), for files that replace their old versions together (a model's
  // weights and its config.json): sync() each, then commit() each, so that a failed write (a full
  // disk) replaces none of them. sync() fsyncs and closes the file, in replace mode still at its
  // temporary; commit() renames it into place and fsyncs the directory.
  void sync();
  void commit();
  int64_t bytes_written() const { return written_; }

 private:
  // Gives the unnamed temporary its name (linkat through /proc/self/fd), or copies it to a named
  // one where linkat is refused.
  void name_unnamed();
  // Creates a fresh named temporary beside the target (temporary_) and returns its fd.
  int open_named_temporary();

  std::filesystem::path path_;       // as given, for messages
  std::filesystem::path target_;     // where the bytes go: path_, a symlink resolved
  std::filesystem::path temporary_;  // empty when written in place or still unnamed
  std::string who_;
  int fd_ = -1;
  int64_t written_ = 0;
  bool synced_ = false;
  bool unnamed_ = false;  // an O_TMPFILE not linked yet
};

// Writes `bytes` to `path` (as FileWriter in `mode`) and fsyncs it: when this returns, the file
// is on the disk.
void write_file(const std::filesystem::path& path, std::string_view bytes, std::string_view who,
                WriteMode mode = WriteMode::replace);

// The file that writing `path` writes: its symlinks followed (at most 40), also to a target that
// does not exist yet; absolute, in its directory's canonical form where that directory exists.
std::filesystem::path final_target(const std::filesystem::path& path);

// fsyncs a directory: the entries created, renamed or removed in it are on the disk.
void fsync_directory(const std::filesystem::path& dir, std::string_view who);

// What the names of temporaries begin with: a directory `<parent>/<name>` is written as
// `<parent>/.tmp-<name>` first.
inline constexpr std::string_view kTemporaryPrefix = ".tmp-";
// The temporary that the directory `final_path` is written as before it is renamed into place.
std::filesystem::path temporary_path(const std::filesystem::path& final_path);
// The temporary a FileWriter writes `final_path` as: `.partial-<name>.<random>` beside it (its
// own prefix: a store's cleanup of `.tmp-` entries never removes it; random: writers of one path,
// on any host, never share one).
inline constexpr std::string_view kPartialPrefix = ".partial-";
std::filesystem::path temporary_file_path(const std::filesystem::path& final_path);
// Creates the temporary directory `tmp` (and any missing parents); an existing one is kept.
void create_temporary_directory(const std::filesystem::path& tmp);

// Commits the directory `tmp`, whose files are written and fsynced: fsyncs `tmp`, renames it to
// `final_path` and fsyncs the parent. When `final_path` exists, the two are exchanged in one
// atomic step (renameat2 RENAME_EXCHANGE), so that a crash leaves one of them whole there, and
// the old one, now at `tmp`, is removed after the parent's fsync.
void rename_into_place(const std::filesystem::path& tmp, const std::filesystem::path& final_path,
                       std::string_view who);

}  // namespace ember::train::durable
