# tokenize_text TEXT into DIR (two training shards), then train_gpt2 --shards on them: the shards
# load, the loss is printed, and the data line counts the tokens tokenize_text wrote.
file(REMOVE_RECURSE "${DIR}")
file(SIZE "${TEXT}" bytes)
math(EXPR half "${bytes} / 2")
execute_process(COMMAND "${TOKENIZE}" --shard-tokens ${half} "${DIR}" "${TEXT}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "training tokens in [23] shard\\(s\\)")
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
file(REMOVE_RECURSE "${DIR}")
