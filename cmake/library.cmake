# moetrace_add_library(<name> SOURCES ... [INCLUDE_DIR dir] [PUBLIC ...] [PRIVATE ...])
# One static library of the project: target moetrace_<name>, alias
# moetrace::<name>, its headers under include/ beside this CMakeLists (or
# INCLUDE_DIR) public, the project's warnings.
function(moetrace_add_library name)
  cmake_parse_arguments(ARG "" "INCLUDE_DIR" "SOURCES;PUBLIC;PRIVATE" ${ARGN})
  if(NOT ARG_INCLUDE_DIR)
    set(ARG_INCLUDE_DIR ${CMAKE_CURRENT_SOURCE_DIR}/include)
  endif()
  add_library(moetrace_${name} STATIC ${ARG_SOURCES})
  add_library(moetrace::${name} ALIAS moetrace_${name})
  target_include_directories(moetrace_${name} PUBLIC ${ARG_INCLUDE_DIR})
  target_link_libraries(moetrace_${name} PUBLIC ${ARG_PUBLIC} PRIVATE ${ARG_PRIVATE})
  moetrace_set_warnings(moetrace_${name})
endfunction()
