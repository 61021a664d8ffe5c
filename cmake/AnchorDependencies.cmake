include(AnchorChecks)

# Every dependency through find_package(... CONFIG). A prefix of extracted
# Debian packages (dpkg -x) named in CMAKE_PREFIX_PATH works the same way,
# which is how GPU nodes without a package registry build anchor.
# LibTorch: from CMAKE_PREFIX_PATH (Debian's libtorch-dev, or any prefix), or
# from a Python's torch package when ANCHOR_TORCH_PYTHON names that Python
# (the `torch2` preset names scripts/torch2-python, the hash-locked PyTorch 2.x
# environment; a GPU node names its own python3). Its
# torch.utils.cmake_prefix_path is searched first and alone, so a LibTorch
# elsewhere on the system cannot be picked up instead.
set(ANCHOR_TORCH_PYTHON "" CACHE STRING
    "A Python whose torch package provides LibTorch (torch.utils.cmake_prefix_path); empty: find LibTorch on CMAKE_PREFIX_PATH")
if(ANCHOR_TORCH_PYTHON)
  execute_process(
    COMMAND ${ANCHOR_TORCH_PYTHON} -c "import torch, torch.utils; print(torch.utils.cmake_prefix_path); print(torch.__version__)"
    OUTPUT_VARIABLE _anchor_torch_out ERROR_VARIABLE _anchor_torch_err RESULT_VARIABLE _anchor_torch_rc
    OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT _anchor_torch_rc EQUAL 0)
    message(FATAL_ERROR "ANCHOR_TORCH_PYTHON=${ANCHOR_TORCH_PYTHON} could not import torch (exit ${_anchor_torch_rc}):\n"
                        "${_anchor_torch_err}\nFor the torch2 preset run scripts/install-torch2.sh (or make torch2) first.")
  endif()
  string(REPLACE "\n" ";" _anchor_torch_out "${_anchor_torch_out}")
  list(GET _anchor_torch_out 0 ANCHOR_TORCH_CMAKE_PREFIX)
  list(GET _anchor_torch_out 1 ANCHOR_TORCH_PYTHON_VERSION)
  # TorchConfig looks for Caffe2 and its libraries with the default search
  # paths first, where a system LibTorch (Debian's libtorch-dev) would win and
  # mix two LibTorch versions in one link: name them here, from this torch.
  get_filename_component(_anchor_torch_lib "${ANCHOR_TORCH_CMAKE_PREFIX}/../../lib" ABSOLUTE)
  set(Caffe2_DIR "${ANCHOR_TORCH_CMAKE_PREFIX}/Caffe2" CACHE PATH "" FORCE)
  foreach(_lib torch c10 torch_cpu torch_cuda c10_cuda)
    string(TOUPPER "${_lib}" _var)
    if(_lib STREQUAL "c10")
      set(_var c10)
    endif()
    unset(${_var}_LIBRARY CACHE)
    find_library(${_var}_LIBRARY ${_lib} PATHS "${_anchor_torch_lib}" NO_DEFAULT_PATH)
  endforeach()
  # The wheel links kineto into libtorch_cpu; TorchConfig warns when it finds no separate library.
  set(kineto_LIBRARY "${TORCH_CPU_LIBRARY}" CACHE FILEPATH "kineto is inside libtorch_cpu in PyTorch's wheels" FORCE)
  find_package(Torch REQUIRED CONFIG PATHS "${ANCHOR_TORCH_CMAKE_PREFIX}" NO_DEFAULT_PATH)
  # The wheel's libraries load the CUDA runtime it ships (nvidia/*/lib, through
  # their RPATH); link that one too, not the build machine's toolkit's, so one
  # process never holds two (torch::cudart is CUDA::cudart of the toolkit).
  file(GLOB _anchor_wheel_cudart "${_anchor_torch_lib}/../../nvidia/*/lib/libcudart.so.*")
  if(TARGET torch::cudart AND _anchor_wheel_cudart)
    list(GET _anchor_wheel_cudart 0 _anchor_wheel_cudart)
    set_property(TARGET torch::cudart PROPERTY INTERFACE_LINK_LIBRARIES "${_anchor_wheel_cudart}")
  endif()
  message(STATUS "anchor: LibTorch from ${ANCHOR_TORCH_PYTHON}: torch ${ANCHOR_TORCH_PYTHON_VERSION} at ${ANCHOR_TORCH_CMAKE_PREFIX}")
else()
  find_package(Torch REQUIRED)
