# A Debian package of what `cmake --install` installs (docs/development.md,
# "A Debian package"): `cpack --config <build>/CPackConfig.cmake` writes
# anchor_<version>_amd64.deb, installed under /usr. Its Depends come from
# dpkg-shlibdeps over the two binaries (the Debian packages that hold the
# libraries they link: libtorch1.13, libyaml-cpp, libssl3, ...), so the
# package is of a build against Debian's LibTorch (the release preset); a build
# against PyPI's torch links libraries no package holds, and dpkg-shlibdeps
# refuses it by name. tests/install/deb_fresh_root.sh installs it into a fresh
# Debian root and runs the embedded default pilot there.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME anchor)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR anchor)
set(CPACK_PACKAGE_CONTACT "anchor maintainers <anchor@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "Prove a PyTorch training run on one node before the long run, and sign the record")
set(CPACK_PACKAGE_DESCRIPTION
    "anchor pilot pins everything that decides a training run's result, runs it through load, train step, eval, checkpoint save, SIGKILL, restore in a fresh process and resume, proves the resumed run matches, measures memory, speed and checkpoint cost, plans the long run and writes a signed report.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# The Python helper (share/anchor/python) and the interop checks need python3; anchor itself does not.
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "python3, python3-torch")
# The debug information stays in the build tree; the package carries stripped binaries.
set(CPACK_STRIP_FILES ON)
include(CPack)
