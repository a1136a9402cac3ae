# Installs the built ember into a scratch prefix, then configures, builds and
# runs tests/install/consumer against it. Variables: BUILD_DIR, SOURCE_DIR, WORK_DIR,
# SANITIZE (the sanitizers ember was built with: a consumer must link their runtimes), WITH_CUDA,
# BENCHMARKS (whether the benchmark programs were built, and so installed).
file(REMOVE_RECURSE "${WORK_DIR}")
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT code EQUAL 0)
    message(FATAL_ERROR "failed (${code}): ${ARGN}\n${out}")
  endif()
  message(STATUS "${out}")
endfunction()
run(${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${WORK_DIR}/prefix")
set(flags "")
if(SANITIZE)
  string(REPLACE ";" "," sanitizers "${SANITIZE}")
  set(flags "-fsanitize=${sanitizers}")
endif()
run(${CMAKE_COMMAND} -S "${SOURCE_DIR}/tests/install/consumer" -B "${WORK_DIR}/build" -G Ninja
    "-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix" -DCMAKE_BUILD_TYPE=Release
    "-DCMAKE_CXX_FLAGS=${flags}" "-DCMAKE_EXE_LINKER_FLAGS=${flags}")
run(${CMAKE_COMMAND} --build "${WORK_DIR}/build")
run("${WORK_DIR}/build/consumer")

# The installed programs.
set(tools memory_snapshot_svg loss_curve_png)
if(BENCHMARKS)  # the benchmark programs are installed when they are built
  list(APPEND tools bench_allocator bench_matmul)
endif()
foreach(tool ${tools})
  if(NOT EXISTS "${WORK_DIR}/prefix/bin/${tool}")
    message(FATAL_ERROR "${tool} was not installed into ${WORK_DIR}/prefix/bin")
  endif()
endforeach()
run("${WORK_DIR}/prefix/bin/memory_snapshot_svg" --help)

# Run paths: no empty entry (which means the current directory) in what is installed or in the
# build tree's library and tools; the installed libember.so keeps its private libraries'
# directories (the OpenMP OpenBLAS) and the tools find it through $ORIGIN.
file(GLOB build_libs "${BUILD_DIR}/lib/libember.so" "${BUILD_DIR}/lib/*/libember.so")
list(TRANSFORM tools PREPEND "${WORK_DIR}/prefix/bin/" OUTPUT_VARIABLE installed_tools)
foreach(file "${WORK_DIR}/prefix/lib/libember.so" ${installed_tools} ${build_libs}
        "${BUILD_DIR}/tools/memory_snapshot_svg")
  execute_process(COMMAND readelf -d "${file}" RESULT_VARIABLE code OUTPUT_VARIABLE dynamic)
  string(REGEX MATCH "R(UN)?PATH\\)[^[]*\\[([^]]*)\\]" found "${dynamic}")
  set(runpath "${CMAKE_MATCH_2}")
  if(NOT code EQUAL 0 OR runpath MATCHES "^:|::|:$")
    message(FATAL_ERROR "${file}: a run path with an empty entry (or unreadable): '${runpath}'")
  endif()
  message(STATUS "${file}: run path '${runpath}'")
endforeach()
if(NOT build_libs)
  message(FATAL_ERROR "the build tree has no lib/libember.so")
endif()

# The build tree as a package: the same consumer against ember_DIR=<build dir>.
run(${CMAKE_COMMAND} -S "${SOURCE_DIR}/tests/install/consumer" -B "${WORK_DIR}/build_tree" -G Ninja
    "-Dember_DIR=${BUILD_DIR}" -DCMAKE_BUILD_TYPE=Release
    "-DCMAKE_CXX_FLAGS=${flags}" "-DCMAKE_EXE_LINKER_FLAGS=${flags}")
run(${CMAKE_COMMAND} --build "${WORK_DIR}/build_tree")
run("${WORK_DIR}/build_tree/consumer")

# pkg-config: the consumer compiled and linked with `pkg-config --cflags --libs ember` alone.
find_program(PKG_CONFIG pkg-config REQUIRED)
execute_process(COMMAND ${CMAKE_COMMAND} -E env "PKG_CONFIG_PATH=${WORK_DIR}/prefix/lib/pkgconfig"
                        ${PKG_CONFIG} --cflags --libs ember
                RESULT_VARIABLE code OUTPUT_VARIABLE pc_flags ERROR_VARIABLE pc_err
                OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT code EQUAL 0)
  message(FATAL_ERROR "pkg-config --cflags --libs ember failed: ${pc_err}")
endif()
separate_arguments(pc_flags UNIX_COMMAND "${pc_flags}")
separate_arguments(sanitize_flags UNIX_COMMAND "${flags}")
run(c++ "${SOURCE_DIR}/tests/install/consumer/main.cpp" -o "${WORK_DIR}/consumer_pkgconfig"
    ${sanitize_flags} ${pc_flags})
run("${WORK_DIR}/consumer_pkgconfig")

# With CUDA: a consumer's own .cu file (ops::map's kernel instantiated there) builds against the
# exported target with no flags of its own.
if(WITH_CUDA)
  run(${CMAKE_COMMAND} -S "${SOURCE_DIR}/tests/install/consumer_cuda" -B "${WORK_DIR}/build_cuda"
      -G Ninja "-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix" -DCMAKE_BUILD_TYPE=Release
      -DCMAKE_CUDA_ARCHITECTURES=90 "-DCMAKE_CXX_FLAGS=${flags}" "-DCMAKE_EXE_LINKER_FLAGS=${flags}")
  run(${CMAKE_COMMAND} --build "${WORK_DIR}/build_cuda")
  run("${WORK_DIR}/build_cuda/cuda_consumer")
endif()

# The README's program ("Using ember in your program"), compiled against the installed ember
# with pkg-config's flags and run: the guide's code cannot rot.
file(READ "${SOURCE_DIR}/README.md" readme)
string(FIND "${readme}" "## Using ember in your program" section)
string(SUBSTRING "${readme}" ${section} -1 readme)
string(FIND "${readme}" "```cpp\n" begin)
string(SUBSTRING "${readme}" ${begin} -1 readme)
string(LENGTH "```cpp\n" fence)
string(SUBSTRING "${readme}" ${fence} -1 readme)
string(FIND "${readme}" "```" end)
string(SUBSTRING "${readme}" 0 ${end} snippet)
file(WRITE "${WORK_DIR}/readme_program.cpp" "${snippet}")
run(c++ "${WORK_DIR}/readme_program.cpp" -o "${WORK_DIR}/readme_program" ${sanitize_flags}
    ${pc_flags})
execute_process(COMMAND "${WORK_DIR}/readme_program" RESULT_VARIABLE code OUTPUT_VARIABLE out
                ERROR_VARIABLE err)
if(NOT code EQUAL 0 OR NOT out MATCHES "step 200 loss 0\\.[0-9]+")
  message(FATAL_ERROR "the README's program failed (exit ${code}):\n${out}${err}")
endif()
message(STATUS "the README's program:\n${out}")
