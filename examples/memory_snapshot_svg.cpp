// memory_snapshot_svg: draws a CachingAllocator snapshot (CachingAllocator::snapshot(),
// saved to a file) as an SVG picture: one row per segment, each block colored by
// state, sizes in the tooltips.
//
//   memory_snapshot_svg snapshot.json -o snapshot.svg
//
// Colors: allocated (blue); free inside a segment that also holds allocated
// blocks, i.e. fragmentation (orange); free in a segment that is entirely free,
// i.e. cache that empty_cache() would return (green); inactive, freed but
// waiting for stream events (purple); unmapped, a hole of an expandable segment
// whose pages went back to the device: address space without memory (a light
// grey, hatched and outlined gap).
//
// The JSON reader below reads general JSON but the tool only accepts the
// snapshot schema: {"segments":[{"address","size","stream","pool","expandable",
// "blocks":[{"address","size","requested","state"}]}]}.
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "ember/core/error.hpp"
#include "ember/memory/config.hpp"
#include "ember/memory/replay.hpp"
#include "ember/memory/trace.hpp"

namespace {

// ---- a tiny JSON reader ------------------------------------------------------

struct Json {
  enum Type { null, boolean, number, string, array, object } type = null;
  bool b = false;
  double num = 0;
  uint64_t integer = 0;  // exact value when the number is a non-negative integer
  bool is_integer = false;
  std::string str;
  std::vector<Json> items;
  std::vector<std::pair<std::string, Json>> members;

  const Json* find(std::string_view key) const {
    for (const auto& [k, v] : members)
      if (k == key) return &v;
    return nullptr;
  }
};

class JsonError : public std::runtime_error {
  using std::runtime_error::runtime_error;
};

class JsonParser {
 public:
  explicit JsonParser(std::string_view text) : text_(text) {}

  Json parse_document() {
    Json value = parse_value(0);
    skip_space();
    if (pos_ != text_.size()) fail("expected the end of the document");
    return value;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    size_t line = 1, column = 1;
    for (size_t i = 0; i < pos_ && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    const std::string found = pos_ < text_.size() ? "'" + std::string(text_.substr(pos_, 20)) + "'"
                                                  : "the end of the file";
    throw JsonError("line " + std::to_string(line) + ", column " + std::to_string(column) + ": " +
                    what + ", found " + found);
  }
  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n' ||
                                   text_[pos_] == '\r' || text_[pos_] == '\t'))
      ++pos_;
  }
  bool consume(char c) {
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!consume(c)) fail(std::string("expected '") + c + "'");
  }
  bool literal(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  Json parse_value(int depth) {
    if (depth > 64) fail("nesting deeper than 64 levels");
    skip_space();
    if (pos_ >= text_.size()) fail("expected a value");
    Json value;
    const char c = text_[pos_];
    if (c == '{') {
      ++pos_;
      value.type = Json::object;
      if (consume('}')) return value;
      do {
        skip_space();
        if (pos_ >= text_.size() || text_[pos_] != '"') fail("expected a string key");
        std::string key = parse_string();
        expect(':');
        value.members.emplace_back(std::move(key), parse_value(depth + 1));
      } while (consume(','));
      expect('}');
    } else if (c == '[') {
      ++pos_;
      value.type = Json::array;
      if (consume(']')) return value;
      do {
        value.items.push_back(parse_value(depth + 1));
      } while (consume(','));
      expect(']');
    } else if (c == '"') {
      value.type = Json::string;
      value.str = parse_string();
    } else if (literal("true")) {
      value.type = Json::boolean;
      value.b = true;
    } else if (literal("false")) {
      value.type = Json::boolean;
    } else if (literal("null")) {
      value.type = Json::null;
    } else {
      parse_number(value);
    }
    return value;
  }

  std::string parse_string() {
    ++pos_;  // the opening quote
    std::string out;
    while (pos_ < text_.size() && text_[pos_] != '"') {
      char c = text_[pos_++];
      if (c == '\\') {
        if (pos_ >= text_.size()) fail("expected an escaped character");
        c = text_[pos_++];
        switch (c) {
          case 'n':
            out += '\n';
            break;
          case 't':
            out += '\t';
            break;
          case 'r':
            out += '\r';
            break;
          case 'b':
            out += '\b';
            break;
          case 'f':
            out += '\f';
            break;
          case 'u':  // kept as '?': snapshots hold no such characters
            if (pos_ + 4 > text_.size()) fail("expected 4 hex digits after \\u");
            pos_ += 4;
            out += '?';
            break;
          default:
            out += c;  // '"', '\\', '/'
        }
      } else {
        out += c;
      }
    }
    if (pos_ >= text_.size()) fail("expected the closing '\"' of a string");
    ++pos_;
    return out;
  }

  void parse_number(Json& value) {
    const size_t start = pos_;
    while (pos_ < text_.size() &&
           (std::isdigit(static_cast<unsigned char>(text_[pos_])) ||
            std::string_view("+-.eE").find(text_[pos_]) != std::string_view::npos))
      ++pos_;
    const std::string_view token = text_.substr(start, pos_ - start);
    if (token.empty()) fail("expected a value (object, array, string, number, true, false, null)");
    value.type = Json::number;
    const auto [end, ec] =
        std::from_chars(token.data(), token.data() + token.size(), value.integer);
    value.is_integer = ec == std::errc() && end == token.data() + token.size();
    try {
      value.num = std::stod(std::string(token));
    } catch (const std::exception&) {
      pos_ = start;
      fail("expected a number");
    }
  }

  std::string_view text_;
  size_t pos_ = 0;
};

