# A CUDA-built ember used by a CPU-only program on a machine without the CUDA toolkit: ember is
# installed into WORK_DIR, then, with the toolkit hidden (without_cuda_toolkit.sh), the consumer
# project configures (find_package(ember) asks for no CUDA package), builds and trains on the
# CPU. libember.so must not need a CUDA library to load. Variables: BUILD_DIR, SOURCE_DIR,
# WORK_DIR, TOOLKIT (the CUDA toolkit's directory), SANITIZE.
file(REMOVE_RECURSE "${WORK_DIR}")
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(code EQUAL 77)
    message("${out}")
    message(FATAL_ERROR "EMBER_SKIP")  # the test's SKIP_REGULAR_EXPRESSION
  endif()
  if(NOT code EQUAL 0)
    message(FATAL_ERROR "failed (${code}): ${ARGN}\n${out}")
  endif()
  message(STATUS "${out}")
  set(out "${out}" PARENT_SCOPE)
endfunction()
run(${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${WORK_DIR}/prefix")

# No CUDA library among what libember.so needs: cudart is linked in, cuBLASLt and NCCL are
# loaded when first used.
run(readelf -d "${WORK_DIR}/prefix/lib/libember.so")
if(out MATCHES "NEEDED[^\n]*(cuda|cublas|nccl|cudnn)")
  message(FATAL_ERROR "libember.so needs a CUDA library:\n${out}")
endif()

set(flags "")
if(SANITIZE)
  string(REPLACE ";" "," sanitizers "${SANITIZE}")
  set(flags "-fsanitize=${sanitizers}")
endif()
set(hide sh "${SOURCE_DIR}/tests/install/without_cuda_toolkit.sh" "${TOOLKIT}")
# The toolkit is really gone in there.
run(${hide} sh -c "! nvcc --version >/dev/null 2>&1 && ! test -e /usr/local/cuda/include/cuda_runtime.h && ! test -e /usr/local/include/cuda_runtime.h && echo hidden")
run(${hide} ${CMAKE_COMMAND} -S "${SOURCE_DIR}/tests/install/consumer" -B "${WORK_DIR}/build"
    -G Ninja "-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix" -DCMAKE_BUILD_TYPE=Release
    "-DCMAKE_CXX_FLAGS=${flags}" "-DCMAKE_EXE_LINKER_FLAGS=${flags}")
run(${hide} ${CMAKE_COMMAND} --build "${WORK_DIR}/build")
run(${hide} "${WORK_DIR}/build/consumer")
if(NOT out MATCHES "CUDA devices: 0" OR NOT out MATCHES "learned w=3")
  message(FATAL_ERROR "the consumer did not train on the CPU without the toolkit:\n${out}")
endif()
