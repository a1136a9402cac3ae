# bench_simt: the SIMT emulator's speed. Included from benchmarks/CMakeLists.txt:
#   include(${CMAKE_CURRENT_SOURCE_DIR}/CMakeLists.simt.cmake)
add_executable(bench_simt ${CMAKE_CURRENT_LIST_DIR}/bench_simt.cpp)
target_link_libraries(bench_simt PRIVATE ember_emulated benchmark::benchmark)
set_target_properties(bench_simt PROPERTIES ENABLE_EXPORTS ON)
ember_set_warnings(bench_simt)
