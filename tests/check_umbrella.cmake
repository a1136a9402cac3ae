# Every public header (include/ember, outside simt/ and detail/, but for the CUDA/MPI/NCCL
# check macros) is included by ember/ember.hpp.
file(GLOB_RECURSE headers RELATIVE "${SOURCE_DIR}/include" "${SOURCE_DIR}/include/ember/*.hpp")
file(READ "${SOURCE_DIR}/include/ember/ember.hpp" umbrella)
set(missing "")
foreach(header IN LISTS headers)
  # The CUDA/MPI/NCCL check macros need those libraries' headers: included where they are used
  # (a CPU-only program of a CUDA-built ember compiles without the CUDA toolkit).
  if(header MATCHES "^ember/simt/|/detail/|^ember/ember.hpp$|check_(cuda|mpi|nccl)\\.hpp$")
    continue()
  endif()
  string(FIND "${umbrella}" "#include \"${header}\"" at)
  if(at EQUAL -1)
    list(APPEND missing "${header}")
  endif()
endforeach()
if(missing)
  message(FATAL_ERROR "ember/ember.hpp does not include: ${missing}")
endif()
message("ember/ember.hpp includes all public headers")
