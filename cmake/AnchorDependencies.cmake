# Every dependency through find_package(... CONFIG). A prefix of extracted
# Debian packages (dpkg -x) named in CMAKE_PREFIX_PATH works the same way,
# which is how GPU nodes without a package registry build anchor.
find_package(Torch REQUIRED)
find_package(CLI11 CONFIG REQUIRED)
find_package(yaml-cpp CONFIG REQUIRED)
find_package(nlohmann_json CONFIG REQUIRED)
find_package(fmt CONFIG REQUIRED)
find_package(spdlog CONFIG REQUIRED)
find_package(OpenSSL 3 REQUIRED COMPONENTS Crypto)
find_package(Threads REQUIRED)
if(ANCHOR_BUILD_TESTS)
  find_package(GTest CONFIG REQUIRED)
endif()

# Torch's flags carry the C++ ABI choice; they are the one global flag we take.
string(APPEND CMAKE_CXX_FLAGS " ${TORCH_CXX_FLAGS}")

# yaml-cpp 0.7 exports "yaml-cpp"; newer releases export "yaml-cpp::yaml-cpp".
if(TARGET yaml-cpp::yaml-cpp)
  set(ANCHOR_YAML_TARGET yaml-cpp::yaml-cpp)
else()
  set(ANCHOR_YAML_TARGET yaml-cpp)
endif()

# CUDA / ROCm pieces compile in only when the LibTorch found has them.
set(ANCHOR_WITH_CUDA OFF)
if(TARGET torch_cuda OR TARGET c10_cuda OR "${TORCH_LIBRARIES}" MATCHES "c10_cuda")
  set(ANCHOR_WITH_CUDA ON)
endif()

# The nccl collective backend (RCCL in a ROCm LibTorch) compiles in when the
# LibTorch found links ProcessGroupNCCL: AUTO finds out, ON makes a missing
# NCCL a configure error (for GPU nodes), OFF leaves it out.
set(ANCHOR_NCCL AUTO CACHE STRING "Build the nccl backend of the process group: AUTO, ON or OFF")
set_property(CACHE ANCHOR_NCCL PROPERTY STRINGS AUTO ON OFF)
set(ANCHOR_WITH_NCCL OFF)
if(NOT ANCHOR_NCCL STREQUAL "OFF" AND ANCHOR_WITH_CUDA)
  include(CheckCXXSourceCompiles)
  set(CMAKE_REQUIRED_INCLUDES ${TORCH_INCLUDE_DIRS})
  set(CMAKE_REQUIRED_LIBRARIES ${TORCH_LIBRARIES})
  set(CMAKE_REQUIRED_DEFINITIONS -DUSE_C10D_NCCL=1)
  check_cxx_source_compiles([=[
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
int main() { auto o = c10d::ProcessGroupNCCL::Options::create(); return o->timeout.count() > 0 ? 0 : 1; }
]=] ANCHOR_LIBTORCH_LINKS_NCCL)
  unset(CMAKE_REQUIRED_INCLUDES)
  unset(CMAKE_REQUIRED_LIBRARIES)
  unset(CMAKE_REQUIRED_DEFINITIONS)
  if(ANCHOR_LIBTORCH_LINKS_NCCL)
    set(ANCHOR_WITH_NCCL ON)
  endif()
endif()
if(ANCHOR_NCCL STREQUAL "ON" AND NOT ANCHOR_WITH_NCCL)
  message(FATAL_ERROR "ANCHOR_NCCL=ON, but the LibTorch found (${Torch_VERSION}, CUDA/HIP: ${ANCHOR_WITH_CUDA}) "
                      "does not link ProcessGroupNCCL; point CMAKE_PREFIX_PATH at a CUDA or ROCm LibTorch (docs/development.md)")
endif()
message(STATUS "anchor: LibTorch ${Torch_VERSION} (CUDA/HIP: ${ANCHOR_WITH_CUDA}, NCCL/RCCL: ${ANCHOR_WITH_NCCL})")