// ---- the snapshot schema -----------------------------------------------------

struct Block {
  uint64_t address = 0, size = 0, requested = 0;
  std::string state;  // allocated | free | inactive | unmapped
};
struct Segment {
  uint64_t address = 0, size = 0, stream = 0;
  std::string pool;
  bool expandable = false;
  std::vector<Block> blocks;
};

class SchemaError : public std::runtime_error {
  using std::runtime_error::runtime_error;
};

const Json& field(const Json& object, std::string_view key, Json::Type type,
                  const std::string& where) {
  static const char* names[] = {"null",     "a boolean", "a number",
                                "a string", "an array",  "an object"};
  const Json* value = object.find(key);
  if (value == nullptr)
    throw SchemaError(where + ": expected a \"" + std::string(key) + "\" member, found none");
  if (value->type != type)
    throw SchemaError(where + ": expected \"" + std::string(key) + "\" to be " + names[type] +
                      ", found " + names[value->type]);
  return *value;
}

// Sizes and addresses: a non-negative integer, or a string holding one ("0x7f..." or decimal).
uint64_t unsigned_field(const Json& object, std::string_view key, const std::string& where) {
  const Json* value = object.find(key);
  if (value == nullptr)
    throw SchemaError(where + ": expected a \"" + std::string(key) + "\" member, found none");
  if (value->type == Json::number && value->is_integer) return value->integer;
  if (value->type == Json::string) {
    std::string_view text = value->str;
    int base = 10;
    if (text.starts_with("0x") || text.starts_with("0X")) {
      text.remove_prefix(2);
      base = 16;
    }
    uint64_t out = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out, base);
    if (!text.empty() && ec == std::errc() && end == text.data() + text.size()) return out;
  }
  throw SchemaError(where + ": expected \"" + std::string(key) +
                    "\" to be a non-negative integer (or a string with one, e.g. \"0x7f00\")");
}

