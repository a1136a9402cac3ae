#include "ember/core/error.hpp"

#include <string_view>

namespace ember {
namespace {
std::string with_location(const std::string& message, const std::source_location& where) {
  std::string_view file = where.file_name();
  // Keep the path from the repository's top-level folder on, for short messages.
  for (std::string_view top : {"/include/ember/", "/src/", "/kernels/", "/examples/", "/tests/"}) {
    if (const size_t at = file.rfind(top); at != std::string_view::npos) {
      file.remove_prefix(at + 1);
      break;
    }
  }
  return fmt::format("{} [{}:{}]", message, file, where.line());
}
}  // namespace

Error::Error(const std::string& message, std::source_location where)
    : std::runtime_error(with_location(message, where)), message_(message), where_(where) {}

}  // namespace ember
