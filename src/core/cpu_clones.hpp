// Internal: EMBER_CPU_CLONES, for the CPU backend's compute-bound loops.
#pragma once

// The library targets baseline x86-64 (SSE2), but the compute-bound loops (exp, 16-bit
// conversions) run 2-4x faster with AVX2 or AVX-512. Those loops are compiled for several
// x86-64 levels and the best one for the running CPU is picked when the library loads (GCC
// function multiversioning). The results do not depend on the version: lanes are explicit and
// -ffp-contract=off (src/CMakeLists.txt) keeps GCC from contracting a * b + c into an FMA.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__ELF__) && \
    !defined(EMBER_NO_CPU_CLONES)
#define EMBER_CPU_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define EMBER_CPU_CLONES
#endif