std::vector<Segment> read_snapshot(const Json& root) {
  if (root.type != Json::object)
    throw SchemaError("expected the top level to be an object {\"segments\": [...]}");
  std::vector<Segment> segments;
  const Json& list = field(root, "segments", Json::array, "top level");
  for (size_t i = 0; i < list.items.size(); ++i) {
    const Json& s = list.items[i];
    const std::string where = "segments[" + std::to_string(i) + "]";
    if (s.type != Json::object) throw SchemaError(where + ": expected an object");
    Segment segment;
    segment.address = unsigned_field(s, "address", where);
    segment.size = unsigned_field(s, "size", where);
    segment.stream = unsigned_field(s, "stream", where);
    if (const Json* pool = s.find("pool"); pool != nullptr && pool->type == Json::string)
      segment.pool = pool->str;
    if (const Json* e = s.find("expandable"); e != nullptr && e->type == Json::boolean)
      segment.expandable = e->b;
    const Json& blocks = field(s, "blocks", Json::array, where);
    for (size_t j = 0; j < blocks.items.size(); ++j) {
      const Json& b = blocks.items[j];
      const std::string bwhere = where + ".blocks[" + std::to_string(j) + "]";
      if (b.type != Json::object) throw SchemaError(bwhere + ": expected an object");
      Block block;
      block.address = unsigned_field(b, "address", bwhere);
      block.size = unsigned_field(b, "size", bwhere);
      block.requested = b.find("requested") != nullptr ? unsigned_field(b, "requested", bwhere) : 0;
      block.state = field(b, "state", Json::string, bwhere).str;
      if (block.state != "allocated" && block.state != "free" && block.state != "inactive" &&
          block.state != "unmapped")
        throw SchemaError(bwhere +
                          ": expected \"state\" to be \"allocated\", \"free\", \"inactive\" "
                          "or \"unmapped\", found \"" +
                          block.state + "\"");
      segment.blocks.push_back(std::move(block));
    }
    segments.push_back(std::move(segment));
  }
  return segments;
}

// ---- drawing -----------------------------------------------------------------

std::string format_bytes(uint64_t bytes) {
  char out[64];
  const double b = static_cast<double>(bytes);
  if (bytes >= (uint64_t{1} << 30))
    std::snprintf(out, sizeof out, "%.2f GiB", b / (1 << 30));
  else if (bytes >= (uint64_t{1} << 20))
    std::snprintf(out, sizeof out, "%.2f MiB", b / (1 << 20));
  else if (bytes >= 1024)
    std::snprintf(out, sizeof out, "%.1f KiB", b / 1024);
  else
    std::snprintf(out, sizeof out, "%llu B", static_cast<unsigned long long>(bytes));
  return out;
}

std::string hex(uint64_t value) {
  char out[32];
  std::snprintf(out, sizeof out, "0x%llx", static_cast<unsigned long long>(value));
  return out;
}

// The code point of the UTF-8 sequence at text[i] and its length, or length 0 when the bytes
// are not one valid, shortest-form sequence.
std::pair<uint32_t, size_t> decode_utf8(std::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  if (lead < 0x80) return {lead, 1};
  const size_t length = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 0;
  if (length == 0 || i + length > text.size()) return {0, 0};
  uint32_t cp = lead & (0x7F >> length);
  for (size_t k = 1; k < length; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return {0, 0};
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  static constexpr uint32_t kShortest[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kShortest[length] || cp > 0x10FFFF) return {0, 0};
  return {cp, length};
}

// Whether XML 1.0 allows the character at all (even as a reference).
bool xml_char(uint32_t cp) {
  return cp == 0x9 || cp == 0xA || cp == 0xD || (cp >= 0x20 && cp <= 0xD7FF) ||
         (cp >= 0xE000 && cp <= 0xFFFD) || (cp >= 0x10000 && cp <= 0x10FFFF);
}

// Text for XML content and attributes: markup characters escaped; control characters and
// bytes that are not UTF-8 (both invalid in XML) become U+FFFD.
std::string escape(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    const auto [cp, length] = decode_utf8(text, i);
    if (length == 0 || !xml_char(cp)) {
      out += "\xEF\xBF\xBD";  // U+FFFD REPLACEMENT CHARACTER
      i += length == 0 ? 1 : length;
      continue;
    }
    switch (cp) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out.append(text.substr(i, length));
    }
    i += length;
  }
  return out;
}