endif()
find_package(CLI11 CONFIG REQUIRED)
find_package(yaml-cpp CONFIG REQUIRED)
find_package(nlohmann_json CONFIG REQUIRED)
find_package(fmt CONFIG REQUIRED)
find_package(spdlog CONFIG REQUIRED)
anchor_require_openssl3()  # cmake/AnchorChecks.cmake: a clear refusal without OpenSSL 3
find_package(Threads REQUIRED)
# ProcessGroupGloo.hpp includes <gloo/...>, which neither Debian's libtorch-dev
# nor PyTorch's wheel ships; libgloo-dev's headers serve (Gloo's code itself
# is inside libtorch_cpu). Found on CMAKE_PREFIX_PATH too (build/gpu-prefix).
find_path(ANCHOR_GLOO_INCLUDE_DIR gloo/algorithm.h)
if(NOT ANCHOR_GLOO_INCLUDE_DIR)
  message(FATAL_ERROR "no Gloo headers (gloo/algorithm.h), which LibTorch's ProcessGroupGloo.hpp includes: "
                      "install libgloo-dev (scripts/install-deps.sh does), or name a prefix that has them in CMAKE_PREFIX_PATH")
endif()
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
# LibTorch's std::string ABI must be the other C++ libraries' (cmake/AnchorChecks.cmake).
anchor_check_cxx_abi("${TORCH_CXX_FLAGS}" ${ANCHOR_YAML_TARGET})

# CUDA / ROCm pieces compile in only when the LibTorch found has them.
set(ANCHOR_WITH_CUDA OFF)
if(TARGET torch_cuda OR TARGET c10_cuda OR "${TORCH_LIBRARIES}" MATCHES "c10_cuda")
  set(ANCHOR_WITH_CUDA ON)
  # A fact of the whole build, seen by every target (sources, tests, tools).
  add_compile_definitions(ANCHOR_WITH_CUDA=1)
endif()

# The nccl collective backend (RCCL in a ROCm LibTorch) compiles in when the
# LibTorch found links ProcessGroupNCCL: AUTO finds out, ON makes a missing
# NCCL a configure error (for GPU nodes), OFF leaves it out.
set(ANCHOR_NCCL AUTO CACHE STRING "Build the nccl backend of the process group: AUTO, ON or OFF")
set_property(CACHE ANCHOR_NCCL PROPERTY STRINGS AUTO ON OFF)
set(ANCHOR_WITH_NCCL OFF)
if(NOT ANCHOR_NCCL STREQUAL "OFF" AND ANCHOR_WITH_CUDA)
  # A real compile and link against the LibTorch libraries as files: torch's
  # imported targets cannot be handed to try_compile (PyTorch's wheel aliases a
  # local dummy target for protobuf), and their C++ standard (C++20 from 2.x
  # on) must be set for the check.
  set(_anchor_torch_files "")
  foreach(_t torch torch_cpu torch_cuda c10 c10_cuda)
    if(TARGET ${_t})
      foreach(_p IMPORTED_LOCATION IMPORTED_LOCATION_RELEASE IMPORTED_LOCATION_RELWITHDEBINFO IMPORTED_LOCATION_NOCONFIG)
        get_target_property(_loc ${_t} ${_p})
        if(_loc)
          list(APPEND _anchor_torch_files "${_loc}")
          break()
        endif()
      endforeach()
    endif()
  endforeach()
  get_target_property(_anchor_torch_features torch INTERFACE_COMPILE_FEATURES)
  set(_anchor_std 17)
  if(_anchor_torch_features MATCHES "cxx_std_20")
    set(_anchor_std 20)
  endif()
  include(CheckCXXSourceCompiles)
  set(_anchor_saved_std ${CMAKE_CXX_STANDARD})
  set(CMAKE_CXX_STANDARD ${_anchor_std})  # try_compile passes it on (CMP0067)
  set(CMAKE_REQUIRED_FLAGS "${TORCH_CXX_FLAGS}")
  set(CMAKE_REQUIRED_INCLUDES ${TORCH_INCLUDE_DIRS})
  set(CMAKE_REQUIRED_LIBRARIES ${_anchor_torch_files})
  set(CMAKE_REQUIRED_DEFINITIONS -DUSE_C10D_NCCL=1)
  check_cxx_source_compiles([=[
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
int main() { auto o = c10d::ProcessGroupNCCL::Options::create(); return o->timeout.count() > 0 ? 0 : 1; }
]=] ANCHOR_LIBTORCH_LINKS_NCCL)
  set(CMAKE_CXX_STANDARD ${_anchor_saved_std})
  unset(CMAKE_REQUIRED_FLAGS)
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
