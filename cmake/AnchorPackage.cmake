# A Debian package of what `cmake --install` installs (docs/development.md,
# "A Debian package"): `cpack --config <build>/CPackConfig.cmake` writes
# anchor_<version>_amd64.deb, installed under /usr. Its Depends come from
# dpkg-shlibdeps over the two binaries (the Debian packages that hold the
# libraries they link: libtorch1.13, libyaml-cpp, libssl3, ...), so the
# package is of a build against Debian's LibTorch (the release preset); a build
# against PyPI's torch links libraries no package holds, and dpkg-shlibdeps
# refuses it by name. tests/install/deb_fresh_root.sh installs it into a fresh
# Debian root and runs the embedded default pilot there.
#
# What Debian's policy asks of the package, which the ctest install.deb_lintian
# checks with lintian: a machine-readable copyright file (made here from
# LICENSE), a gzipped changelog (packaging/changelog, whose first version must
# be the project's), a gzipped man page for each binary (CMakeLists.txt), and a
# maintainer who can be written to (ANCHOR_PACKAGE_MAINTAINER: set your team's
# address when you ship the package to others).
set(ANCHOR_PACKAGE_MAINTAINER "anchor maintainers <maintainers@users.noreply.a-seed-f6ea4900.example>"
    CACHE STRING "The Maintainer of the Debian package: Name <address>")

set(_doc ${PROJECT_BINARY_DIR}/share/doc/anchor)
file(MAKE_DIRECTORY ${_doc})
# copyright, in the format of https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
file(STRINGS ${PROJECT_SOURCE_DIR}/LICENSE _license)
list(GET _license 2 _holder)  # "Copyright (c) 2026 The anchor authors"
string(REGEX REPLACE "^Copyright \\(c\\) " "" _holder "${_holder}")
set(_copyright "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\nUpstream-Name: anchor\n\n"
               "Files: *\nCopyright: ${_holder}\nLicense: MIT\n")
set(_first TRUE)
foreach(_line IN LISTS _license)
  if(_first)  # the license's name is the License field's first line
    set(_first FALSE)
    continue()
  endif()
  if(_line STREQUAL "")
    string(APPEND _copyright " .\n")
  else()
    string(APPEND _copyright " ${_line}\n")
  endif()
endforeach()
file(CONFIGURE OUTPUT ${_doc}/copyright CONTENT "${_copyright}" @ONLY)
# The changelog: packaging/changelog's first entry is this version's.
file(STRINGS ${PROJECT_SOURCE_DIR}/packaging/changelog _changes LIMIT_COUNT 1)
if(NOT _changes MATCHES "^anchor \\(${PROJECT_VERSION}\\) ")
  message(FATAL_ERROR "packaging/changelog starts with '${_changes}', not an entry for anchor ${PROJECT_VERSION}: "
                      "add one at its top (the project's version is in CMakeLists.txt)")
endif()
add_custom_command(OUTPUT ${_doc}/changelog.gz
  COMMAND sh -c "gzip -9 -n -c \"$1\" > \"$2\"" sh ${PROJECT_SOURCE_DIR}/packaging/changelog ${_doc}/changelog.gz
  DEPENDS ${PROJECT_SOURCE_DIR}/packaging/changelog VERBATIM)
add_custom_target(anchor_package_docs ALL DEPENDS ${_doc}/changelog.gz)
install(FILES ${_doc}/copyright ${_doc}/changelog.gz DESTINATION share/doc/anchor)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME anchor)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR anchor)
set(CPACK_PACKAGE_CONTACT "${ANCHOR_PACKAGE_MAINTAINER}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "prove a PyTorch training run on one node, and sign the record")
# Lines under 80 characters: CPack indents each one in the control file.
set(CPACK_PACKAGE_DESCRIPTION
    "anchor pilot pins everything that decides a training run's result, runs it
through load, train step, eval, checkpoint save, SIGKILL, restore in a fresh
process and resume, proves the resumed run matches, measures memory, speed
and checkpoint cost, plans the long run and writes a signed report.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# The Python helper (share/anchor/python) and the interop checks need python3; anchor itself does not.
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "python3, python3-torch")
# The debug information stays in the build tree; the package carries stripped binaries.
set(CPACK_STRIP_FILES ON)
include(CPack)
