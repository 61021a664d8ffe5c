# Helpers shared by every target: warnings, sanitizers, module object libraries.

function(anchor_target_defaults target)
  target_compile_features(${target} PUBLIC cxx_std_17)
  target_compile_options(${target} PRIVATE -Wall -Wextra)
  if(ANCHOR_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
  if(ANCHOR_SANITIZE)
    target_compile_options(${target} PUBLIC -fsanitize=${ANCHOR_SANITIZE} -fno-omit-frame-pointer)
    target_compile_definitions(${target} PUBLIC ANCHOR_SANITIZED=1)
    target_link_options(${target} PUBLIC -fsanitize=${ANCHOR_SANITIZE})
  endif()
endfunction()

# anchor_module(<name> SOURCES ... [TORCH_SOURCES ...] [LIBS ...])
# One object library per module (src/<name>/). TORCH_SOURCES use the shared
# precompiled torch header; plain SOURCES skip it so they stay cheap to build.
set_property(GLOBAL PROPERTY ANCHOR_MODULES "")
function(anchor_module name)
  cmake_parse_arguments(M "" "" "SOURCES;TORCH_SOURCES;LIBS" ${ARGN})
  set(t anchor_${name})
  add_library(${t} OBJECT ${M_SOURCES} ${M_TORCH_SOURCES})
  anchor_target_defaults(${t})
  set_target_properties(${t} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  target_include_directories(${t} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/src>
    $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/generated>)
  target_link_libraries(${t} PUBLIC ${M_LIBS})
  if(M_TORCH_SOURCES)
    target_link_libraries(${t} PUBLIC torch)
    target_precompile_headers(${t} REUSE_FROM anchor_pch)
    if(M_SOURCES)
      set_source_files_properties(${M_SOURCES} TARGET_DIRECTORY ${t}
        PROPERTIES SKIP_PRECOMPILE_HEADERS ON)
    endif()
  endif()
  set_property(GLOBAL APPEND PROPERTY ANCHOR_MODULES ${t})
endfunction()
