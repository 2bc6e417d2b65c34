# cmake -DWORK_DIR=... -P add_test_batches_test.cmake (ctest's `test_batches`, normal build)
# The batching of the sanitizer builds (add_test_batches.cmake, list_gtests.cmake) checked
# through ctest itself, on a stand-in test executable: a shell script that prints what
# --gtest_list_tests prints for a plain, a typed and a value-parameterised suite. Every
# listed test lands in exactly one batch, in order, the excluded ones in none, and a batch
# of one is named by its test.
set(script_dir ${CMAKE_CURRENT_LIST_DIR})
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")
set(fake "${WORK_DIR}/fake_test")
file(WRITE "${fake}" [=[#!/bin/sh
[ "$1" = --gtest_list_tests ] || exit 3
cat <<'LIST'
Running main() from ./googletest/src/gtest_main.cc
Plain.
  First
  Second
Conv2dTest/CudaHost.  # TypeParam = dpcore::testing::CudaBackend
  ForwardMatchesReference
  BackwardWeightIsDeterministic
Local/Collectives.
  AllreduceSum/world2_n1000000_float32  # GetParam() = (2, 1000000, float32)
  AllreduceSum/world2_n7_float64  # GetParam() = (2, 7, float64)
LIST
]=])
file(CHMOD "${fake}" PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE)

function(expect_commands batch exclude expected)
  file(WRITE "${WORK_DIR}/CTestTestfile.cmake"
       "include([==[${script_dir}/add_test_batches.cmake]==])
dpcore_add_test_batches(NAME fake_test EXECUTABLE [==[${fake}]==] LIST_FILE [==[${WORK_DIR}/fake_tests.txt]==]
  WORKING_DIRECTORY [==[${WORK_DIR}]==] BATCH ${batch} LABELS a b ENVIRONMENT X=1)
")
  set(ENV{DPCORE_TEST_EXCLUDE} "${exclude}")
  execute_process(COMMAND ${CMAKE_CTEST_COMMAND} -N -V WORKING_DIRECTORY "${WORK_DIR}"
                  OUTPUT_VARIABLE output RESULT_VARIABLE result)
  string(REGEX MATCHALL "--gtest_filter=[^\"]*|X=1|Labels: [^\n]*|Test +#[0-9]+: [^\n]*" found "${output}")
  string(REGEX REPLACE "Test +#" "Test #" found "${found}")
  if(NOT result EQUAL 0 OR NOT found STREQUAL expected)
    message(FATAL_ERROR "BATCH ${batch}, DPCORE_TEST_EXCLUDE '${exclude}':\n  expected ${expected}\n  found    ${found}\n${output}")
  endif()
endfunction()

expect_commands(2 "_n1000000_"
  "--gtest_filter=Plain.First:Plain.Second;X=1;Labels: a b;Test #1: fake_test.batch1of3;--gtest_filter=Conv2dTest/CudaHost.ForwardMatchesReference:Conv2dTest/CudaHost.BackwardWeightIsDeterministic;X=1;Labels: a b;Test #2: fake_test.batch2of3;--gtest_filter=Local/Collectives.AllreduceSum/world2_n7_float64;X=1;Labels: a b;Test #3: fake_test.batch3of3")
expect_commands(1 "^fake_test Conv2dTest|^other_test Plain"
  "--gtest_filter=Plain.First;X=1;Labels: a b;Test #1: Plain.First;--gtest_filter=Plain.Second;X=1;Labels: a b;Test #2: Plain.Second;--gtest_filter=Local/Collectives.AllreduceSum/world2_n1000000_float32;X=1;Labels: a b;Test #3: Local/Collectives.AllreduceSum/world2_n1000000_float32;--gtest_filter=Local/Collectives.AllreduceSum/world2_n7_float64;X=1;Labels: a b;Test #4: Local/Collectives.AllreduceSum/world2_n7_float64")
# A listing that fails stops ctest with the executable's output, and leaves no list.
file(WRITE "${fake}" "#!/bin/sh\necho 'cannot start' >&2\nexit 3\n")
file(REMOVE "${WORK_DIR}/fake_tests.txt")
execute_process(COMMAND ${CMAKE_CTEST_COMMAND} -N WORKING_DIRECTORY "${WORK_DIR}"
                OUTPUT_VARIABLE output ERROR_VARIABLE errors RESULT_VARIABLE result)
string(REGEX REPLACE "[ \n]+" " " errors "${errors}")  # CMake wraps its messages at the path's length
if(NOT errors MATCHES "fake_test --gtest_list_tests' failed \\(3\\)" OR NOT errors MATCHES "cannot start"
   OR EXISTS "${WORK_DIR}/fake_tests.txt")
  message(FATAL_ERROR "a failed listing was not reported with its output: ${output}${errors}")
endif()
message(STATUS "add_test_batches: batches, exclusion and failed listings as expected")
