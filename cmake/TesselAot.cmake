# tessel_add_aot_kernels(TARGET <target> GENERATOR <executable target> [NAME <name>]
#                        [ARCHS 80 90] [CUBIN_ARCHS 90] [BACKWARD]
#                        [OPTIMIZER "sgd:lr=0.1,momentum=0.9"] [ARGS ...])
#
# Runs the generator program at build time (it calls tessel::aot::export_kernels
# with the options from tessel::aot::parse_generator_args) and adds what it
# writes -- <name>_kernels.cpp and the host object <name>.o -- to <target>, so
# the target starts with every kernel registered and needs no JIT for them.
# The export folder is ${CMAKE_CURRENT_BINARY_DIR}/aot/<name>; the target gets
# TESSEL_AOT_DIR_<name> defined to it and that folder on its include path.
# OPTIMIZER (with BACKWARD) also exports the kernels of that optimizer's steps
# (tessel::aot::parse_optimizer's syntax); the target gets it as
# TESSEL_AOT_OPTIMIZER_<name>, so its training loop can build the very
# optimizer the export traced:
#   auto opt = tessel::aot::parse_optimizer(TESSEL_AOT_OPTIMIZER_net)->make(net->parameters());
function(tessel_add_aot_kernels)
  cmake_parse_arguments(A "BACKWARD" "TARGET;GENERATOR;NAME;OPTIMIZER" "ARCHS;CUBIN_ARCHS;ARGS" ${ARGN})
  if(NOT A_TARGET OR NOT A_GENERATOR)
    message(FATAL_ERROR "tessel_add_aot_kernels: TARGET and GENERATOR are required")
  endif()
  if(NOT A_NAME)
    set(A_NAME ${A_TARGET})
  endif()
  if(NOT A_ARCHS)
    set(A_ARCHS 80 90)
  endif()
  set(dir ${CMAKE_CURRENT_BINARY_DIR}/aot/${A_NAME})
  string(REPLACE ";" "," archs "${A_ARCHS}")
  set(cmd $<TARGET_FILE:${A_GENERATOR}> --out ${dir} --name ${A_NAME} --archs ${archs})
  if(A_CUBIN_ARCHS)
    string(REPLACE ";" "," cubin "${A_CUBIN_ARCHS}")
    list(APPEND cmd --cubin-archs ${cubin})
  endif()
  if(A_BACKWARD)
    list(APPEND cmd --backward)
  endif()
  if(A_OPTIMIZER)
    if(NOT A_BACKWARD)
      message(FATAL_ERROR "tessel_add_aot_kernels(${A_NAME}): OPTIMIZER needs BACKWARD (a step reads the gradients)")
    endif()
    list(APPEND cmd --optimizer ${A_OPTIMIZER})
  endif()
  set(outputs ${dir}/${A_NAME}_kernels.cpp ${dir}/${A_NAME}_kernels.h ${dir}/${A_NAME}.o ${dir}/manifest.json)
  add_custom_command(OUTPUT ${outputs}
    COMMAND ${cmd} ${A_ARGS}
    DEPENDS ${A_GENERATOR}
    COMMENT "tessel: exporting ahead-of-time kernels '${A_NAME}' (${A_ARCHS})"
    VERBATIM)
  set_source_files_properties(${dir}/${A_NAME}.o PROPERTIES EXTERNAL_OBJECT TRUE GENERATED TRUE)
  target_sources(${A_TARGET} PRIVATE ${dir}/${A_NAME}_kernels.cpp ${dir}/${A_NAME}.o)
  target_include_directories(${A_TARGET} PRIVATE ${dir})
  target_compile_definitions(${A_TARGET} PRIVATE TESSEL_AOT_DIR_${A_NAME}="${dir}")
  if(A_OPTIMIZER)
    target_compile_definitions(${A_TARGET} PRIVATE TESSEL_AOT_OPTIMIZER_${A_NAME}="${A_OPTIMIZER}")
  endif()
endfunction()
