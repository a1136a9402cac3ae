// memory::snapshot_svg and memory::timeline_svg (ember/memory/snapshot_svg.hpp).
#include "ember/memory/snapshot_svg.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <map>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "ember/core/error.hpp"

namespace ember::memory {
namespace {

using Json = nlohmann::json;

struct Block {
  uint64_t address = 0, size = 0, requested = 0;
  std::string state;
};

struct Segment {
  uint64_t address = 0, size = 0, stream = 0;
  std::string pool;
  bool expandable = false;
  std::vector<Block> blocks;
};

[[noreturn]] void not_a_snapshot(const std::string& why) {
  throw Error("not an allocator snapshot: " + why);
}

const char* type_name(const Json& value) {
  return value.is_object()    ? "an object"
         : value.is_array()   ? "an array"
         : value.is_string()  ? "a string"
         : value.is_boolean() ? "a boolean"
         : value.is_number()  ? "a number"
                              : "null";
}

const Json& member(const Json& object, const char* key, bool (Json::*is)() const noexcept,
                   const char* wanted, const std::string& where) {
  const auto it = object.find(key);
  if (it == object.end())
    not_a_snapshot(fmt::format("{}: expected a \"{}\" member, found none", where, key));
  if (!((*it).*is)()) {
    not_a_snapshot(
        fmt::format("{}: expected \"{}\" to be {}, found {}", where, key, wanted, type_name(*it)));
  }
  return *it;
}

// Sizes and addresses: a non-negative integer, or a string holding one ("0x7f..." or decimal).
uint64_t unsigned_member(const Json& object, const char* key, const std::string& where) {
  const auto it = object.find(key);
  if (it == object.end())
    not_a_snapshot(fmt::format("{}: expected a \"{}\" member, found none", where, key));
  if (it->is_number_unsigned()) return it->get<uint64_t>();
  if (it->is_string()) {
    std::string_view text = it->get_ref<const std::string&>();
    int base = 10;
    if (text.starts_with("0x") || text.starts_with("0X")) {
      text.remove_prefix(2);
      base = 16;
    }
    uint64_t out = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out, base);
    if (!text.empty() && ec == std::errc() && end == text.data() + text.size()) return out;
  }
  not_a_snapshot(fmt::format(
      "{}: expected \"{}\" to be a non-negative integer (or a string with one, e.g. \"0x7f00\")",
      where, key));
}

std::vector<Segment> read_snapshot(std::string_view text) {
  Json root;
  try {
    root = Json::parse(text);
  } catch (const Json::parse_error& e) {
    // The parser quotes what it read last: bytes that are not printable ASCII as \xHH, so that
    // the message stays text.
    std::string message;
    for (const char c : std::string_view(e.what())) {
      const auto byte = static_cast<unsigned char>(c);
      message += byte >= 0x20 && byte < 0x7f ? std::string(1, c) : fmt::format("\\x{:02x}", byte);
    }
    throw Error("not valid JSON: " + message);
  }
  if (!root.is_object())
    not_a_snapshot("expected the top level to be an object {\"segments\": [...]}");
  std::vector<Segment> segments;
  const Json& list = member(root, "segments", &Json::is_array, "an array", "top level");
  for (size_t i = 0; i < list.size(); ++i) {
    const Json& s = list[i];
    const std::string where = fmt::format("segments[{}]", i);
    if (!s.is_object()) not_a_snapshot(where + ": expected an object");
    Segment segment;
    segment.address = unsigned_member(s, "address", where);
    segment.size = unsigned_member(s, "size", where);
    segment.stream = unsigned_member(s, "stream", where);
    if (const auto pool = s.find("pool"); pool != s.end() && pool->is_string()) {
      segment.pool = pool->get<std::string>();
    }
    if (const auto e = s.find("expandable"); e != s.end() && e->is_boolean()) {
      segment.expandable = e->get<bool>();
    }
    const Json& blocks = member(s, "blocks", &Json::is_array, "an array", where);
    for (size_t j = 0; j < blocks.size(); ++j) {
      const Json& b = blocks[j];
      const std::string bwhere = fmt::format("{}.blocks[{}]", where, j);
      if (!b.is_object()) not_a_snapshot(bwhere + ": expected an object");
      Block block;
      block.address = unsigned_member(b, "address", bwhere);
      block.size = unsigned_member(b, "size", bwhere);
      block.requested = b.contains("requested") ? unsigned_member(b, "requested", bwhere) : 0;
      block.state = member(b, "state", &Json::is_string, "a string", bwhere).get<std::string>();
      if (block.state != "allocated" && block.state != "free" && block.state != "inactive" &&
          block.state != "unmapped") {
        not_a_snapshot(
            fmt::format("{}: expected \"state\" to be \"allocated\", \"free\", \"inactive\" or "
                        "\"unmapped\", found \"{}\"",
                        bwhere, block.state));
      }
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
}  // namespace

std::string timeline_svg(const std::vector<MemoryPoint>& points, const std::string& title,
                         const std::string& config) {
  constexpr int kColumns = 1000, kLeft = 90, kTop = 60, kWidth = 1000, kHeight = 360;
  struct Series {
    const char* name;
    const char* color;
    uint64_t MemoryPoint::*field;
  };
  const Series series[] = {{"reserved", "#e15759", &MemoryPoint::reserved},
                           {"allocated", "#4e79a7", &MemoryPoint::allocated},
                           {"requested", "#59a14f", &MemoryPoint::requested}};
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

std::string snapshot_svg(std::string_view snapshot_json, const std::string& title,
                         bool global_scale) {
  return render_svg(read_snapshot(snapshot_json), title, global_scale);
}

}  // namespace ember::memory
