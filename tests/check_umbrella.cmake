# Every public header (include/ember, outside simt/ and detail/, but for the MPI/NCCL check
# macros) is included by ember/ember.hpp.
file(GLOB_RECURSE headers RELATIVE "${SOURCE_DIR}/include" "${SOURCE_DIR}/include/ember/*.hpp")
file(READ "${SOURCE_DIR}/include/ember/ember.hpp" umbrella)
set(missing "")
foreach(header IN LISTS headers)
  # MPI/NCCL check macros need mpi.h/nccl.h: included where those are used.
  if(header MATCHES "^ember/simt/|/detail/|^ember/ember.hpp$|check_(mpi|nccl)\\.hpp$")
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
