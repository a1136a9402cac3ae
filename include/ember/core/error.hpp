// ember::Error and the check macros every layer uses to reject bad input.
#pragma once

// fmt 9's headers do not compile in nvcc's C++20 host pass, so CUDA translation
// units get a small "{}"-only formatter instead (the same strings are checked
// at compile time by fmt wherever g++ compiles them).
#if defined(__CUDACC__)
#include <sstream>
#include <string_view>
#else
#include <fmt/format.h>
#endif

#include <source_location>
#include <stdexcept>
#include <string>

namespace ember {

// The one exception type ember throws. what() is the message followed by the
// source location that detected the problem; message() is the message alone.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message,
                 std::source_location where = std::source_location::current());

  const std::string& message() const noexcept { return message_; }
  const std::source_location& where() const noexcept { return where_; }

 private:
  std::string message_;
  std::source_location where_;
};

namespace detail {
#if defined(__CUDACC__)
template <class... Args>
[[noreturn]] void throw_error(std::source_location where, std::string_view format,
                              const Args&... args) {
  std::ostringstream out;
  [[maybe_unused]] auto put = [&](const auto& arg) {
    const size_t at = format.find("{}");
    if (at == std::string_view::npos) return;  // more arguments than placeholders
    out << format.substr(0, at) << arg;
    format.remove_prefix(at + 2);
  };
  (put(args), ...);
  out << format;
  throw Error(out.str(), where);
}
#else
template <class... Args>
[[noreturn]] void throw_error(std::source_location where, fmt::format_string<Args...> format,
                              Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...), where);
}
#endif
}  // namespace detail

}  // namespace ember

// Throws ember::Error with a fmt-formatted message when `cond` is false.
#define EMBER_CHECK(cond, ...)                                                       \
  do {                                                                               \
    if (!(cond)) [[unlikely]]                                                        \
      ::ember::detail::throw_error(std::source_location::current(), __VA_ARGS__);    \
  } while (0)

// Throws ember::Error with a fmt-formatted message.
#define EMBER_THROW(...) ::ember::detail::throw_error(std::source_location::current(), __VA_ARGS__)
