# tokenize_text TEXT into DIR (two training shards), then train_gpt2 --shards on them: the shards
# load, the loss is printed, and the data line counts the tokens tokenize_text wrote.
# An earlier run's five shards are there first: the run below replaces them, and removes the
# ones past its own, so that the glob finds its shards only.
file(REMOVE_RECURSE "${DIR}")
file(SIZE "${TEXT}" bytes)
math(EXPR half "${bytes} / 2")
math(EXPR fifth "${bytes} / 5 + 1")
execute_process(COMMAND "${TOKENIZE}" --val-fraction 0 --shard-tokens ${fifth} "${DIR}" "${TEXT}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT EXISTS "${DIR}/train_000004.bin")
  message(FATAL_ERROR "tokenize_text (five shards) failed (${rc}): ${out}${err}")
endif()
execute_process(COMMAND "${TOKENIZE}" --shard-tokens ${half} "${DIR}" "${TEXT}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "training tokens in [23] shard\\(s\\)"
   OR NOT out MATCHES "training shard\\(s\\) of an earlier run removed"
   OR EXISTS "${DIR}/train_000004.bin")
  message(FATAL_ERROR "tokenize_text failed (${rc}): ${out}${err}")
endif()
string(REGEX MATCH "([0-9]+) training tokens" m "${out}")
set(train_tokens "${CMAKE_MATCH_1}")
execute_process(COMMAND "${TRAIN}" --shards "${DIR}/train_*.bin" --val-shards "${DIR}/val_*.bin"
                        --device cpu --seq 32 --batch 8 --steps 10 --log-every 5 --eval-every 5
                        --eval-batches 1 --sample-tokens 10
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "data: ${train_tokens} training tokens.*bytes.*done: 10 steps.*sample after step 10:")
  message(FATAL_ERROR "train_gpt2 --shards failed (${rc}): ${out}${err}")
endif()
# Bad output directories and empty text are errors, not crashes.
execute_process(COMMAND "${TOKENIZE}" "${TEXT}" "${TEXT}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 1 OR NOT err MATCHES "cannot create the output directory")
  message(FATAL_ERROR "tokenize_text into a file: (${rc}) ${out}${err}")
endif()
file(WRITE "${DIR}/empty.txt" "")
execute_process(COMMAND "${TOKENIZE}" "${DIR}/empty_out" "${DIR}/empty.txt"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 1 OR NOT err MATCHES "the files hold no text")
  message(FATAL_ERROR "tokenize_text of empty text: (${rc}) ${out}${err}")
endif()
file(REMOVE_RECURSE "${DIR}")
