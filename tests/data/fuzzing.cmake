# libFuzzer targets for the parsers of untrusted files, each run as a short ctest.
#
# A fuzzer is compiled by clang++-14 straight from the parser sources it names
# (-fsanitize=fuzzer,address,undefined), not linked to libdpcore: instrumenting the whole
# library would slow the build and fuzz nothing more. Parsers that are fuzzed therefore
# depend only on kernels/error.h (and error.cpp), header-only code and zlib.
#
#   dpcore_add_fuzzer(<name> SOURCES <file>... [SEEDS <dir>] [LIBS <flag>...]
#                     [DEPENDS <target>...] [MALLOC_LIMIT_MB <n>])
#
# SOURCES are relative to the repository root (or absolute) and include the file that
# defines LLVMFuzzerTestOneInput. The build target and executable are fuzz_<name> (in
# ${CMAKE_CURRENT_BINARY_DIR}); the ctest fuzz_<name> (label "fuzz") runs it for
# DPCORE_FUZZ_SECONDS from the inputs in SEEDS (DEPENDS names the targets that create
# them), keeping what it finds in fuzz/<name>/corpus and any crashing input in fuzz/<name>/
# under the build directory; rerun a crash with: fuzz_<name> <crash file>. A single allocation above
# MALLOC_LIMIT_MB (default 256) counts as a failure: it is how a parser that believes a
# lying size field shows up. Without a working clang++-14 + libFuzzer the function does
# nothing and configure says so once.
include_guard(GLOBAL)

set(DPCORE_FUZZ_SECONDS 5 CACHE STRING "How long each fuzz ctest runs, in seconds")

find_program(DPCORE_FUZZ_CXX clang++-14)
set(DPCORE_FUZZ_WORKS OFF)
if(DPCORE_SANITIZE)
  # The fuzzers carry their own sanitizers and run in the normal build (scripts/test.sh).
  message(STATUS "dpcore: sanitizer build: fuzz tests are registered in the normal build only")
elseif(NOT DPCORE_FUZZ_CXX)
  message(STATUS "dpcore: clang++-14 not found: fuzz tests are not registered (Debian: clang-14 libclang-rt-14-dev)")
else()
  # clang without libclang-rt-14-dev compiles but cannot link -fsanitize=fuzzer: try it.
  set(probe_dir ${CMAKE_BINARY_DIR}/CMakeFiles/dpcore_fuzz_probe)
  file(WRITE ${probe_dir}/probe.cpp
       "#include <cstddef>\n#include <cstdint>\n"
       "extern \"C\" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n")
  execute_process(COMMAND ${DPCORE_FUZZ_CXX} -fsanitize=fuzzer,address,undefined ${probe_dir}/probe.cpp
                          -o ${probe_dir}/probe
                  RESULT_VARIABLE probe_rc OUTPUT_QUIET ERROR_VARIABLE probe_err)
  if(probe_rc EQUAL 0)
    set(DPCORE_FUZZ_WORKS ON)
    message(STATUS "dpcore: fuzz tests with ${DPCORE_FUZZ_CXX}, ${DPCORE_FUZZ_SECONDS} s each")
  else()
    message(STATUS "dpcore: ${DPCORE_FUZZ_CXX} cannot link libFuzzer: fuzz tests are not registered "
                   "(Debian: libclang-rt-14-dev): ${probe_rc} ${probe_err}")
  endif()
endif()

function(dpcore_add_fuzzer name)
  if(NOT DPCORE_FUZZ_WORKS)
    return()
  endif()
  cmake_parse_arguments(FZ "" "SEEDS;MALLOC_LIMIT_MB" "SOURCES;LIBS;DEPENDS" ${ARGN})
  if(NOT FZ_SOURCES)
    message(FATAL_ERROR "dpcore_add_fuzzer(${name}): no SOURCES")
  endif()
  if(NOT FZ_MALLOC_LIMIT_MB)
    set(FZ_MALLOC_LIMIT_MB 256)
  endif()

  # Sources, and the headers beside them and in engine/ as dependencies: the compiler is
  # run by hand, so CMake does not scan includes.
  set(sources)
  set(headers ${PROJECT_SOURCE_DIR}/kernels/error.h)
  foreach(src ${FZ_SOURCES})
    get_filename_component(src ${src} ABSOLUTE BASE_DIR ${PROJECT_SOURCE_DIR})
    list(APPEND sources ${src})
    get_filename_component(dir ${src} DIRECTORY)
    file(GLOB near CONFIGURE_DEPENDS ${dir}/*.h)
    list(APPEND headers ${near})
  endforeach()

  # The executable is named apart from its target: Ninja refuses a target and a file of one name.
  set(exe ${CMAKE_CURRENT_BINARY_DIR}/fuzz_${name}.bin)
  add_custom_command(
    OUTPUT ${exe}
    COMMAND ${DPCORE_FUZZ_CXX} -std=c++17 -O1 -g -fno-omit-frame-pointer
            -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
            -I${PROJECT_SOURCE_DIR} ${sources} -o ${exe} ${FZ_LIBS}
    DEPENDS ${sources} ${headers}
    COMMENT "Building fuzzer fuzz_${name} with clang++-14"
    VERBATIM)
  add_custom_target(fuzz_${name} ALL DEPENDS ${exe} ${FZ_DEPENDS})

  set(work ${CMAKE_CURRENT_BINARY_DIR}/fuzz/${name})
  file(MAKE_DIRECTORY ${work}/corpus)
  # The first directory receives new interesting inputs; the seeds are only read.
  add_test(NAME fuzz_${name}
           COMMAND ${exe} -max_total_time=${DPCORE_FUZZ_SECONDS} -timeout=20 -rss_limit_mb=2048
                   -malloc_limit_mb=${FZ_MALLOC_LIMIT_MB} -print_final_stats=1 -artifact_prefix=${work}/
                   ${work}/corpus ${FZ_SEEDS})
  math(EXPR limit "${DPCORE_FUZZ_SECONDS} * 3 + 60")
  set_tests_properties(fuzz_${name} PROPERTIES TIMEOUT ${limit} LABELS fuzz)
endfunction()
