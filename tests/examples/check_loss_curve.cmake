# train_mlp --log-csv, then loss_curve_png (TOOL) draws it: the file is a PNG of 800 x 480 (its
# signature and IHDR), and bad inputs are errors.
set(csv "${WORK_DIR}/loss_curve.csv")
set(png "${WORK_DIR}/loss_curve.png")
file(REMOVE "${csv}" "${png}")
execute_process(COMMAND "${TRAIN}" --steps 40 --log-every 10 --points 100 --width 16 --device cpu
                        --log-csv "${csv}" RESULT_VARIABLE code OUTPUT_QUIET ERROR_VARIABLE err)
if(NOT code EQUAL 0)
  message(FATAL_ERROR "train_mlp exited with ${code}: ${err}")
endif()
execute_process(COMMAND "${TOOL}" "${csv}" "${png}" RESULT_VARIABLE code OUTPUT_VARIABLE out
                ERROR_VARIABLE err)
if(NOT code EQUAL 0 OR NOT out MATCHES "40 steps \\(1 to 40\\) drawn into")
  message(FATAL_ERROR "loss_curve_png exited with ${code}: ${out}${err}")
endif()
file(READ "${png}" head LIMIT 24 HEX)
# The PNG signature, then the IHDR chunk: width 800 (0x320) and height 480 (0x1e0).
if(NOT head MATCHES "^89504e470d0a1a0a0000000d4948445200000320000001e0$")
  message(FATAL_ERROR "not an 800 x 480 PNG: ${head}")
endif()
foreach(case "/dev/zero;not a regular file" "${WORK_DIR}/no_such.csv;cannot open")
  list(GET case 0 input)
  list(GET case 1 expected)
  execute_process(COMMAND "${TOOL}" "${input}" "${png}" RESULT_VARIABLE code OUTPUT_VARIABLE out
                  ERROR_VARIABLE err)
  if(NOT code EQUAL 1 OR NOT err MATCHES "${expected}")
    message(FATAL_ERROR "${input}: exit ${code}, '${err}' (expected '${expected}')")
  endif()
endforeach()
file(WRITE "${WORK_DIR}/bad.csv" "step,loss,lr,val_accuracy,samples_per_s\n1,abc,0.1,,5\n")
execute_process(COMMAND "${TOOL}" "${WORK_DIR}/bad.csv" "${png}" RESULT_VARIABLE code
                ERROR_VARIABLE err)
if(NOT code EQUAL 1 OR NOT err MATCHES "line 2: bad step or loss")
  message(FATAL_ERROR "bad.csv: exit ${code}, '${err}'")
endif()
message(STATUS "loss_curve_png drew ${png}")