struct Category {
  const char* name;
  const char* color;
  const char* meaning;
};
constexpr Category kAllocated{"allocated", "#4e79a7", "allocated"};
constexpr Category kFragmented{"fragmented", "#f28e2b", "free, in a segment with allocated blocks"};
constexpr Category kCached{"free", "#59a14f", "free, in an entirely free segment (cache)"};
constexpr Category kInactive{"inactive", "#b07aa1", "freed, waiting for stream events"};
// A gap, not memory: hatched light grey with an outline (see kDefs).
constexpr Category kUnmapped{"unmapped", "url(#unmapped)",
                             "unmapped: a hole in an expandable segment, no memory behind it"};
constexpr const char* kDefs =
    "<defs><pattern id=\"unmapped\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
    "patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"#f4f4f4\"/>"
    "<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#c8c8c8\" stroke-width=\"2\"/>"
    "</pattern></defs>\n";
constexpr const char* kUnmappedStroke = "#aaaaaa";

// The stroke attribute of a category's rectangles: only gaps are outlined.
std::string outline(const Category& c) {
  return &c == &kUnmapped ? std::string(" stroke=\"") + kUnmappedStroke + "\"" : std::string();
}

std::string render_svg(const std::vector<Segment>& segments, const std::string& title,
                       bool global_scale) {
  constexpr int kLabel = 330, kBar = 900, kRow = 22, kBarHeight = 16, kTop = 60;
  uint64_t largest_segment = 1;
  std::map<std::string, uint64_t> totals;
  for (const Segment& s : segments) largest_segment = std::max(largest_segment, s.size);

  std::ostringstream body;
  int y = kTop;
  for (size_t i = 0; i < segments.size(); ++i, y += kRow) {
    const Segment& s = segments[i];
    const bool has_allocated = std::any_of(s.blocks.begin(), s.blocks.end(),
                                           [](const Block& b) { return b.state == "allocated"; });
    const double width = global_scale ? kBar * static_cast<double>(s.size) / largest_segment : kBar;
    body << "<text x=\"4\" y=\"" << y + 12 << "\">" << i << ": " << format_bytes(s.size)
         << " stream " << s.stream << (s.pool.empty() ? "" : " ") << escape(s.pool)
         << (s.expandable ? " expandable" : "") << "</text>\n";
    body << "<rect class=\"segment\" x=\"" << kLabel << "\" y=\"" << y << "\" width=\"" << width
         << "\" height=\"" << kBarHeight << "\" fill=\"#eeeeee\" stroke=\"#999999\"><title>segment "
         << hex(s.address) << ", " << format_bytes(s.size) << "</title></rect>\n";
    for (const Block& b : s.blocks) {
      const Category& category = b.state == "allocated"  ? kAllocated
                                 : b.state == "inactive" ? kInactive
                                 : b.state == "unmapped" ? kUnmapped
                                 : has_allocated         ? kFragmented
                                                         : kCached;
      totals[category.name] += b.size;
      const double scale = s.size == 0 ? 0.0 : width / static_cast<double>(s.size);
      const double x =
          kLabel + scale * static_cast<double>(b.address - std::min(b.address, s.address));
      const double w = std::max(1.0, scale * static_cast<double>(b.size));
      body << "<rect class=\"block " << category.name << "\" x=\"" << x << "\" y=\"" << y
           << "\" width=\"" << w << "\" height=\"" << kBarHeight << "\" fill=\"" << category.color
           << "\"" << outline(category) << "><title>" << category.name << " "
           << format_bytes(b.size);
      if (b.state == "allocated") body << " (requested " << format_bytes(b.requested) << ")";
      body << " at " << hex(b.address) << " (+"
           << format_bytes(b.address - std::min(b.address, s.address)) << ")</title></rect>\n";
    }
  }

  const int height = y + 20;
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kLabel + kBar + 20
      << "\" height=\"" << height << "\" font-family=\"monospace\" font-size=\"12\">\n";
  svg << kDefs;
  svg << "<text x=\"4\" y=\"18\" font-size=\"15\">" << escape(title) << " (" << segments.size()
      << " segments)</text>\n";
  int x = 4;
  for (const Category* c : {&kAllocated, &kFragmented, &kCached, &kInactive, &kUnmapped}) {
    svg << "<rect class=\"legend\" x=\"" << x << "\" y=\"30\" width=\"12\" height=\"12\" fill=\""
        << c->color << "\"" << outline(*c) << "><title>" << c->meaning << "</title></rect>";
    const std::string label = std::string(c->name) + " " + format_bytes(totals[c->name]);
    svg << "<text x=\"" << x + 16 << "\" y=\"40\">" << label << "</text>\n";
    x += 16 + static_cast<int>(label.size()) * 8 + 20;
  }
  svg << body.str() << "</svg>\n";
  return svg.str();
}

