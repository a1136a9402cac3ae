# ember_find_vendor_library(NAME HEADER LIBRARY TARGET): finds a CUDA-side vendor library
# (headers and one shared library, next to the CUDA toolkit or under $ENV{<NAME>_HOME}) and
# defines <NAME>_FOUND and the imported target TARGET.
include(FindPackageHandleStandardArgs)

function(ember_find_vendor_library name header library target)
  find_path(${name}_INCLUDE_DIR ${header} HINTS ${CUDAToolkit_INCLUDE_DIRS} ENV ${name}_HOME
            PATH_SUFFIXES include)
  find_library(${name}_LIBRARY ${library} HINTS ${CUDAToolkit_LIBRARY_DIR} ENV ${name}_HOME
               PATH_SUFFIXES lib lib64)
  find_package_handle_standard_args(${name} REQUIRED_VARS ${name}_LIBRARY ${name}_INCLUDE_DIR)
  if(${name}_FOUND AND NOT TARGET ${target})
    add_library(${target} UNKNOWN IMPORTED)
    set_target_properties(${target} PROPERTIES IMPORTED_LOCATION "${${name}_LIBRARY}"
                                               INTERFACE_INCLUDE_DIRECTORIES "${${name}_INCLUDE_DIR}")
  endif()
  mark_as_advanced(${name}_INCLUDE_DIR ${name}_LIBRARY)
  set(${name}_FOUND ${${name}_FOUND} PARENT_SCOPE)
endfunction()
