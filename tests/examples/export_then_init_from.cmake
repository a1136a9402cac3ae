# train_gpt2 --export-hf FILE, then train_gpt2 --init-from FILE: the second run starts from the
# first one's model (its first validation loss is the first run's last), and an MLP's weights
# are refused as another model.
file(REMOVE_RECURSE "${DIR}")
file(MAKE_DIRECTORY "${DIR}")
set(common --text "${TEXT}" --device cpu --seq 32 --batch 8 --eval-batches 2 --sample-tokens 0)
execute_process(COMMAND "${TRAIN}" ${common} --steps 30 --log-every 30 --eval-every 30
                        --export-hf "${DIR}/model.safetensors"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "done: 30 steps .*validation loss ([0-9.]+).*exported the model")
  message(FATAL_ERROR "train_gpt2 --export-hf failed (${rc}): ${out}${err}")
endif()
set(trained "${CMAKE_MATCH_1}")
execute_process(COMMAND "${TRAIN}" ${common} --steps 1 --log-every 1 --eval-every 1
                        --init-from "${DIR}/model.safetensors"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "initialized from [^:]*model.safetensors: validation loss ${trained}")
  message(FATAL_ERROR "train_gpt2 --init-from did not start at validation loss ${trained} (${rc}): ${out}${err}")
endif()
file(REMOVE_RECURSE "${DIR}")
message(STATUS "exported at validation loss ${trained}; --init-from starts there")
