# Shared helpers: per-target warnings and sanitizers (no global flags).

# ThreadSanitizer: every target of the build, programs and shared libraries
# alike, uses clang's shared TSan runtime, so libkvtier.so and the program it
# is preloaded into share one. TSan runs only in programs built with it:
# preloaded into any other (bash, python3) its runtime crashes at start, so
# kvtier_preload_test leaves such commands out of this build. Clang 14 does
# not initialise the shared runtime before libstdc++'s constructors run; a
# .preinit_array entry in each program (cmake/tsan_preinit.c) does it first.
if(KVTIER_TSAN)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "KVTIER_TSAN needs clang (CC=clang CXX=clang++)")
  endif()
  execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-runtime-dir
    OUTPUT_VARIABLE KVTIER_SANITIZER_RUNTIME_DIR OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT EXISTS "${KVTIER_SANITIZER_RUNTIME_DIR}/libclang_rt.tsan-x86_64.so")
    message(FATAL_ERROR "KVTIER_TSAN: no shared TSan runtime in ${KVTIER_SANITIZER_RUNTIME_DIR} "
      "(Debian: apt-get install libclang-rt-dev)")
  endif()
  set(tsan_preinit "${CMAKE_BINARY_DIR}/tsan_preinit.o")
  execute_process(COMMAND ${CMAKE_C_COMPILER} -c ${PROJECT_SOURCE_DIR}/cmake/tsan_preinit.c
    "-DKVTIER_TSAN_SUPPRESSIONS=\"${PROJECT_SOURCE_DIR}/tests/tsan.supp\"" -o ${tsan_preinit}
    RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "KVTIER_TSAN: cannot compile cmake/tsan_preinit.c")
  endif()
  # Built at configure time (a link option, not a target): an edit of it
  # configures again; programs link it anew when they next relink.
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
    ${PROJECT_SOURCE_DIR}/cmake/tsan_preinit.c)
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
  add_link_options(-fsanitize=thread -shared-libsan -Wl,-rpath,${KVTIER_SANITIZER_RUNTIME_DIR}
    "$<$<STREQUAL:$<TARGET_PROPERTY:TYPE>,EXECUTABLE>:${tsan_preinit}>")
endif()

# libFuzzer: everything instrumented for coverage and with ASan+UBSan; the
# fuzz targets themselves link the fuzzer (tests/fuzz/CMakeLists.txt).
if(KVTIER_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "KVTIER_FUZZ needs clang (CC=clang CXX=clang++)")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer
    -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()

# The linker: lld where it is installed (scripts/setup-deps installs it).
# Each build links about a hundred test programs; lld links one in 0.4 s
# where the default linker took 1 s. Not for nvcc's links.
if(KVTIER_LLD)
  find_program(KVTIER_LD_LLD NAMES ld.lld)
  if(KVTIER_LD_LLD)
    add_link_options($<$<LINK_LANGUAGE:C,CXX>:-fuse-ld=lld>)
  endif()
endif()

function(kvtier_target_defaults target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wno-unused-parameter)
  if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    # The lock annotations of runtime/thread_annotations.h.
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wthread-safety>)
  endif()
  if(KVTIER_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
  if(KVTIER_SANITIZE)
    target_compile_options(${target} PRIVATE -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
    target_link_options(${target} PRIVATE -fsanitize=address,undefined)
  endif()
endfunction()

# kvtier_test(NAME SOURCES... [LIBS ...] [LABELS ...]): one gtest binary,
# its cases discovered into ctest.
function(kvtier_test name)
  cmake_parse_arguments(T "" "" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${name} ${T_SOURCES} ${T_UNPARSED_ARGUMENTS})
  kvtier_target_defaults(${name})
  # Line tables only (-g1): a failure's backtrace and a sanitizer report
  # still name file and line, and a test file compiles about a third faster
  # than with full debug info (gtest's expansions are most of it). The last
  # -g on the command line wins, and target options come after the build
  # type's flags.
  if(CMAKE_BUILD_TYPE MATCHES "^(Debug|RelWithDebInfo)$")
    target_compile_options(${name} PRIVATE -g1)
  endif()
  target_link_libraries(${name} PRIVATE ${T_LIBS} kvtier_testing GTest::gtest GTest::gmock
    GTest::gtest_main)
  set(props "")
  if(T_LABELS)
    set(props PROPERTIES LABELS "${T_LABELS}")
  endif()
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 ${props})
endfunction()

# kvtier_preload_env(PRELOAD_VAR ENV_VAR): the LD_PRELOAD value that runs a
# program under this build's libkvtier.so, and the environment entries
# ("NAME=value") that go with it. A sanitizer build's libkvtier.so needs the
# sanitizer's runtime loaded first when the program itself is not
# instrumented (/bin/true, python3), so it goes in front; ASan's leak
# checking is off there (the runtime deliberately keeps its process-lifetime
# objects).
function(kvtier_preload_env preload_var env_var)
  set(preload "$<TARGET_FILE:kvtier>")
  set(env "")
  if(KVTIER_SANITIZE)
    execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libasan.so
      OUTPUT_VARIABLE asan_lib OUTPUT_STRIP_TRAILING_WHITESPACE)
    set(preload "${asan_lib}:$<TARGET_FILE:kvtier>")
    set(env ASAN_OPTIONS=detect_leaks=0)
  endif()
  set(${preload_var} "${preload}" PARENT_SCOPE)
  set(${env_var} "${env}" PARENT_SCOPE)
endfunction()

# kvtier_preload_test(NAME [COMPARE] [EXPECT_RC N] [ENV K=V...]
#   [STDOUT_HAS ...] [STDERR_HAS ...] [STDOUT_REGEX ...] [STDERR_REGEX ...]
#   [TIMEOUT S] COMMAND program args...)
# One ctest running COMMAND under the preload above through preload_check
# (tests/interpose/preload_check.cc), labelled "interpose". The TSan build
# leaves out a COMMAND that is not one of this build's programs (see above).
function(kvtier_preload_test name)
  cmake_parse_arguments(P "COMPARE" "EXPECT_RC;TIMEOUT"
    "ENV;STDOUT_HAS;STDERR_HAS;STDOUT_REGEX;STDERR_REGEX;COMMAND" ${ARGN})
  list(GET P_COMMAND 0 program)
  if(KVTIER_TSAN AND NOT program MATCHES "^\\$<TARGET_FILE:")
    return()
  endif()
  kvtier_preload_env(preload preload_env)
  set(args --preload "${preload}")
  foreach(e ${preload_env} ${P_ENV})
    list(APPEND args --env "${e}")
  endforeach()
  if(P_COMPARE)
    list(APPEND args --compare)
  endif()
  if(DEFINED P_EXPECT_RC)
    list(APPEND args --expect-rc ${P_EXPECT_RC})
  endif()
  foreach(kind STDOUT_HAS STDERR_HAS STDOUT_REGEX STDERR_REGEX)
    string(TOLOWER ${kind} flag)
    string(REPLACE "_" "-" flag ${flag})
    foreach(v ${P_${kind}})
      list(APPEND args --${flag} "${v}")
    endforeach()
  endforeach()
  if(NOT P_TIMEOUT)
    set(P_TIMEOUT 120)
  endif()
  add_test(NAME ${name} COMMAND preload_check ${args} --timeout ${P_TIMEOUT} -- ${P_COMMAND})
  math(EXPR ctest_timeout "${P_TIMEOUT} * 2 + 10")
  set_tests_properties(${name} PROPERTIES LABELS interpose TIMEOUT ${ctest_timeout})
endfunction()
