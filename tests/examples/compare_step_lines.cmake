# Runs TOOL with ARGS, then with ARGS and EXTRA, and checks that both print the same progress
# lines, throughput left out: an option that must not change the numbers (--cuda-graph: graph
# replays against eager steps, bitwise). LINES=mlp (default): train_mlp's "step N | loss ... |
# val acc ..."; LINES=gpt2: train_gpt2's "step N | loss ... (... bits/byte) | val ...".
if(LINES STREQUAL "gpt2")
  set(line_regex "step +[0-9]+ \\| loss [0-9.]+ \\([0-9.]+ bits/byte\\) \\| val [-0-9.]+")
else()
  set(line_regex "step +[0-9]+ \\| loss [0-9.]+ \\| val acc +[0-9.]+%")
endif()
function(run_tool extra out_lines)
  execute_process(COMMAND ${TOOL} ${ARGS} ${extra} RESULT_VARIABLE code OUTPUT_VARIABLE out
                  ERROR_VARIABLE err)
  message("${extra}:\n${out}${err}")
  if(NOT code EQUAL 0)
    message(FATAL_ERROR "'${extra}': exit code ${code}")
  endif()
  string(REGEX MATCHALL "${line_regex}" lines "${out}")
  if(NOT lines)
    message(FATAL_ERROR "'${extra}': no step lines")
  endif()
  set(${out_lines} "${lines}" PARENT_SCOPE)
endfunction()

run_tool("" base)
run_tool("${EXTRA}" with)
if(NOT base STREQUAL with)
  message(FATAL_ERROR "with ${EXTRA}:\n${with}\ndiffer from\n${base}")
endif()
message("the same progress lines with and without ${EXTRA}")
