# anchor's own version and git commit go into every manifest.
execute_process(COMMAND git rev-parse HEAD
  WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
  OUTPUT_VARIABLE ANCHOR_GIT_COMMIT OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
execute_process(COMMAND git status --porcelain --untracked-files=no
  WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
  OUTPUT_VARIABLE _anchor_dirty OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(NOT ANCHOR_GIT_COMMIT)
  set(ANCHOR_GIT_COMMIT "unknown")
endif()
if(_anchor_dirty)
  set(ANCHOR_GIT_DIRTY "true")
else()
  set(ANCHOR_GIT_DIRTY "false")
endif()
if(Torch_VERSION VERSION_GREATER_EQUAL 2.0)
  set(ANCHOR_TORCH_HAS_SDPA "true")
else()
  set(ANCHOR_TORCH_HAS_SDPA "false")
endif()
if(ANCHOR_WITH_CUDA)
  set(ANCHOR_WITH_CUDA_BOOL "true")
else()
  set(ANCHOR_WITH_CUDA_BOOL "false")
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/build_info.hpp.in
  ${PROJECT_BINARY_DIR}/generated/anchor/build_info.hpp @ONLY)
