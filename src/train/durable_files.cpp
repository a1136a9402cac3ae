#include "train/durable_files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "ember/core/error.hpp"

namespace ember::train::durable {
namespace {

namespace fs = std::filesystem;

int create_for_writing(const fs::path& path, std::string_view who, int flags) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | flags, 0644);
  const int e = errno;
  EMBER_CHECK(fd >= 0, "{}: cannot create '{}': {}", who, path.string(), std::strerror(e));
  return fd;
}

// Writes `n` bytes at `fd`, counting them in `done`: 0, or the errno of the write that failed.
int write_all(int fd, const char* p, size_t n, int64_t& done) {
  while (n > 0) {
    const ssize_t k = ::write(fd, p, std::min<size_t>(n, size_t{1} << 30));
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return k < 0 && errno != 0 ? errno : EIO;  // 0 bytes written: no progress
    p += k;
    n -= static_cast<size_t>(k);
    done += k;
  }
  return 0;
}

// fsyncs and closes `fd`.
void sync_and_close(int fd, const fs::path& path, std::string_view who) {
  // EINVAL or EROFS on a file that is not a regular one (a pipe, /dev/null): nothing to wait for.
  bool synced = ::fsync(fd) == 0;
  const int e = errno;
  struct stat st {};
  if (!synced && (e == EINVAL || e == EROFS) && ::fstat(fd, &st) == 0 && !S_ISREG(st.st_mode)) {
    synced = true;
  }
  ::close(fd);
  EMBER_CHECK(synced, "{}: fsync of '{}' failed: {}", who, path.string(), std::strerror(e));
}

fs::path directory_of(const fs::path& file) {
  return file.has_parent_path() ? file.parent_path() : fs::path(".");
}

// fsyncs the directory `dir`: 0, or the errno of its open (`opened` false) or of its fsync.
int sync_directory(const fs::path& dir, bool& opened) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  opened = fd >= 0;
  if (!opened) return errno;
  const int e = ::fsync(fd) == 0 ? 0 : errno;
  ::close(fd);
  return e;
}

}  // namespace

FileWriter::FileWriter(const fs::path& path, std::string_view who, WriteMode mode)
    : path_(path), target_(path), who_(who) {
  EMBER_CHECK(!path.empty() && path.has_filename(), "{}: '{}' does not name a file", who,
              path.string());
  std::error_code error;
  const fs::file_status status = fs::status(path, error);  // follows symlinks
  EMBER_CHECK(!fs::is_directory(status), "{}: '{}' is a directory", who, path.string());
  // Written in place: an existing file that is not a regular one (a device, a FIFO), and
  // anything under /dev or /proc (/dev/stdout is a link to whatever stdout is, a file too).
  // Else a symlink is followed, also one whose target does not exist yet: its target is
  // replaced (or created) and the link stays.
  const std::string given = path.string();
  const bool in_place = mode == WriteMode::in_place || given.starts_with("/dev/") ||
                        given.starts_with("/proc/") ||
                        (fs::exists(status) && !fs::is_regular_file(status));
  if (!in_place && fs::is_symlink(fs::symlink_status(path, error))) {
    target_ = final_target(path);
    EMBER_CHECK(!fs::is_symlink(fs::symlink_status(target_, error)),
                "{}: cannot write '{}': too many levels of symbolic links", who, path.string());
  }
  if (in_place) {
    fd_ = create_for_writing(target_, who, O_TRUNC);
    return;
  }
  // Unnamed first (O_TMPFILE, where the file system has it and /proc/self/fd can name it for
  // linkat): a writer killed before sync() leaves nothing behind. sync() names it.
  if (::access("/proc/self/fd", X_OK) == 0) {
    fd_ = ::open(directory_of(target_).c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC,
                 0644);  // read: name_unnamed()
    unnamed_ = fd_ >= 0;
    if (unnamed_) return;
  }
  fd_ = open_named_temporary();  // else named from the start
}

int FileWriter::open_named_temporary() {
  // A fresh name each try: O_EXCL never opens another writer's temporary or a planted link.
  for (int tries = 0;; ++tries) {
    temporary_ = temporary_file_path(target_);
    const int fd =
        ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    const int e = errno;
    if (fd >= 0) return fd;
    if (e != EEXIST || tries >= 8) {
      const std::string name = std::exchange(temporary_, {}).string();
      EMBER_THROW("{}: cannot write '{}' (as its temporary '{}'): {}", who_, path_.string(), name,
                  std::strerror(e));
    }
  }
}

FileWriter::~FileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!temporary_.empty()) ::unlink(temporary_.c_str());
}

void FileWriter::write(const void* data, size_t n) {
  EMBER_CHECK(fd_ >= 0, "{}: '{}' is already {}", who_, path_.string(),
              synced_ ? "synced" : "finished");
  const int e = write_all(fd_, static_cast<const char*>(data), n, written_);
  if (e != 0) {
    ::close(std::exchange(fd_, -1));
    EMBER_THROW("{}: writing '{}' failed after {} bytes: {}", who_, path_.string(), written_,
                std::strerror(e));
  }
}

void FileWriter::finish() {
  sync();
  commit();
}

void FileWriter::sync() {
  EMBER_CHECK(fd_ >= 0, "{}: '{}' is already {}", who_, path_.string(),
              synced_ ? "synced" : "finished");
  if (unnamed_) name_unnamed();
  sync_and_close(std::exchange(fd_, -1), path_, who_);
  synced_ = true;
}

