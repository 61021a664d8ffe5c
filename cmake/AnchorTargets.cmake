# Helpers shared by every target: warnings, sanitizers, module object libraries.

function(anchor_target_defaults target)
  target_compile_features(${target} PUBLIC cxx_std_17)
  target_compile_options(${target} PRIVATE -Wall -Wextra)
  # fmt formats in the caller's TU (anchor/log.hpp), header-only: PyTorch 2.x
  # ships its own fmt headers, which win on a torch target's include path.
  target_compile_definitions(${target} PRIVATE FMT_HEADER_ONLY=1)
  if(ANCHOR_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
  if(ANCHOR_SANITIZE)
    target_compile_options(${target} PUBLIC -fsanitize=${ANCHOR_SANITIZE} -fno-omit-frame-pointer)
    target_compile_definitions(${target} PUBLIC ANCHOR_SANITIZED=1)
    target_link_options(${target} PUBLIC -fsanitize=${ANCHOR_SANITIZE})
  endif()
endfunction()

# anchor_module(<name> SOURCES ... [TORCH_SOURCES ...] [LIBS ...] [TORCH_LIBS ...])
# One module (src/<name>/) as object libraries: `anchor_<name>` holds the
# sources that never include torch; `anchor_<name>_torch` the ones that do
# (or `anchor_<name>` alone when every source does). The torch sources reuse
# the shared precompiled header. The front end `anchor` is built from the
# torch-free objects only (ANCHOR_PLAIN_MODULES), so the boundary between the
# two binaries is a build fact: a front-end reference to a torch translation
# unit fails to link instead of pulling LibTorch in.
# LIBS: what both parts use; for the torch-free part they must be torch-free
# modules too (their torch parts are not linked), so its sources are compiled
# without torch's include directories (tests/compile/torch_boundary.py checks
# compile_commands.json). TORCH_LIBS: what only the torch part uses.
set_property(GLOBAL PROPERTY ANCHOR_MODULES "")
set_property(GLOBAL PROPERTY ANCHOR_PLAIN_MODULES "")
set_property(GLOBAL PROPERTY ANCHOR_TORCH_FREE_SOURCES "")
set_property(GLOBAL PROPERTY ANCHOR_TORCH_SOURCES "")
function(anchor_module_part t)
  anchor_target_defaults(${t})
  set_target_properties(${t} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  target_include_directories(${t} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/src>
    $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/generated>)
  set_property(GLOBAL APPEND PROPERTY ANCHOR_MODULES ${t})
endfunction()
# Records the absolute paths of sources for the torch-boundary check (torch: TRUE or FALSE).
function(anchor_record_sources torch)
  set(paths "")
  foreach(f IN LISTS ARGN)
    if(NOT IS_ABSOLUTE "${f}")
      set(f "${CMAKE_CURRENT_SOURCE_DIR}/${f}")
    endif()
    list(APPEND paths "${f}")
  endforeach()
  if(torch)
    set_property(GLOBAL APPEND PROPERTY ANCHOR_TORCH_SOURCES ${paths})
  else()
    set_property(GLOBAL APPEND PROPERTY ANCHOR_TORCH_FREE_SOURCES ${paths})
  endif()
endfunction()
function(anchor_module name)
  cmake_parse_arguments(M "" "" "SOURCES;TORCH_SOURCES;LIBS;TORCH_LIBS" ${ARGN})
  set(t anchor_${name})
  if(M_SOURCES)
    add_library(${t} OBJECT ${M_SOURCES})
    anchor_module_part(${t})
    target_link_libraries(${t} PUBLIC ${M_LIBS})
    set_property(GLOBAL APPEND PROPERTY ANCHOR_PLAIN_MODULES ${t})
    anchor_record_sources(FALSE ${M_SOURCES})
    set(t ${t}_torch)
  endif()
  if(M_TORCH_SOURCES)
    add_library(${t} OBJECT ${M_TORCH_SOURCES})
    anchor_module_part(${t})
    target_link_libraries(${t} PUBLIC ${M_LIBS} ${M_TORCH_LIBS} torch)
    if(M_SOURCES)
      target_link_libraries(${t} PUBLIC anchor_${name})
    endif()
    target_precompile_headers(${t} REUSE_FROM anchor_pch)
    anchor_record_sources(TRUE ${M_TORCH_SOURCES})
  endif()
endfunction()

# The object libraries a LIBS list means: each module with its torch part.
function(anchor_expand_modules out)
  set(libs "")
  foreach(l IN LISTS ARGN)
    list(APPEND libs ${l})
    if(TARGET ${l}_torch)
      list(APPEND libs ${l}_torch)
    endif()
  endforeach()
  set(${out} ${libs} PARENT_SCOPE)
endfunction()
