// ThreadSanitizer hooks for fibers and barriers; no-ops unless the build uses
// -fsanitize=thread (g++ then defines __SANITIZE_THREAD__).
#pragma once

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#define EMBER_SIMT_TSAN 1
extern "C" void AnnotateBenignRaceSized(const char* file, int line, const volatile void* address,
                                        long size, const char* description);
extern "C" void AnnotateIgnoreSyncBegin(const char* file, int line);
extern "C" void AnnotateIgnoreSyncEnd(const char* file, int line);
#endif

namespace ember::simt::tsan {
#if defined(EMBER_SIMT_TSAN)
inline void* current_fiber() {
  return __tsan_get_current_fiber();
}
inline void* create_fiber() {
  return __tsan_create_fiber(0);
}
inline void set_name(void* fiber, const char* name) {
  __tsan_set_fiber_name(fiber, name);
}
// A switch is not a synchronization: only barriers are.
inline void switch_to(void* fiber) {
  __tsan_switch_to_fiber(fiber, __tsan_switch_to_fiber_no_sync);
}
inline void switch_to_synchronizing(void* fiber) {
  __tsan_switch_to_fiber(fiber, 0);
}
inline void release(void* sync) {
  __tsan_release(sync);
}
inline void acquire(void* sync) {
  __tsan_acquire(sync);
}
// Between these, the calling thread's synchronizations (a join, a lock) order nothing.
inline void ignore_sync_begin() {
  AnnotateIgnoreSyncBegin(__FILE__, __LINE__);
}
inline void ignore_sync_end() {
  AnnotateIgnoreSyncEnd(__FILE__, __LINE__);
}
// The fiber handles are handed between a fiber and its scheduler inside the
// switch itself, where TSan already sees the other side running.
inline void switch_handle(const void* address, long size) {
  AnnotateBenignRaceSized(__FILE__, __LINE__, address, size, "fiber handle passed in a switch");
}
#else
inline void switch_handle(const void*, long) {}
inline void* current_fiber() {
  return nullptr;
}
inline void* create_fiber() {
  return nullptr;
}
inline void set_name(void*, const char*) {}
inline void switch_to(void*) {}
inline void switch_to_synchronizing(void*) {}
inline void release(void*) {}
inline void acquire(void*) {}
inline void ignore_sync_begin() {}
inline void ignore_sync_end() {}
#endif
}  // namespace ember::simt::tsan