void FileWriter::name_unnamed() {
  unnamed_ = false;
  const std::string self = fmt::format("/proc/self/fd/{}", fd_);
  int link_error = 0;
  for (int tries = 0; temporary_.empty(); ++tries) {
    const fs::path name = temporary_file_path(target_);
    if (::linkat(AT_FDCWD, self.c_str(), AT_FDCWD, name.c_str(), AT_SYMLINK_FOLLOW) == 0) {
      temporary_ = name;
    } else if (link_error = errno; link_error != EEXIST || tries >= 8) {
      break;
    }
  }
  if (!temporary_.empty()) return;
  // Only where linkat is refused (a sandbox that does not allow it) are the bytes copied to a
  // named temporary; a full disk or an I/O error is an Error as it is.
  const bool refused = link_error == EPERM || link_error == EACCES || link_error == ENOSYS ||
                       link_error == EOPNOTSUPP || link_error == EXDEV || link_error == ENOENT;
  if (!refused) {
    ::close(std::exchange(fd_, -1));
    EMBER_THROW("{}: cannot write '{}' (naming its temporary): {}", who_, path_.string(),
                std::strerror(link_error));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } unnamed{std::exchange(fd_, -1)};
  fd_ = open_named_temporary();
  std::vector<char> buffer(size_t{1} << 20);
  int64_t copied = 0;
  for (off_t at = 0;;) {
    const ssize_t n = ::pread(unnamed.fd, buffer.data(), buffer.size(), at);
    if (n < 0 && errno == EINTR) continue;
    const int e = n < 0 ? errno : write_all(fd_, buffer.data(), static_cast<size_t>(n), copied);
    if (e != 0) {
      ::close(std::exchange(fd_, -1));  // a partial copy is never synced (the destructor unlinks)
      EMBER_THROW("{}: writing '{}' failed after {} bytes: {}", who_, path_.string(), copied,
                  std::strerror(e));
    }
    if (n == 0) break;
    at += n;
  }
}

void FileWriter::commit() {
  EMBER_CHECK(synced_, "{}: '{}' is {}", who_, path_.string(),
              fd_ >= 0 ? "not synced yet: sync() before commit()" : "already finished");
  synced_ = false;
  if (temporary_.empty()) return;
  const bool renamed = ::rename(temporary_.c_str(), target_.c_str()) == 0;
  const int e = errno;
  EMBER_CHECK(renamed, "{}: cannot replace '{}': {}", who_, path_.string(), std::strerror(e));
  temporary_.clear();
  // The rename on the disk. File systems without directory fsync (some FUSE, 9p) say EINVAL or
  // ENOTSUP, and a directory we cannot open is not ours to sync: the file is in place all the same.
  const fs::path dir = directory_of(target_);
  bool opened = false;
  const int sync_error = sync_directory(dir, opened);
  EMBER_CHECK(!opened || sync_error == 0 || sync_error == EINVAL || sync_error == ENOTSUP,
              "{}: '{}' was written, but the fsync of its directory '{}' failed: {}", who_,
              path_.string(), dir.string(), std::strerror(sync_error));
}

void write_file(const fs::path& path, std::string_view bytes, std::string_view who,
                WriteMode mode) {
  FileWriter file(path, who, mode);
  file.write(bytes.data(), bytes.size());
  file.finish();
}

void fsync_directory(const fs::path& dir, std::string_view who) {
  bool opened = false;
  const int e = sync_directory(dir, opened);
  EMBER_CHECK(opened, "{}: cannot open directory '{}': {}", who, dir.string(), std::strerror(e));
  EMBER_CHECK(e == 0, "{}: fsync of directory '{}' failed: {}", who, dir.string(),
              std::strerror(e));
}

fs::path final_target(const fs::path& path) {
  std::error_code error;
  fs::path p = fs::absolute(path, error);
  if (error) p = path;
  for (int hops = 0; hops < 40 && fs::is_symlink(fs::symlink_status(p, error)); ++hops) {
    const fs::path to = fs::read_symlink(p, error);
    if (error) break;
    p = to.is_absolute() ? to : p.parent_path() / to;
  }
  // The directory as the kernel resolves it (".." after a symlink included); the last component
  // is not a link. A directory that does not resolve is left as it is: opening there fails as
  // the kernel's open would.
  const fs::path dir = fs::canonical(p.parent_path(), error);
  return error ? p : dir / p.filename();
}

fs::path temporary_path(const fs::path& final_path) {
  return final_path.parent_path() /
         (std::string(kTemporaryPrefix) + final_path.filename().string());
}

fs::path temporary_file_path(const fs::path& final_path) {
  thread_local std::mt19937_64 random(std::random_device{}());
  return final_path.parent_path() /
         fmt::format("{}{}.{:016x}", kPartialPrefix, final_path.filename().string(), random());
}

void create_temporary_directory(const fs::path& tmp) {
  fs::create_directories(tmp);
}

void rename_into_place(const fs::path& tmp, const fs::path& final_path, std::string_view who) {
  fsync_directory(tmp, who);
  const fs::path parent = directory_of(final_path);
  if (fs::exists(final_path)) {
    // Replacing: swap the two directories in one atomic step, so that a crash leaves one whole
    // directory at `final_path`, then remove the old one.
    EMBER_CHECK(
        ::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, final_path.c_str(), RENAME_EXCHANGE) == 0,
        "{}: cannot replace '{}': {}", who, final_path.string(), std::strerror(errno));
    fsync_directory(parent, who);
    fs::remove_all(tmp);
  } else {
    fs::rename(tmp, final_path);
    fsync_directory(parent, who);
  }
}

}  // namespace ember::train::durable
