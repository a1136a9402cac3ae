// Libraries ember loads when first used rather than links: cuBLASLt and NCCL in the CUDA build,
// so that libember.so starts (and runs on the CPU) on a machine without them, and a missing
// library is an ember::Error naming it at the call that needs it.
#pragma once

#include <string>

namespace ember::detail {

class SharedLibrary {
 public:
  // dlopen(soname) once; never closed (handles created through it live until exit). A failure
  // is remembered: error() says why, and function() throws it.
  explicit SharedLibrary(std::string soname);
  SharedLibrary(const SharedLibrary&) = delete;
  SharedLibrary& operator=(const SharedLibrary&) = delete;

  bool loaded() const { return handle_ != nullptr; }
  const std::string& soname() const { return soname_; }
  // Why loading failed ("" when loaded).
  const std::string& error() const { return error_; }

  // The address of `symbol`; throws ember::Error naming the library and the symbol when the
  // library is not loaded or lacks it (an older version).
  void* symbol(const char* name) const;
  template <class F>
  void bind(const char* name, F& function) const {
    function = reinterpret_cast<F>(symbol(name));
  }

 private:
  std::string soname_;
  void* handle_ = nullptr;
  std::string error_;
};

}  // namespace ember::detail
