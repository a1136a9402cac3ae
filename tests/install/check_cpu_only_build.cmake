# Configures and builds ember without CUDA (EMBER_CUDA=OFF) in WORK_DIR, then trains train_mlp
# for a few steps: the CPU-only build (ops defined once in .cu files compiled as C++, no CUDA
# headers anywhere) must not rot while the main build has CUDA.
file(REMOVE_RECURSE "${WORK_DIR}")
execute_process(COMMAND ${CMAKE_COMMAND} -S "${SOURCE_DIR}" -B "${WORK_DIR}" -G Ninja
                        -DCMAKE_BUILD_TYPE=Release -DEMBER_CUDA=OFF -DEMBER_BUILD_TESTS=OFF
                        -DEMBER_BUILD_BENCHMARKS=OFF -DEMBER_BUILD_EXAMPLES=ON
                RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT code EQUAL 0)
  message(FATAL_ERROR "configuring the CPU-only build failed:\n${out}${err}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build "${WORK_DIR}" --target train_mlp
                RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT code EQUAL 0)
  message(FATAL_ERROR "building the CPU-only train_mlp failed:\n${out}${err}")
endif()
execute_process(COMMAND "${WORK_DIR}/examples/train_mlp" --steps 20 --log-every 10 --points 100
                        --width 16
                RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT code EQUAL 0 OR NOT out MATCHES "running on the CPU.*done: 20 steps")
  message(FATAL_ERROR "the CPU-only train_mlp did not train (exit code ${code})")
endif()
