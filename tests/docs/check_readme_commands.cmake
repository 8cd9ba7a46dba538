# The README's shell lines that run a built program (`build/...`): each
# program exists at that path of a build tree, and `tessel-ckpt ls` lists the
# checkpoint the README's example saved (build/demo/ exists only after
# `make demo`, so the example's file stands in for the demo's).
# README: the document; BUILD_DIR: the build tree; CHECKPOINT: a saved state dict.
file(STRINGS ${README} lines REGEX "^build/")
set(checked 0)
foreach(line ${lines})
  string(REGEX REPLACE "[ \t#].*$" "" program "${line}")
  string(REGEX REPLACE "^build/" "${BUILD_DIR}/" path "${program}")
  if(NOT EXISTS ${path})
    message(FATAL_ERROR "README.md runs ${program}, but the build tree has no ${path}")
  endif()
  math(EXPR checked "${checked} + 1")
  if(program STREQUAL "build/tools/tessel-ckpt")
    execute_process(COMMAND ${path} ls ${CHECKPOINT} OUTPUT_VARIABLE out RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0 OR NOT out MATCHES "0\\.weight +F32 +\\[256, 20\\]")
      message(FATAL_ERROR "tessel-ckpt ls ${CHECKPOINT} (status ${rc}) did not list 0.weight [256, 20]:\n${out}")
    endif()
    message(STATUS "tessel-ckpt ls:\n${out}")
  endif()
endforeach()
if(checked LESS 3)
  message(FATAL_ERROR "expected the README's three build/ commands, found ${checked}")
endif()
