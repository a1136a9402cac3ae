// AddressSanitizer hooks for fiber switches; no-ops unless the build uses
// -fsanitize=address (g++ then defines __SANITIZE_ADDRESS__). Without them ASan
// believes every fiber runs on its OS thread's stack, so an exception thrown in
// a fiber leaves the frames it unwinds poisoned and ASan later reports false
// stack overflows there.
#pragma once

#include <cstddef>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define EMBER_SIMT_ASAN 1
#endif

namespace ember::simt::asan {

// A stack as ASan describes it: its lowest address and its size.
struct Stack {
  const void* bottom = nullptr;
  size_t size = 0;
};

#if defined(EMBER_SIMT_ASAN)
// Call right before switching to `to`. `fake_stack` keeps the current
// context's fake stack (detect_stack_use_after_return) until it is switched
// back to; nullptr when the current context ends for good.
inline void start_switch(void** fake_stack, const Stack& to) {
  __sanitizer_start_switch_fiber(fake_stack, to.bottom, to.size);
}
// Call right after a switch lands, with what start_switch saved when this
// context was switched away from (nullptr on a fiber's first entry). Returns
// the stack the switch came from.
inline Stack finish_switch(void* fake_stack) {
  Stack from;
  __sanitizer_finish_switch_fiber(fake_stack, &from.bottom, &from.size);
  return from;
}
// Clears the shadow of a stack that is mapped or about to be unmapped: frames
// that never returned leave their redzones poisoned, and the addresses may be
// mapped again for something else.
inline void unpoison(const Stack& stack) {
  ASAN_UNPOISON_MEMORY_REGION(stack.bottom, stack.size);
}
#else
inline void start_switch(void**, const Stack&) {}
inline Stack finish_switch(void*) {
  return {};
}
inline void unpoison(const Stack&) {}
#endif

}  // namespace ember::simt::asan
