#include "ember/memory/trace.hpp"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <unordered_set>

#include "ember/core/enum_name.hpp"
#include "ember/core/error.hpp"

namespace ember::memory {
namespace {

bool ends_with_gz(const std::string& path) {
  return path.size() >= 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
}

// The whole file, decompressed with zlib when it ends in ".gz". Only regular files: a FIFO
// or a device (/dev/zero) would block or never end.
std::string read_file_text(const std::string& path) {
  struct stat info {};
  EMBER_CHECK(::stat(path.c_str(), &info) == 0,
              "cannot open allocation trace '{}': {}; check the path", path, std::strerror(errno));
  EMBER_CHECK(S_ISREG(info.st_mode),
              "allocation trace '{}' is not a regular file (a directory, FIFO or device); "
              "expected a trace file",
              path);
  if (!ends_with_gz(path)) {
    std::ifstream in(path, std::ios::binary);
    EMBER_CHECK(in.good(), "cannot open allocation trace '{}': {}; check the path", path,
                std::strerror(errno));
    std::ostringstream text;
    text << in.rdbuf();
    return std::move(text).str();
  }
  gzFile gz = ::gzopen(path.c_str(), "rb");
  EMBER_CHECK(gz != nullptr, "cannot open allocation trace '{}': {}; check the path", path,
              std::strerror(errno));
  std::string text;
  char buffer[1 << 16];
  int got = 0;
  while ((got = ::gzread(gz, buffer, sizeof buffer)) > 0)
    text.append(buffer, static_cast<size_t>(got));
  // A truncated stream ends with 0 and Z_BUF_ERROR ("unexpected end of file").
  int code = Z_OK;
  const std::string reason = ::gzerror(gz, &code);
  ::gzclose(gz);
  EMBER_CHECK(got == 0 && (code == Z_OK || code == Z_STREAM_END),
              "cannot decompress allocation trace '{}': {}; expected a whole gzip file, or name "
              "the file without '.gz' if it is plain text",
              path, reason);
  return text;
}

const char* kind_name(TraceEvent::Kind kind) {
  static constexpr const char* kNames[] = {"a", "f", "r"};
  static_assert(std::size(kNames) == static_cast<size_t>(TraceEvent::record_stream) + 1);
  return enum_name(kind, kNames);
}

}  // namespace

std::vector<TraceEvent> parse_trace(std::string_view text, const std::string& name) {
  std::vector<TraceEvent> events;
  std::unordered_set<uint64_t> live;
  size_t line_number = 0;
  size_t pos = 0;
  std::vector<std::string_view> fields;
  while (pos < text.size() || line_number == 0) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line_number == 1) {
      EMBER_CHECK(line == kTraceHeader,
                  "{}:1: expected the header line '{}', found '{}'; this is not an ember "
                  "allocation trace of version 1 (see docs/allocation_traces.md)",
                  name, kTraceHeader, line.substr(0, 80));
      continue;
    }
    if (line.empty() || line.front() == '#') continue;

    fields.clear();
    for (size_t at = 0; at <= line.size();) {
      size_t space = line.find(' ', at);
      if (space == std::string_view::npos) space = line.size();
      fields.push_back(line.substr(at, space - at));
      at = space + 1;
    }
    auto number = [&](size_t index, const char* what) {
      const std::string_view field = fields[index];
      uint64_t value = 0;
      const auto [ptr, ec] = std::from_chars(field.data(), field.data() + field.size(), value);
      EMBER_CHECK(!field.empty() && ec == std::errc() && ptr == field.data() + field.size(),
                  "{}:{}: expected {} as an unsigned decimal integer, found '{}' in line '{}'; "
                  "fields are separated by single spaces",
                  name, line_number, what, field, line);
      return value;
    };
    auto expect_fields = [&](size_t count, const char* form) {
      EMBER_CHECK(fields.size() == count,
                  "{}:{}: expected {} fields ('{}'), found {} in line '{}'; fields are "
                  "separated by single spaces",
                  name, line_number, count, form, fields.size(), line);
    };

    TraceEvent event;
    const std::string_view kind = fields[0];
    if (kind == "a") {
      expect_fields(4, "a ID BYTES STREAM");
      event = {TraceEvent::allocate, number(1, "ID"), number(2, "BYTES"), number(3, "STREAM")};
      EMBER_CHECK(event.bytes > 0,
                  "{}:{}: expected a positive BYTES, found 0 in line '{}'; zero-byte "
                  "allocations must not appear in a trace",
                  name, line_number, line);
      EMBER_CHECK(live.insert(event.id).second,
                  "{}:{}: allocation ID {} is already live (allocated and not yet freed); "
                  "expected an 'f {}' before it is allocated again",
                  name, line_number, event.id, event.id);
    } else if (kind == "f") {
      expect_fields(2, "f ID");
      event = {TraceEvent::free, number(1, "ID"), 0, 0};
      EMBER_CHECK(live.erase(event.id) == 1,
                  "{}:{}: free of allocation ID {}, which is not live (never allocated, or "
                  "already freed); expected an 'a {} BYTES STREAM' line before it",
                  name, line_number, event.id, event.id);
    } else if (kind == "r") {
      expect_fields(3, "r ID STREAM");
      event = {TraceEvent::record_stream, number(1, "ID"), 0, number(2, "STREAM")};
      EMBER_CHECK(live.count(event.id) == 1,
                  "{}:{}: record_stream of allocation ID {}, which is not live; expected it "
                  "between 'a {} ...' and 'f {}'",
                  name, line_number, event.id, event.id, event.id);
    } else {
      EMBER_THROW(
          "{}:{}: unknown event '{}' in line '{}'; expected 'a' (allocate), 'f' "
          "(free), 'r' (record_stream) or a '#' comment",
          name, line_number, kind, line.substr(0, 80));
    }
    events.push_back(event);
  }
  return events;
}

