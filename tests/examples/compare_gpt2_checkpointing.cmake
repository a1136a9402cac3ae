# Runs train_gpt2 (TOOL) with ARGS and OPTION BASE (default: --checkpoint none), then with
# OPTION set to each value in MODES, and checks that every run prints bitwise the same training
# and validation losses: checkpointing recomputes exactly, at every sequence length of
# --seq-lengths; data::Loader gives the same batches for any number of workers.
if(NOT OPTION)
  set(OPTION --checkpoint)
  set(BASE none)
endif()
function(run_gpt2 mode out_losses)
  execute_process(COMMAND ${TOOL} ${ARGS} ${OPTION} ${mode} RESULT_VARIABLE code
                  OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("${OPTION} ${mode}:\n${out}${err}")
  if(NOT code EQUAL 0)
    message(FATAL_ERROR "${OPTION} ${mode}: exit code ${code}")
  endif()
  string(REGEX MATCHALL "loss [0-9.]+ \\([0-9.]+ bits/byte\\) \\| val [-0-9.]+" losses "${out}")
  if(NOT losses)
    message(FATAL_ERROR "${OPTION} ${mode}: no step lines")
  endif()
  set(${out_losses} "${losses}" PARENT_SCOPE)
endfunction()

run_gpt2(${BASE} losses_base)
foreach(mode IN LISTS MODES)
  run_gpt2(${mode} losses)
  if(NOT losses STREQUAL losses_base)
    message(FATAL_ERROR "${OPTION} ${mode}: losses\n${losses}\ndiffer from those of ${OPTION} "
                        "${BASE}\n${losses_base}")
  endif()
  message("${OPTION} ${mode}: the same losses")
endforeach()
