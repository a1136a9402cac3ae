// Allocation traces: every allocate, free and record_stream a program made, in
// the text format of docs/allocation_traces.md (version 1):
//
//   # ember-alloc-trace v1
//   # free-form comment lines
//   a ID BYTES STREAM     allocate BYTES (as asked, before rounding) on STREAM
//   f ID                  free the allocation ID
//   r ID STREAM           the allocation ID is also used on STREAM
//
// read_trace parses and validates a file; TraceWriter writes one. replay.hpp
// replays a trace through a CachingAllocator.
#pragma once

#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

struct gzFile_s;  // zlib's

namespace ember::memory {

struct TraceEvent {
  enum Kind : uint8_t { allocate, free, record_stream };
  Kind kind = allocate;
  uint64_t id = 0;
  uint64_t bytes = 0;   // allocate only
  uint64_t stream = 0;  // allocate and record_stream
  friend bool operator==(const TraceEvent&, const TraceEvent&) = default;
};

// The first line of every version-1 trace.
inline constexpr std::string_view kTraceHeader = "# ember-alloc-trace v1";

// Reads a trace (a regular file). Files whose name ends in ".gz" are decompressed
// with zlib. Throws ember::Error naming file:line for a
// missing or wrong header, an unknown event, a wrong field count, a malformed
// number, a zero-byte allocation, a free or record_stream of an ID that is not
// live, and an allocate of an ID that is still live.
std::vector<TraceEvent> read_trace(const std::string& path);

// Parses trace text (the same checks as read_trace; `name` is used in messages).
std::vector<TraceEvent> parse_trace(std::string_view text, const std::string& name = "<trace>");

// Writes a version-1 trace. Thread-safe: each event is one line, written whole.
// A path ending in ".gz" is compressed with zlib. The file is created at once (a
// missing directory is an Error here, not later), flushed and closed on
// destruction. A write that fails (disk full) stops the trace: flush() throws it,
// and the destructor prints it to stderr. The writer does not validate IDs: the
// recording adaptors (trace_recording_adaptor.hpp) assign them.
class TraceWriter {
 public:
  // `comment`: lines written after the header, each prefixed with "# ".
  explicit TraceWriter(const std::string& path, std::string_view comment = {});
  ~TraceWriter();
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  void allocate(uint64_t id, uint64_t bytes, uint64_t stream);
  void free(uint64_t id);
  void record_stream(uint64_t id, uint64_t stream);
  void write(const TraceEvent& event);
  void flush();

  const std::string& path() const { return path_; }
  uint64_t events_written() const;

 private:
  void put_line(const char* line, int length);
  void put_bytes(const char* bytes, size_t length);  // mutex_ held

  std::string path_;
  std::FILE* file_ = nullptr;  // plain text
  gzFile_s* gz_ = nullptr;     // ".gz" (zlib's gzFile)
  std::string error_;          // the first write failure
  mutable std::mutex mutex_;
  uint64_t events_ = 0;
};

}  // namespace ember::memory
