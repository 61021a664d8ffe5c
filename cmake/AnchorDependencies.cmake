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
message(STATUS "anchor: LibTorch ${Torch_VERSION} (CUDA/HIP: ${ANCHOR_WITH_CUDA})")
