# Runs COMMAND (a list) and checks its exit code (EXIT_CODE; "nonzero" for any failure) and that
# its output matches REGEX.
execute_process(COMMAND ${COMMAND} RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(EXIT_CODE STREQUAL "nonzero")
  if(code STREQUAL "0")
    message(FATAL_ERROR "exit code 0, expected a failure")
  endif()
elseif(NOT code STREQUAL "${EXIT_CODE}")
  message(FATAL_ERROR "exit code ${code}, expected ${EXIT_CODE}")
endif()
if(NOT "${out}${err}" MATCHES "${REGEX}")
  message(FATAL_ERROR "output does not match '${REGEX}'")
endif()
