# Finds OpenBLAS for the CPU backend's GEMM. Sets EMBER_BLAS_LIBRARY (what ember
# links) and EMBER_CBLAS_INCLUDE_DIR.
#
# ember's own loops use OpenMP. Debian's default OpenBLAS runs its own pthread
# pool, and on a small machine the two pools spin against each other (measured:
# train_mlp 3.6x slower). So ember links the OpenMP build of OpenBLAS
# (libopenblas-openmp-dev) when it is installed, by full path, which also gives
# binaries a run path to it; the pthread build is the fallback.
find_library(EMBER_OPENBLAS_OPENMP NAMES openblas NO_DEFAULT_PATH
             PATHS /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp)
find_path(EMBER_CBLAS_INCLUDE_DIR cblas.h
          PATH_SUFFIXES ${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp openblas REQUIRED)
if(EMBER_OPENBLAS_OPENMP)
  set(EMBER_BLAS_LIBRARY "${EMBER_OPENBLAS_OPENMP}")
  set(EMBER_BLAS_IS_TARGET OFF)
  message(STATUS "ember: OpenBLAS (OpenMP build): ${EMBER_OPENBLAS_OPENMP}")
else()
  set(BLA_VENDOR OpenBLAS)
  find_package(BLAS REQUIRED)
  set(EMBER_BLAS_LIBRARY BLAS::BLAS)
  set(EMBER_BLAS_IS_TARGET ON)
  message(WARNING "ember: using the pthread build of OpenBLAS, whose threads compete with "
                  "OpenMP's; install libopenblas-openmp-dev for a faster CPU backend")
endif()
