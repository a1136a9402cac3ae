# Runs a training example (TRAIN, with ARGS) with --record-allocations TRACE, then replays the
# trace with bench_allocator (BENCH): it must complete, from the parameters to the last free.
file(REMOVE ${TRACE})
execute_process(COMMAND ${TRAIN} ${ARGS} --record-allocations ${TRACE} RESULT_VARIABLE code
                OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT code EQUAL 0)
  message(FATAL_ERROR "the training run failed: exit code ${code}")
endif()
execute_process(COMMAND ${BENCH} --trace ${TRACE} --repetitions 1 RESULT_VARIABLE code
                OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT code EQUAL 0)
  message(FATAL_ERROR "bench_allocator could not replay the trace: exit code ${code}")
endif()
file(STRINGS ${TRACE} header LIMIT_COUNT 2)  # TRACE: uncompressed
if(NOT header MATCHES "recorded by ember::memory::record_allocations on cpu: rank 0 of 1, train_")
  message(FATAL_ERROR "the trace's header does not say what run it is: ${header}")
endif()
if(NOT out MATCHES "reserved / requested \\(ratio\\) +1\\.[0-9]+ +1\\.[0-9]+ +1\\.[0-9]+")
  message(FATAL_ERROR "no reserved / requested figures")
endif()
