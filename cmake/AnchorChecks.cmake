# Configure-time checks whose failure would otherwise surface as a wall of
# undefined symbols at link time, or as CMake's generic "Could NOT find".
# Each stops the configure with what was found, why it cannot work, and what
# to do. tests/compile/configure_checks.cmake runs them on purpose-made cases.

# OpenSSL 3 (libcrypto): anchor signs and verifies reports with its EVP API
# (OSSL_* and EVP_PKEY_get_* calls that 1.1 lacks). Call instead of a bare
# find_package(OpenSSL 3 REQUIRED).
function(anchor_require_openssl3)
  find_package(OpenSSL COMPONENTS Crypto)
  if(NOT OPENSSL_FOUND OR NOT TARGET OpenSSL::Crypto)
    message(FATAL_ERROR
      "anchor needs OpenSSL 3 (libcrypto and its headers) to sign and verify run reports, and none was found.\n"
      "Install libssl-dev (Debian 12: scripts/install-deps.sh does), or point OPENSSL_ROOT_DIR (or "
      "CMAKE_PREFIX_PATH, e.g. build/gpu-prefix/usr from scripts/gpu-prefix.sh) at an OpenSSL 3 prefix.")
  endif()
  if(OPENSSL_VERSION VERSION_LESS 3)
    message(FATAL_ERROR
      "anchor needs OpenSSL 3, but found OpenSSL ${OPENSSL_VERSION} at ${OPENSSL_INCLUDE_DIR}: report signing "
      "uses OpenSSL 3's EVP API (OSSL_* and EVP_PKEY_get_* calls), which ${OPENSSL_VERSION} does not have.\n"
      "Install OpenSSL 3's development files (Debian 12: libssl-dev), or point OPENSSL_ROOT_DIR at an OpenSSL 3 "
      "prefix.")
  endif()
endfunction()

# LibTorch's C++ ABI against the other C++ libraries': LibTorch states its
# _GLIBCXX_USE_CXX11_ABI in TORCH_CXX_FLAGS, and anchor compiles everything
# with it; a yaml-cpp (or spdlog, fmt, GoogleTest) built with the other ABI
# then misses every function taking a std::string. Links one such call of
# yaml-cpp (`yaml_target`) with LibTorch's choice.
function(anchor_check_cxx_abi torch_cxx_flags yaml_target)
  set(abi 1)  # GCC's default since GCC 5, and Debian's for every package
  if(torch_cxx_flags MATCHES "_GLIBCXX_USE_CXX11_ABI=([01])")
    set(abi ${CMAKE_MATCH_1})
  endif()
  include(CheckCXXSourceCompiles)
  set(CMAKE_REQUIRED_FLAGS "-D_GLIBCXX_USE_CXX11_ABI=${abi}")
  set(CMAKE_REQUIRED_LIBRARIES ${yaml_target})
  set(CMAKE_REQUIRED_QUIET ON)
  check_cxx_source_compiles([=[
#include <string>
#include <yaml-cpp/yaml.h>
int main(int argc, char** argv) { return YAML::Load(std::string(argv[argc - 1])).IsNull() ? 0 : 1; }
]=] ANCHOR_CXX_ABI_${abi}_LINKS_YAML_CPP)
  if(NOT ANCHOR_CXX_ABI_${abi}_LINKS_YAML_CPP)
    if(abi STREQUAL "0")
      set(what "the pre-C++11 std::string ABI (_GLIBCXX_USE_CXX11_ABI=0)")
      set(other "the C++11 ABI")
      set(fix "use a LibTorch built with the C++11 ABI (PyTorch's own wheels from 2.7 on, or the "
              "\"cxx11 ABI\" LibTorch archive), or build yaml-cpp, spdlog, fmt and GoogleTest with "
              "-D_GLIBCXX_USE_CXX11_ABI=0 into a prefix named first in CMAKE_PREFIX_PATH")
    else()
      set(what "the C++11 std::string ABI (_GLIBCXX_USE_CXX11_ABI=1)")
      set(other "the pre-C++11 ABI")
      set(fix "use yaml-cpp, spdlog, fmt and GoogleTest built with the C++11 ABI (Debian's packages are; "
              "scripts/gpu-prefix.sh unpacks them), named first in CMAKE_PREFIX_PATH")
    endif()
    string(CONCAT fix ${fix})
    message(FATAL_ERROR
      "LibTorch ${Torch_VERSION} was built with ${what} (its TORCH_CXX_FLAGS: \"${torch_cxx_flags}\"), but a "
      "program compiled that way does not link against yaml-cpp (${yaml_target}): the C++ libraries found were "
      "built with ${other}, so every call passing a std::string between them would be an undefined symbol.\n"
      "To fix: ${fix}.")
  endif()
endfunction()