// Memory over time from a replayed trace: requested, allocated and reserved bytes per event
// as three lines (at most kColumns columns, each the maximum of its events, so peaks show).
std::string render_timeline(const std::vector<ember::memory::MemoryPoint>& points,
                            const std::string& title, const std::string& config) {
  constexpr int kColumns = 1000, kLeft = 90, kTop = 60, kWidth = 1000, kHeight = 360;
  struct Series {
    const char* name;
    const char* color;
    uint64_t ember::memory::MemoryPoint::*field;
  };
  const Series series[] = {{"reserved", "#e15759", &ember::memory::MemoryPoint::reserved},
                           {"allocated", "#4e79a7", &ember::memory::MemoryPoint::allocated},
                           {"requested", "#59a14f", &ember::memory::MemoryPoint::requested}};
  const size_t n = points.size();
  const size_t columns = std::min<size_t>(n, kColumns);
  uint64_t top = 1;
  for (const auto& p : points) top = std::max({top, p.reserved, p.allocated, p.requested});
  std::ostringstream svg;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kLeft + kWidth + 20
      << "\" height=\"" << kTop + kHeight + 50
      << "\" font-family=\"monospace\" font-size=\"12\">\n";
  svg << "<text x=\"4\" y=\"18\" font-size=\"15\">" << escape(title) << ": memory over " << n
      << " events</text>\n";
  svg << "<text x=\"4\" y=\"34\">" << escape(config) << "</text>\n";
  int x = kLeft;
  for (const Series& s : series) {
    uint64_t peak = 0;
    for (const auto& p : points) peak = std::max(peak, p.*s.field);
    const std::string label = std::string(s.name) + " (peak " + format_bytes(peak) + ")";
    svg << "<rect class=\"legend\" x=\"" << x << "\" y=\"42\" width=\"12\" height=\"4\" fill=\""
        << s.color << "\"/><text x=\"" << x + 16 << "\" y=\"48\">" << label << "</text>\n";
    x += 16 + static_cast<int>(label.size()) * 8 + 20;
  }
  // Axes: bytes on the left (5 ticks), events below.
  svg << "<rect class=\"plot\" x=\"" << kLeft << "\" y=\"" << kTop << "\" width=\"" << kWidth
      << "\" height=\"" << kHeight << "\" fill=\"none\" stroke=\"#999999\"/>\n";
  for (int t = 0; t <= 4; ++t) {
    const int y = kTop + kHeight - kHeight * t / 4;
    svg << "<text x=\"4\" y=\"" << y + 4 << "\">"
        << format_bytes(top / 4 * static_cast<uint64_t>(t)) << "</text>\n";
  }
  svg << "<text x=\"" << kLeft << "\" y=\"" << kTop + kHeight + 18 << "\">event 0</text>";
  svg << "<text x=\"" << kLeft + kWidth - 120 << "\" y=\"" << kTop + kHeight + 18 << "\">event "
      << (n == 0 ? 0 : n - 1) << "</text>\n";
  for (const Series& s : series) {
    svg << "<polyline class=\"" << s.name << "\" fill=\"none\" stroke=\"" << s.color
        << "\" stroke-width=\"1.5\" points=\"";
    for (size_t c = 0; c < columns; ++c) {
      const size_t begin = c * n / columns, end = (c + 1) * n / columns;
      uint64_t value = 0;
      for (size_t i = begin; i < end; ++i) value = std::max(value, points[i].*s.field);
      const double px = kLeft + (columns == 1 ? 0.0 : double(c) * kWidth / double(columns - 1));
      const double py = kTop + kHeight - double(value) / double(top) * kHeight;
      svg << (c ? " " : "") << px << "," << py;
    }
    svg << "\"/>\n";
  }
  svg << "</svg>\n";
  return svg.str();
}

