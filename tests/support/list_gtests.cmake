# The full GoogleTest name of each test of a test executable (Suite.Test,
# Prefix/Suite.Test/Param), written one a line to LIST_FILE for add_test_batches.cmake to
# group. Run after the executable is linked (tests/CMakeLists.txt, dpcore_register_tests):
#   cmake -DEXECUTABLE=... -DWORKING_DIRECTORY=... -DLIST_FILE=... -P list_gtests.cmake
# and by add_test_batches.cmake itself when the list is missing or older than the executable
# (a build folder reconfigured with DPCORE_TEST_BATCH after its tests were linked). Written
# under a temporary name and renamed, so a failed listing leaves no partial list behind.
function(dpcore_list_gtests EXECUTABLE WORKING_DIRECTORY LIST_FILE)
  execute_process(COMMAND "${EXECUTABLE}" --gtest_list_tests WORKING_DIRECTORY "${WORKING_DIRECTORY}"
                  TIMEOUT 60 OUTPUT_VARIABLE output ERROR_VARIABLE errors RESULT_VARIABLE result)
  if(NOT result EQUAL 0)
    file(REMOVE "${LIST_FILE}")
    message(FATAL_ERROR "list_gtests.cmake: '${EXECUTABLE} --gtest_list_tests' failed (${result}):\n${output}${errors}")
  endif()
  # --gtest_list_tests prints each suite flush left, ending with '.', then its tests indented by
  # two spaces; a typed or parameterised entry carries a '  # TypeParam = ...' or
  # '  # GetParam() = ...' comment, which is not part of the name.
  string(REPLACE ";" "\\;" output "${output}")
  string(REPLACE "\n" ";" lines "${output}")
  set(names "")
  set(suite "")
  foreach(line IN LISTS lines)
    string(REGEX REPLACE " *#.*$" "" line "${line}")
    if(line MATCHES "^Running main\\(\\)" OR line STREQUAL "")
      continue()
    elseif(line MATCHES "^  (.+)$")
      string(APPEND names "${suite}${CMAKE_MATCH_1}\n")
    elseif(line MATCHES "^([^ ]+\\.)$")
      set(suite "${CMAKE_MATCH_1}")
    else()
      message(FATAL_ERROR "list_gtests.cmake: '${EXECUTABLE} --gtest_list_tests' printed a line that is neither a suite nor a test: '${line}'")
    endif()
  endforeach()
  file(WRITE "${LIST_FILE}.tmp" "${names}")
  file(RENAME "${LIST_FILE}.tmp" "${LIST_FILE}")
endfunction()

if(CMAKE_SCRIPT_MODE_FILE STREQUAL CMAKE_CURRENT_LIST_FILE)
  dpcore_list_gtests("${EXECUTABLE}" "${WORKING_DIRECTORY}" "${LIST_FILE}")
endif()
