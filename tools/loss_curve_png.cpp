// loss_curve_png: draws the loss (and the validation accuracy, where recorded) of a
// `train_mlp --log-csv` file as a PNG picture, written with libpng.
//
//   train_mlp --log-csv run.csv && loss_curve_png run.csv run.png
//
// The loss is the blue line on a log scale (left axis, labelled with its range), the validation
// accuracy the orange dots on 0-100 % (right axis); the step runs left to right (labelled with
// the first and last step). Labels use a built-in 3x5 pixel font for digits and a few signs.
#include <png.h>

#include <sys/stat.h>
#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct Row {
  double step, loss, accuracy;  // accuracy nan where not recorded
};

struct Error {
  std::string message;
};

std::vector<Row> read_csv(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    throw Error{"cannot open '" + path + "': not a regular file (" + std::strerror(errno) + ")"};
  }
  std::ifstream in(path);
  if (!in) throw Error{"cannot open '" + path + "'"};
  std::string line;
  if (!std::getline(in, line) || line.rfind("step,loss", 0) != 0) {
    throw Error{"'" + path + "' is not a train_mlp --log-csv file (header 'step,loss,...')"};
  }
  std::vector<Row> rows;
  for (int number = 2; std::getline(in, line); ++number) {
    if (line.empty()) continue;
    std::stringstream fields(line);
    std::string step, loss, lr, accuracy;
    std::getline(fields, step, ',');
    std::getline(fields, loss, ',');
    std::getline(fields, lr, ',');
    std::getline(fields, accuracy, ',');
    Row r{};
    char* end = nullptr;
    r.step = std::strtod(step.c_str(), &end);
    const bool step_ok = !step.empty() && *end == '\0';
    r.loss = std::strtod(loss.c_str(), &end);
    const bool loss_ok = !loss.empty() && *end == '\0';
    if (!step_ok || !loss_ok || !std::isfinite(r.step) || !std::isfinite(r.loss)) {
      throw Error{"'" + path + "' line " + std::to_string(number) + ": bad step or loss: '" + line +
                  "'"};
    }
    r.accuracy = accuracy.empty() ? std::nan("") : std::strtod(accuracy.c_str(), nullptr);
    rows.push_back(r);
  }
  if (rows.empty()) throw Error{"'" + path + "' has no rows"};
  return rows;
}

struct Rgb {
  uint8_t r, g, b;
};

class Canvas {
 public:
  Canvas(int width, int height)
      : w_(width), h_(height), pixels_(size_t(width) * height, {255, 255, 255}) {}
  void set(int x, int y, Rgb c) {
    if (x >= 0 && y >= 0 && x < w_ && y < h_) pixels_[size_t(y) * w_ + x] = c;
  }
  void line(double x0, double y0, double x1, double y1, Rgb c) {
    const int steps = static_cast<int>(std::max(std::fabs(x1 - x0), std::fabs(y1 - y0))) + 1;
    for (int i = 0; i <= steps; ++i) {
      const double t = static_cast<double>(i) / steps;
      set(static_cast<int>(std::lround(x0 + (x1 - x0) * t)),
          static_cast<int>(std::lround(y0 + (y1 - y0) * t)), c);
    }
  }
  void dot(double x, double y, Rgb c) {
    for (int dy = -1; dy <= 1; ++dy) {
      for (int dx = -1; dx <= 1; ++dx) set(int(std::lround(x)) + dx, int(std::lround(y)) + dy, c);
    }
  }
  // Text in a 3x5 font scaled 2x; digits, '.', '-', '%', 'e' and '+'.
  void text(int x, int y, const std::string& s, Rgb c) {
    static const std::array<std::pair<char, std::array<uint8_t, 5>>, 15> kFont = {{
        {'0', {7, 5, 5, 5, 7}},
        {'1', {2, 6, 2, 2, 7}},
        {'2', {7, 1, 7, 4, 7}},
        {'3', {7, 1, 7, 1, 7}},
        {'4', {5, 5, 7, 1, 1}},
        {'5', {7, 4, 7, 1, 7}},
        {'6', {7, 4, 7, 5, 7}},
        {'7', {7, 1, 1, 1, 1}},
        {'8', {7, 5, 7, 5, 7}},
        {'9', {7, 5, 7, 1, 7}},
        {'.', {0, 0, 0, 0, 2}},
        {'-', {0, 0, 7, 0, 0}},
        {'%', {5, 1, 2, 4, 5}},
        {'e', {0, 7, 7, 4, 7}},
        {'+', {0, 2, 7, 2, 0}},
    }};
    for (char ch : s) {
      for (const auto& [glyph, rows] : kFont) {
        if (glyph != ch) continue;
        for (int row = 0; row < 5; ++row) {
          for (int col = 0; col < 3; ++col) {
            if (!(rows[row] >> (2 - col) & 1)) continue;
            for (int k = 0; k < 4; ++k) set(x + 2 * col + k % 2, y + 2 * row + k / 2, c);
          }
        }
      }
      x += 8;
    }
  }
  void write_png(const std::string& path) const {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (f == nullptr) throw Error{"cannot create '" + path + "': " + std::strerror(errno)};
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
    png_infop info = png != nullptr ? png_create_info_struct(png) : nullptr;
    if (png == nullptr || info == nullptr || setjmp(png_jmpbuf(png))) {
      png_destroy_write_struct(&png, &info);
      std::fclose(f);
      throw Error{"libpng failed writing '" + path + "'"};
    }
    png_init_io(png, f);
    png_set_IHDR(png, info, static_cast<png_uint_32>(w_), static_cast<png_uint_32>(h_), 8,
                 PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    for (int y = 0; y < h_; ++y) {
      png_write_row(png, reinterpret_cast<png_const_bytep>(&pixels_[size_t(y) * w_]));
    }
    png_write_end(png, nullptr);
    png_destroy_write_struct(&png, &info);
    if (std::fclose(f) != 0) throw Error{"writing '" + path + "' failed: " + std::strerror(errno)};
  }

 private:
  int w_, h_;
  std::vector<Rgb> pixels_;
};

std::string number(double v) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.3g", v);
  return buffer;
}

