# Runs train_resmlp (TOOL) with ARGS and no checkpointing, then with each mode in MODES, and
# checks that every run finishes with bitwise the same losses (checkpointing recomputes exactly)
# and a lower peak allocation.
function(run_resmlp mode out_loss out_peak)
  execute_process(COMMAND ${TOOL} ${ARGS} --checkpoint ${mode} RESULT_VARIABLE code
                  OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("--checkpoint ${mode}:\n${out}${err}")
  if(NOT code EQUAL 0)
    message(FATAL_ERROR "--checkpoint ${mode}: exit code ${code}")
  endif()
  if(NOT out MATCHES "loss ([0-9.]+) -> ([0-9.]+), validation accuracy +([0-9.]+)%.*peak allocated ([0-9.]+) MiB")
    message(FATAL_ERROR "--checkpoint ${mode}: no 'done:' line")
  endif()
  set(${out_loss} "${CMAKE_MATCH_1} ${CMAKE_MATCH_2} ${CMAKE_MATCH_3}" PARENT_SCOPE)
  set(${out_peak} ${CMAKE_MATCH_4} PARENT_SCOPE)
endfunction()

run_resmlp(none loss_none peak_none)
foreach(mode IN LISTS MODES)
  run_resmlp(${mode} loss peak)
  if(NOT loss STREQUAL loss_none)
    message(FATAL_ERROR "--checkpoint ${mode}: losses and accuracy '${loss}' differ from "
                        "those without checkpointing '${loss_none}'")
  endif()
  if(NOT peak LESS peak_none)
    message(FATAL_ERROR "--checkpoint ${mode}: peak ${peak} MiB is not below ${peak_none} MiB")
  endif()
  message("--checkpoint ${mode}: same losses, peak ${peak} MiB (none: ${peak_none} MiB)")
endforeach()
