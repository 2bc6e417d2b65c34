# Included by ctest (a directory's TEST_INCLUDE_FILES, one generated include per test
# executable: tests/CMakeLists.txt, dpcore_register_tests). Registers an executable's tests
# in batches: one ctest test runs up to BATCH of them in one process, with --gtest_filter
# naming each. The sanitizer builds start a process in about 0.1-0.2 s (mapping the
# instrumented library, the leak check at exit), as long as most of their tests run: one a
# process, start-up was half the AddressSanitizer stage's time (docs/testing.md).
#
# A batch is named EXECUTABLE.batchIofN; with BATCH 1 each test is registered under its own
# GoogleTest name. Tests whose "EXECUTABLE Suite.Test" matches the regular expression in the
# environment variable DPCORE_TEST_EXCLUDE are left out (the batches' stand-in for
# `ctest -E`, which can only leave out whole batches). An executable not built (a build of
# some targets only) registers EXECUTABLE_NOT_BUILT, which fails if selected, as
# gtest_discover_tests does.
include(${CMAKE_CURRENT_LIST_DIR}/list_gtests.cmake)

function(dpcore_add_test_batches)
  cmake_parse_arguments(ARG "" "NAME;EXECUTABLE;LIST_FILE;WORKING_DIRECTORY;BATCH" "LABELS;ENVIRONMENT" ${ARGN})
  if(NOT EXISTS "${ARG_EXECUTABLE}")
    add_test(${ARG_NAME}_NOT_BUILT ${ARG_NAME}_NOT_BUILT)
    return()
  endif()
  if(NOT EXISTS "${ARG_LIST_FILE}" OR "${ARG_EXECUTABLE}" IS_NEWER_THAN "${ARG_LIST_FILE}")
    dpcore_list_gtests("${ARG_EXECUTABLE}" "${ARG_WORKING_DIRECTORY}" "${ARG_LIST_FILE}")
  endif()
  file(STRINGS "${ARG_LIST_FILE}" tests)
  set(kept "")
  foreach(test IN LISTS tests)
    if(NOT "$ENV{DPCORE_TEST_EXCLUDE}" STREQUAL "" AND "${ARG_NAME} ${test}" MATCHES "$ENV{DPCORE_TEST_EXCLUDE}")
      continue()
    endif()
    list(APPEND kept "${test}")
  endforeach()
  list(LENGTH kept count)
  if(count EQUAL 0)
    return()
  endif()
  math(EXPR batches "(${count} + ${ARG_BATCH} - 1) / ${ARG_BATCH}")
  math(EXPR last "${batches} - 1")
  foreach(batch RANGE ${last})
    math(EXPR first "${batch} * ${ARG_BATCH}")
    list(SUBLIST kept ${first} ${ARG_BATCH} members)
    if(ARG_BATCH EQUAL 1)
      set(name "${members}")
      set(skip_properties SKIP_REGULAR_EXPRESSION "\\[  SKIPPED \\]")  # as gtest_discover_tests
    else()
      math(EXPR number "${batch} + 1")
      set(name "${ARG_NAME}.batch${number}of${batches}")
      set(skip_properties "")  # one skipped test does not make a batch skipped
    endif()
    list(JOIN members ":" filter)
    add_test("${name}" "${ARG_EXECUTABLE}" "--gtest_filter=${filter}")
    set_tests_properties("${name}" PROPERTIES WORKING_DIRECTORY "${ARG_WORKING_DIRECTORY}"
                         ENVIRONMENT "${ARG_ENVIRONMENT}" LABELS "${ARG_LABELS}" ${skip_properties})
  endforeach()
endfunction()