void draw(const std::vector<Row>& rows, const std::string& out) {
  constexpr int kW = 800, kH = 480, kLeft = 70, kRight = 60, kTop = 20, kBottom = 40;
  Canvas c(kW, kH);
  const Rgb axis{60, 60, 60}, grid{225, 225, 225}, blue{31, 119, 180}, orange{255, 127, 14};
  double s0 = rows.front().step, s1 = rows.back().step;
  if (s1 <= s0) s1 = s0 + 1;
  double lo = std::numeric_limits<double>::infinity(), hi = 0;
  for (const Row& r : rows) {
    if (r.loss > 0) {
      lo = std::min(lo, r.loss);
      hi = std::max(hi, r.loss);
    }
  }
  if (!(hi > 0)) lo = hi = 1;
  const double llo = std::floor(std::log10(lo) * 4) / 4,
               lhi = std::ceil(std::log10(hi) * 4) / 4 + 1e-9;
  const double pw = kW - kLeft - kRight, ph = kH - kTop - kBottom;
  auto px = [&](double step) { return kLeft + (step - s0) / (s1 - s0) * pw; };
  auto py_loss = [&](double loss) {
    const double l = std::log10(std::max(loss, lo));
    return kTop + (1 - (l - llo) / (lhi - llo)) * ph;
  };
  auto py_acc = [&](double a) { return kTop + (1 - std::clamp(a, 0.0, 1.0)) * ph; };
  for (int i = 0; i <= 4; ++i) {  // grid: quarters of the height and width
    const double y = kTop + ph * i / 4, x = kLeft + pw * i / 4;
    c.line(kLeft, y, kLeft + pw, y, grid);
    c.line(x, kTop, x, kTop + ph, grid);
  }
  c.line(kLeft, kTop, kLeft, kTop + ph, axis);
  c.line(kLeft + pw, kTop, kLeft + pw, kTop + ph, axis);
  c.line(kLeft, kTop + ph, kLeft + pw, kTop + ph, axis);
  for (size_t i = 1; i < rows.size(); ++i) {
    c.line(px(rows[i - 1].step), py_loss(rows[i - 1].loss), px(rows[i].step), py_loss(rows[i].loss),
           blue);
  }
  for (const Row& r : rows) {
    if (std::isfinite(r.accuracy)) c.dot(px(r.step), py_acc(r.accuracy), orange);
  }
  c.text(4, kTop, number(std::pow(10, lhi)), blue);
  c.text(4, kTop + static_cast<int>(ph) - 10, number(std::pow(10, llo)), blue);
  c.text(kLeft + static_cast<int>(pw) + 6, kTop, "100%", orange);
  c.text(kLeft + static_cast<int>(pw) + 6, kTop + static_cast<int>(ph) - 10, "0%", orange);
  c.text(kLeft, kTop + static_cast<int>(ph) + 12, std::to_string(std::llround(s0)), axis);
  const std::string last = std::to_string(std::llround(s1));
  c.text(kLeft + static_cast<int>(pw) - 8 * static_cast<int>(last.size()),
         kTop + static_cast<int>(ph) + 12, last, axis);
  c.write_png(out);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && (std::strcmp(argv[1], "-h") == 0 || std::strcmp(argv[1], "--help") == 0)) {
    std::puts(
        "usage: loss_curve_png LOG.csv OUT.png\n\nDraws a train_mlp --log-csv file: the loss "
        "(blue, log scale, left) and the validation accuracy\n(orange dots, 0-100 %, right) "
        "against the step.");
    return 0;
  }
  if (argc != 3) {
    std::fprintf(stderr, "usage: loss_curve_png LOG.csv OUT.png (--help for more)\n");
    return 2;
  }
  try {
    const std::vector<Row> rows = read_csv(argv[1]);
    draw(rows, argv[2]);
    std::printf("loss_curve_png: %zu steps (%g to %g) drawn into %s\n", rows.size(),
                rows.front().step, rows.back().step, argv[2]);
  } catch (const Error& e) {
    std::fprintf(stderr, "loss_curve_png: %s\n", e.message.c_str());
    return 1;
  }
  return 0;
}
