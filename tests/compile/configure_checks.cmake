# ctest build.configure_checks: cmake/AnchorChecks.cmake on each case, by a
# real configure of tests/compile/configure_checks/ (a real try_compile and
# link for the ABI, a real FindOpenSSL). Each refusal must say what, why and
# what to do; each control must pass.
#   cmake -DWORK=<scratch dir> -DSOURCE=<tests/compile/configure_checks> -P configure_checks.cmake
file(REMOVE_RECURSE "${WORK}")
file(MAKE_DIRECTORY "${WORK}")

function(configure case expect_rc)
  execute_process(COMMAND ${CMAKE_COMMAND} -S "${SOURCE}" -B "${WORK}/${case}" -G Ninja -DCASE=${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  set(out "${out}${err}")
  string(REGEX REPLACE "[ \t\r\n]+" " " flat "${out}")  # CMake wraps long messages
  if(expect_rc EQUAL 0 AND NOT rc EQUAL 0)
    message(FATAL_ERROR "case ${case}: expected to configure, exited ${rc}:\n${out}")
  elseif(NOT expect_rc EQUAL 0 AND rc EQUAL 0)
    message(FATAL_ERROR "case ${case}: expected a refusal, it configured:\n${out}")
  endif()
  set(flat "${flat}" PARENT_SCOPE)
endfunction()

function(expect case text)
  string(FIND "${flat}" "${text}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "case ${case}: the output does not say \"${text}\":\n${flat}")
  endif()
endfunction()

# The ABI: Debian's yaml-cpp is built with the C++11 ABI; LibTorch with the old one is refused.
configure(abi1 0 abi1)
expect(abi1 "ABI 1 accepted")
configure(abi0 1 abi0)
expect(abi0 "pre-C++11 std::string ABI (_GLIBCXX_USE_CXX11_ABI=0)")
expect(abi0 "does not link against yaml-cpp")
expect(abi0 "To fix: use a LibTorch built with the C++11 ABI")

# OpenSSL: the system's 3.x accepted; none found; a 1.1 prefix refused with its version.
configure(openssl 0 openssl)
expect(openssl "accepted")
configure(openssl_none 1 openssl -DCMAKE_DISABLE_FIND_PACKAGE_OpenSSL=ON)
expect(openssl_none "anchor needs OpenSSL 3 (libcrypto and its headers)")
expect(openssl_none "Install libssl-dev")
set(old "${WORK}/openssl-1.1")
file(WRITE "${old}/include/openssl/opensslv.h"
     "#define OPENSSL_VERSION_NUMBER 0x1010117fL\n#define OPENSSL_VERSION_TEXT \"OpenSSL 1.1.1w  11 Sep 2023\"\n")
file(WRITE "${old}/include/openssl/ssl.h" "")
file(WRITE "${old}/lib/libcrypto.so" "")
file(WRITE "${old}/lib/libssl.so" "")
configure(openssl_old 1 openssl "-DOPENSSL_ROOT_DIR=${old}")
expect(openssl_old "found OpenSSL 1.1.1")
expect(openssl_old "Install OpenSSL 3's development files")
message(STATUS "configure checks: the ABI and OpenSSL refusals and their controls all hold")
