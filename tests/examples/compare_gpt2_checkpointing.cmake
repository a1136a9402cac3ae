# Runs train_gpt2 (TOOL) with ARGS and no checkpointing, then with each mode in MODES, and checks
# that every run prints bitwise the same training and validation losses (checkpointing
# recomputes exactly, at every sequence length of --seq-lengths).
function(run_gpt2 mode out_losses)
  execute_process(COMMAND ${TOOL} ${ARGS} --checkpoint ${mode} RESULT_VARIABLE code
                  OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("--checkpoint ${mode}:\n${out}${err}")
  if(NOT code EQUAL 0)
    message(FATAL_ERROR "--checkpoint ${mode}: exit code ${code}")
  endif()
  string(REGEX MATCHALL "loss [0-9.]+ \\([0-9.]+ bits/byte\\) \\| val [-0-9.]+" losses "${out}")
  if(NOT losses)
    message(FATAL_ERROR "--checkpoint ${mode}: no step lines")
  endif()
  set(${out_losses} "${losses}" PARENT_SCOPE)
endfunction()

run_gpt2(none losses_none)
foreach(mode IN LISTS MODES)
  run_gpt2(${mode} losses)
  if(NOT losses STREQUAL losses_none)
    message(FATAL_ERROR "--checkpoint ${mode}: losses\n${losses}\ndiffer from those without "
                        "checkpointing\n${losses_none}")
  endif()
  message("--checkpoint ${mode}: the same losses")
endforeach()