std::vector<TraceEvent> read_trace(const std::string& path) {
  const std::string text = read_file_text(path);
  EMBER_CHECK(!text.empty(), "allocation trace '{}' is empty; expected the header line '{}' first",
              path, kTraceHeader);
  return parse_trace(text, path);
}

TraceWriter::TraceWriter(const std::string& path, std::string_view comment) : path_(path) {
  if (ends_with_gz(path)) {
    errno = 0;
    gz_ = ::gzopen(path.c_str(), "wb");
    EMBER_CHECK(gz_ != nullptr,
                "cannot create allocation trace '{}': {}; check that the directory exists "
                "and is writable",
                path, errno != 0 ? std::strerror(errno) : "zlib could not open it");
  } else {
    file_ = std::fopen(path.c_str(), "w");
    EMBER_CHECK(file_ != nullptr,
                "cannot create allocation trace '{}': {}; check that the directory exists "
                "and is writable",
                path, std::strerror(errno));
  }
  std::string head = std::string(kTraceHeader) + "\n";
  while (!comment.empty()) {
    size_t end = comment.find('\n');
    if (end == std::string_view::npos) end = comment.size();
    head += "# ";
    head += comment.substr(0, end);
    head += '\n';
    comment.remove_prefix(std::min(comment.size(), end + 1));
  }
  std::lock_guard lock(mutex_);
  put_bytes(head.data(), head.size());
}

TraceWriter::~TraceWriter() {
  std::lock_guard lock(mutex_);
  if (file_ != nullptr && (std::fclose(file_) != 0) && error_.empty())
    error_ = std::strerror(errno);
  if (gz_ != nullptr && ::gzclose(gz_) != Z_OK && error_.empty())
    error_ = "zlib could not finish the file";
  // A destructor cannot throw: the failure is reported, not lost.
  if (!error_.empty()) {
    std::fprintf(stderr, "ember: allocation trace '%s' is incomplete: %s\n", path_.c_str(),
                 error_.c_str());
  }
}

void TraceWriter::put_bytes(const char* bytes, size_t length) {
  if (!error_.empty()) return;  // the first failure is kept; later lines would be garbage
  const bool ok = gz_ != nullptr ? ::gzwrite(gz_, bytes, static_cast<unsigned>(length)) ==
                                       static_cast<int>(length)
                                 : std::fwrite(bytes, 1, length, file_) == length;
  if (!ok) {
    int code = Z_OK;
    error_ = gz_ != nullptr ? std::string(::gzerror(gz_, &code)) : std::strerror(errno);
    if (error_.empty()) error_ = "write failed";
  }
}

void TraceWriter::put_line(const char* line, int length) {
  std::lock_guard lock(mutex_);
  put_bytes(line, static_cast<size_t>(length));
  ++events_;
}

void TraceWriter::allocate(uint64_t id, uint64_t bytes, uint64_t stream) {
  write({TraceEvent::allocate, id, bytes, stream});
}
void TraceWriter::free(uint64_t id) {
  write({TraceEvent::free, id, 0, 0});
}
void TraceWriter::record_stream(uint64_t id, uint64_t stream) {
  write({TraceEvent::record_stream, id, 0, stream});
}

void TraceWriter::write(const TraceEvent& event) {
  char line[96];
  int length = 0;
  const auto id = static_cast<unsigned long long>(event.id);
  const auto stream = static_cast<unsigned long long>(event.stream);
  switch (event.kind) {
    case TraceEvent::allocate:
      length = std::snprintf(line, sizeof line, "%s %llu %llu %llu\n", kind_name(event.kind), id,
                             static_cast<unsigned long long>(event.bytes), stream);
      break;
    case TraceEvent::free:
      length = std::snprintf(line, sizeof line, "%s %llu\n", kind_name(event.kind), id);
      break;
    case TraceEvent::record_stream:
      length =
          std::snprintf(line, sizeof line, "%s %llu %llu\n", kind_name(event.kind), id, stream);
      break;
  }
  put_line(line, length);
}

void TraceWriter::flush() {
  std::lock_guard lock(mutex_);
  if (error_.empty() && gz_ != nullptr) {
    // A whole gzip member (with its trailer) up to here, then a new member appended: the file
    // is readable now (zlib reads concatenated members as one stream), even if the run dies.
    const bool closed = ::gzclose(gz_) == Z_OK;
    gz_ = ::gzopen(path_.c_str(), "ab");
    if (!closed || gz_ == nullptr) error_ = "zlib could not finish and reopen the file";
  } else if (error_.empty() && std::fflush(file_) != 0) {
    error_ = std::strerror(errno);
  }
  EMBER_CHECK(error_.empty(), "allocation trace '{}': writing failed: {}; the trace is incomplete",
              path_, error_);
}

uint64_t TraceWriter::events_written() const {
  std::lock_guard lock(mutex_);
  return events_;
}

}  // namespace ember::memory
