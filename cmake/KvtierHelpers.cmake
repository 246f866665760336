# Shared helpers: per-target warnings and sanitizers (no global flags).

function(kvtier_target_defaults target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wno-unused-parameter)
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
  target_link_libraries(${name} PRIVATE ${T_LIBS} GTest::gtest GTest::gmock GTest::gtest_main)
  set(props "")
  if(T_LABELS)
    set(props PROPERTIES LABELS "${T_LABELS}")
  endif()
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 ${props})
endfunction()

# kvtier_preload_env(PRELOAD_VAR ENV_VAR): the LD_PRELOAD value that runs a
# program under this build's libkvtier.so, and the environment entries
# ("NAME=value") that go with it. An ASan build's libkvtier.so needs the ASan
# runtime loaded first when the program itself is not instrumented (/bin/true,
# python3), so it goes in front; leak checking is off there (the runtime
# deliberately keeps its process-lifetime objects).
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
# (tests/interpose/preload_check.cc), labelled "interpose".
function(kvtier_preload_test name)
  cmake_parse_arguments(P "COMPARE" "EXPECT_RC;TIMEOUT"
    "ENV;STDOUT_HAS;STDERR_HAS;STDOUT_REGEX;STDERR_REGEX;COMMAND" ${ARGN})
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
