# libFuzzer targets (MOETRACE_FUZZ: the `ci-asan` and `fuzz` presets): every reader of files
# moetrace did not write has a `<reader>_fuzzer.cc` beside it. With the option
# on, all code is compiled with coverage instrumentation for libFuzzer
# (-fsanitize=fuzzer-no-link) and with ASan and UBSan; UBSan reports abort, so
# a finding is a crash libFuzzer saves. tools/fuzz.sh builds the corpora and
# runs the targets; RELIABILITY.md records the runs.
if(MOETRACE_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "MOETRACE_FUZZ needs clang (libFuzzer); use the fuzz preset")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link,address,undefined
    -fno-sanitize-recover=all -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)
  add_custom_target(fuzzers)
endif()

# moetrace_add_fuzzer(name SOURCES ... LIBS ...): one libFuzzer executable.
function(moetrace_add_fuzzer name)
  if(NOT MOETRACE_FUZZ)
    return()
  endif()
  cmake_parse_arguments(F "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${F_SOURCES})
  target_link_libraries(${name} PRIVATE ${F_LIBS})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests/fuzz)
  target_link_options(${name} PRIVATE -fsanitize=fuzzer)
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/fuzz)
  moetrace_set_warnings(${name})
  add_dependencies(fuzzers ${name})
endfunction()
