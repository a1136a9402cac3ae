# bench_simt: the SIMT emulator's speed. Included from benchmarks/CMakeLists.txt:
#   include(${CMAKE_CURRENT_SOURCE_DIR}/CMakeLists.simt.cmake)
add_executable(bench_simt ${CMAKE_CURRENT_LIST_DIR}/bench_simt.cpp)
target_link_libraries(bench_simt PRIVATE ember_emulated benchmark::benchmark)
set_target_properties(bench_simt PROPERTIES ENABLE_EXPORTS ON)
ember_set_warnings(bench_simt)

# bench_allocator on the emulator's CUDA runtime and driver (cudaMalloc, and the virtual memory
# API over host memory): `--device cuda:0` replays a trace through the real upstreams' code
# without a GPU (tests: emulated.bench_allocator_device_replay).
add_executable(bench_allocator_emulated ${CMAKE_CURRENT_LIST_DIR}/bench_allocator.cpp
                                        ${CMAKE_CURRENT_LIST_DIR}/allocator_device_replay.cpp)
target_link_libraries(bench_allocator_emulated PRIVATE ember_emulated benchmark::benchmark)
target_compile_definitions(bench_allocator_emulated PRIVATE EMBER_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
set_target_properties(bench_allocator_emulated PROPERTIES ENABLE_EXPORTS ON)
ember_set_warnings(bench_allocator_emulated)

# bench_train_step on emulated cuda:0: its GPU rows' code (the CUDA-graph rows included) runs in
# ctest without a GPU (emulated.bench_train_step_graph_rows); timings mean nothing there.
add_executable(bench_train_step_emulated ${CMAKE_CURRENT_LIST_DIR}/bench_train_step.cpp)
target_link_libraries(bench_train_step_emulated PRIVATE ember_emulated benchmark::benchmark)
set_target_properties(bench_train_step_emulated PROPERTIES ENABLE_EXPORTS ON)
ember_set_warnings(bench_train_step_emulated)