// memory_snapshot_svg --trace: replays the trace and writes the timeline.
int draw_trace(const std::string& path, std::string output, std::string title,
               const std::string& conf) {
  using namespace ember::memory;
  try {
    const AllocatorConfig config = conf.empty() ? AllocatorConfig{} : parse_allocator_config(conf);
    const std::vector<TraceEvent> events = read_trace(path);
    std::vector<MemoryPoint> points;
    points.reserve(events.size());
    const ReplayResult result = replay(events, config, 0, PhysicalGranularity::map_call, &points);
    if (output.empty()) {
      std::string stem = path;
      for (const char* suffix : {".gz", ".trace"}) {
        if (stem.ends_with(suffix)) stem.resize(stem.size() - std::string_view(suffix).size());
      }
      output = stem + ".svg";
    }
    if (title.empty()) title = path.substr(path.find_last_of('/') + 1);
    std::ofstream out(output, std::ios::binary);
    out << render_timeline(points, title, "ember allocator: " + to_string(config));
    out.close();
    if (!out) {
      std::fprintf(stderr, "memory_snapshot_svg: cannot write '%s'; check the directory\n",
                   output.c_str());
      return 1;
    }
    std::printf("wrote %s: %zu events, peak requested %s, peak reserved %s\n", output.c_str(),
                points.size(), format_bytes(result.peak_requested).c_str(),
                format_bytes(result.peak_reserved).c_str());
    if (!result.completed) {
      std::fprintf(stderr,
                   "memory_snapshot_svg: the replay stopped after %zu of %zu events (drawn up to "
                   "there): %s\n",
                   result.events_applied, events.size(), result.failure.c_str());
      return 1;
    }
    return 0;
  } catch (const ember::Error& e) {
    std::fprintf(stderr, "memory_snapshot_svg: %s\n", e.message().c_str());
    return 1;
  }
}

void usage(std::FILE* out) {
  std::fprintf(
      out,
      "usage: memory_snapshot_svg SNAPSHOT.json [-o OUT.svg] [--title TEXT] "
      "[--scale segment|global]\n"
      "Draws a CachingAllocator::snapshot() JSON file as an SVG: one row per segment,\n"
      "blocks colored allocated (blue), fragmented = free in a segment that holds\n"
      "allocated blocks (orange), free = an entirely free cached segment (green),\n"
      "inactive = freed, waiting for stream events (purple), unmapped = a hole of an\n"
      "expandable segment, no memory behind it (hatched grey gap); sizes in the tooltips.\n"
      "  -o OUT.svg      output file (default: SNAPSHOT with .svg in place of .json)\n"
      "  --title TEXT    the picture's title (default: the snapshot's file name)\n"
      "  --scale S       segment: every row full width (default); global: rows to scale\n"
      "       memory_snapshot_svg --trace TRACE[.gz] [-o OUT.svg] [--title TEXT] [--conf "
      "key:value,...]\n"
      "Replays an allocation trace (record_allocations) through ember's allocator (config as\n"
      "EMBER_ALLOC_CONF) and draws memory over time: requested, allocated and reserved bytes.\n");
}

}  // namespace

