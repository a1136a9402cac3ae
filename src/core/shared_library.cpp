#include "core/shared_library.hpp"

#include <dlfcn.h>

#include "ember/core/error.hpp"

namespace ember::detail {

SharedLibrary::SharedLibrary(std::string soname) : soname_(std::move(soname)) {
  handle_ = ::dlopen(soname_.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle_ == nullptr) {
    const char* why = ::dlerror();
    error_ = why != nullptr ? why : soname_ + ": dlopen failed";
  }
}

void* SharedLibrary::symbol(const char* name) const {
  EMBER_CHECK(handle_ != nullptr, "{} could not be loaded: {}", soname_, error_);
  ::dlerror();
  void* address = ::dlsym(handle_, name);
  EMBER_CHECK(address != nullptr, "{} has no {} (an older version?): {}", soname_, name, [] {
    const char* why = ::dlerror();
    return why != nullptr ? why : "not found";
  }());
  return address;
}

}  // namespace ember::detail
