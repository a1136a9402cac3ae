#include "ember/memory/trace.hpp"

#include <sys/wait.h>
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <sstream>
#include <unordered_set>

#include "ember/core/error.hpp"

namespace ember::memory {
namespace {

bool ends_with_gz(const std::string& path) {
  return path.size() >= 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
}

// Single-quotes `path` for /bin/sh.
std::string shell_quote(const std::string& path) {
  std::string quoted = "'";
  for (char c : path) {
    if (c == '\'')
      quoted += "'\\''";
    else
      quoted += c;
  }
  return quoted + "'";
}

// The whole file, decompressed through `gzip -dc` when it ends in ".gz".
std::string read_file_text(const std::string& path) {
  std::ifstream probe(path, std::ios::binary);
  EMBER_CHECK(probe.good(), "cannot open allocation trace '{}': {}; check the path", path,
              std::strerror(errno));
  if (!ends_with_gz(path)) {
    std::ostringstream text;
    text << probe.rdbuf();
    return std::move(text).str();
  }
  probe.close();
  // No zlib dependency: gzip does the decompression.
  const std::string command = "gzip -dc -- " + shell_quote(path) + " 2>&1";
  std::FILE* pipe = ::popen(command.c_str(), "r");
  EMBER_CHECK(pipe != nullptr, "cannot run '{}' to read '{}': {}; is gzip installed?", command,
              path, std::strerror(errno));
  std::string text;
  char buffer[1 << 16];
  size_t got = 0;
  while ((got = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) text.append(buffer, got);
  const int status = ::pclose(pipe);
  if (status != 0) {
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    EMBER_THROW(
        "'{}' failed (exit code {}) reading allocation trace '{}': {}; expected a gzip "
        "file, or name the file without '.gz' if it is plain text",
        command, code, path, text.substr(0, 200));
  }
  return text;
}

const char* kind_name(TraceEvent::Kind kind) {
  switch (kind) {
    case TraceEvent::allocate:
      return "a";
    case TraceEvent::free:
      return "f";
    case TraceEvent::record_stream:
      return "r";
  }
  return "?";
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
                  "allocation trace of version 1 (see shared/traces/FORMAT.md)",
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
    const std::string command = "gzip -c > " + shell_quote(path);
    errno = 0;
    file_ = ::popen(command.c_str(), "w");
    piped_ = true;
    EMBER_CHECK(file_ != nullptr, "cannot run '{}' to write allocation trace '{}': {}", command,
                path, std::strerror(errno));
  } else {
    file_ = std::fopen(path.c_str(), "w");
    EMBER_CHECK(file_ != nullptr,
                "cannot create allocation trace '{}': {}; check that the directory exists "
                "and is writable",
                path, std::strerror(errno));
  }
  std::fprintf(file_, "%.*s\n", static_cast<int>(kTraceHeader.size()), kTraceHeader.data());
  while (!comment.empty()) {
    size_t end = comment.find('\n');
    if (end == std::string_view::npos) end = comment.size();
    const std::string_view line = comment.substr(0, end);
    std::fprintf(file_, "# %.*s\n", static_cast<int>(line.size()), line.data());
    comment.remove_prefix(std::min(comment.size(), end + 1));
  }
}

TraceWriter::~TraceWriter() {
  if (file_ == nullptr) return;
  std::fflush(file_);
  if (piped_)
    ::pclose(file_);
  else
    std::fclose(file_);
}

void TraceWriter::put_line(const char* line, int length) {
  std::lock_guard lock(mutex_);
  std::fwrite(line, 1, static_cast<size_t>(length), file_);
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
  std::fflush(file_);
}

uint64_t TraceWriter::events_written() const {
  std::lock_guard lock(mutex_);
  return events_;
}

}  // namespace ember::memory