int main(int argc, char** argv) {
  std::string input, output, title, trace, conf;
  bool global_scale = false;
  std::vector<std::string_view> args(argv + 1, argv + argc);
  if (args.empty()) {
    usage(stderr);
    return 2;
  }
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string_view arg = args[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) {
        std::fprintf(stderr, "memory_snapshot_svg: %.*s needs a value\n",
                     static_cast<int>(arg.size()), arg.data());
        std::exit(2);
      }
      return std::string(args[++i]);
    };
    if (arg == "--help" || arg == "-h") {
      usage(stdout);
      return 0;
    } else if (arg == "-o" || arg == "--output") {
      output = value();
    } else if (arg == "--title") {
      title = value();
    } else if (arg == "--trace") {
      trace = value();
      if (trace.empty()) {
        std::fprintf(stderr, "memory_snapshot_svg: --trace needs a trace file, not ''\n");
        return 2;
      }
    } else if (arg == "--conf") {
      conf = value();
    } else if (arg == "--scale") {
      const std::string scale = value();
      if (scale != "segment" && scale != "global") {
        std::fprintf(stderr, "memory_snapshot_svg: --scale needs 'segment' or 'global', not '%s'\n",
                     scale.c_str());
        return 2;
      }
      global_scale = scale == "global";
    } else if (arg.starts_with("-")) {
      std::fprintf(stderr, "memory_snapshot_svg: unknown option '%.*s'; see --help\n",
                   static_cast<int>(arg.size()), arg.data());
      return 2;
    } else if (input.empty()) {
      input = std::string(arg);
    } else {
      std::fprintf(stderr,
                   "memory_snapshot_svg: expected one snapshot file, found a second: '%.*s'\n",
                   static_cast<int>(arg.size()), arg.data());
      return 2;
    }
  }
  if (trace.empty() && !conf.empty()) {
    std::fprintf(stderr,
                 "memory_snapshot_svg: --conf configures the replay of --trace; give a "
                 "trace\n");
    return 2;
  }
  if (!trace.empty()) {
    if (!input.empty()) {
      std::fprintf(stderr, "memory_snapshot_svg: give a snapshot or --trace, not both\n");
      return 2;
    }
    return draw_trace(trace, output, title, conf);
  }
  if (input.empty()) {
    std::fprintf(stderr, "memory_snapshot_svg: expected a snapshot file; see --help\n");
    return 2;
  }
  if (output.empty()) {
    output = input.ends_with(".json") ? input.substr(0, input.size() - 5) : input;
    output += ".svg";
  }
  if (title.empty()) title = input.substr(input.find_last_of('/') + 1);

  struct stat info {};
  if (::stat(input.c_str(), &info) == 0 && !S_ISREG(info.st_mode)) {
    std::fprintf(stderr,
                 "memory_snapshot_svg: '%s' is not a regular file (a directory, FIFO or "
                 "device); expected a snapshot JSON file\n",
                 input.c_str());
    return 1;
  }
  std::ifstream in(input, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "memory_snapshot_svg: cannot open '%s'; check the path\n", input.c_str());
    return 1;
  }
  std::ostringstream text;
  text << in.rdbuf();
  std::vector<Segment> segments;
  try {
    segments = read_snapshot(JsonParser(text.str()).parse_document());
  } catch (const JsonError& e) {
    std::fprintf(stderr, "memory_snapshot_svg: '%s' is not valid JSON: %s\n", input.c_str(),
                 e.what());
    return 1;
  } catch (const SchemaError& e) {
    std::fprintf(stderr,
                 "memory_snapshot_svg: '%s' is not an allocator snapshot: %s; write it with "
                 "CachingAllocator::snapshot()\n",
                 input.c_str(), e.what());
    return 1;
  }
  std::ofstream out(output, std::ios::binary);
  out << render_svg(segments, title, global_scale);
  out.close();
  if (!out) {
    std::fprintf(stderr, "memory_snapshot_svg: cannot write '%s'; check the directory\n",
                 output.c_str());
    return 1;
  }
  size_t blocks = 0;
  for (const Segment& s : segments) blocks += s.blocks.size();
  std::printf("wrote %s: %zu segments, %zu blocks\n", output.c_str(), segments.size(), blocks);
  return 0;
}
