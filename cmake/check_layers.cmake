# Fails when a layer includes a header of a layer above it.
#
#   cmake -DROOT=<source tree> -P cmake/check_layers.cmake
#
# The layers are runtime -> codegen -> dsl: runtime/ includes only runtime/,
# codegen/ also runtime/, dsl/ all three (and any layer tessel/config.h).
# Every layer is compiled with the repository as its include root, so include
# paths cannot stop runtime/x.cpp from including "codegen/y.h"; this scan of
# each layer's .h and .cpp files does, naming the file, line and rule. The
# build runs it before any layer compiles (the stamp in CMakeLists.txt).

cmake_minimum_required(VERSION 3.25)  # script mode: the project's policies

if(NOT ROOT)
  message(FATAL_ERROR "check_layers.cmake: pass -DROOT=<source tree>")
endif()
get_filename_component(ROOT "${ROOT}" ABSOLUTE)  # GLOB's RELATIVE needs a full path

# Per layer: the layers above it, which it must not include.
set(above_runtime codegen dsl)
set(above_codegen dsl)
set(above_dsl)

set(violations "")
foreach(layer runtime codegen dsl)
  if(NOT above_${layer})
    continue()
  endif()
  string(REPLACE ";" "|" forbidden "${above_${layer}}")
  # An #include at the start of a line (after blanks), quoted or bracketed.
  set(include_re "\n[ \t]*#[ \t]*include[ \t]*[\"<]((${forbidden})/[^\">\n]*)[\">]")
  file(GLOB_RECURSE files RELATIVE ${ROOT} ${ROOT}/${layer}/*.h ${ROOT}/${layer}/*.cpp)
  list(SORT files)
  foreach(f IN LISTS files)
    file(READ ${ROOT}/${f} content)
    # A leading newline puts the first line on the same footing as the others.
    set(rest "\n${content}")
    set(line 0)
    while(TRUE)
      string(REGEX MATCH "${include_re}" m "${rest}")
      if(NOT m)
        break()
      endif()
      set(header "${CMAKE_MATCH_1}")
      set(upper "${CMAKE_MATCH_2}")
      string(FIND "${rest}" "${m}" pos)
      # Line number: the newlines up to and including the one that opens the match.
      math(EXPR upto "${pos} + 1")
      string(SUBSTRING "${rest}" 0 ${upto} before)
      string(REGEX REPLACE "[^\n]" "" newlines "${before}")
      string(LENGTH "${newlines}" n)
      math(EXPR line "${line} + ${n}")
      string(LENGTH "${m}" len)
      math(EXPR next "${pos} + ${len}")
      string(SUBSTRING "${rest}" ${next} -1 rest)
      string(APPEND violations
        "  ${f}:${line}: includes \"${header}\": ${layer}/ must not include ${upper}/ "
        "(the layers are runtime -> codegen -> dsl; a layer includes only itself and the layers below it)\n")
    endwhile()
  endforeach()
endforeach()

if(violations)
  message(FATAL_ERROR "tessel layers: a layer includes a layer above it:\n${violations}")
endif()
