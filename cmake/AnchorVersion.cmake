# anchor's own version and git commit go into every manifest.
# The git commit and whether the tree is dirty are read at every build, not
# here at configure time: an incremental build after a commit must not record
# the commit it was configured at (cmake/AnchorGitCommit.cmake; anchor_common
# compiles the file it writes).
set(ANCHOR_GIT_COMMIT_SOURCE ${PROJECT_BINARY_DIR}/generated/git_commit.cpp)
add_custom_target(anchor_git_commit
  COMMAND ${CMAKE_COMMAND} -DSOURCE_DIR=${PROJECT_SOURCE_DIR} -DOUT=${ANCHOR_GIT_COMMIT_SOURCE}
          -P ${PROJECT_SOURCE_DIR}/cmake/AnchorGitCommit.cmake
  BYPRODUCTS ${ANCHOR_GIT_COMMIT_SOURCE}
  VERBATIM)
if(Torch_VERSION VERSION_GREATER_EQUAL 2.0)
  set(ANCHOR_TORCH_HAS_SDPA "true")
else()
  set(ANCHOR_TORCH_HAS_SDPA "false")
endif()
if(ANCHOR_WITH_CUDA)
  set(ANCHOR_WITH_CUDA_BOOL "true")
  set(ANCHOR_BUILT_CUDA_VERSION "${CUDA_VERSION}")  # TorchConfig's: the CUDA its LibTorch was built with
else()
  set(ANCHOR_WITH_CUDA_BOOL "false")
  set(ANCHOR_BUILT_CUDA_VERSION "")
endif()
if(ANCHOR_WITH_NCCL)
  set(ANCHOR_WITH_NCCL_BOOL "true")
else()
  set(ANCHOR_WITH_NCCL_BOOL "false")
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/build_info.hpp.in
  ${PROJECT_BINARY_DIR}/generated/anchor/build_info.hpp @ONLY)
