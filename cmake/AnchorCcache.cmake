# ccache for every C++ compile, when it is installed (scripts/install-deps.sh
# installs it) and the builder has not chosen a launcher of their own
# (-DCMAKE_CXX_COMPILER_LAUNCHER=..., or -DANCHOR_CCACHE=OFF for none).
#
# Why: a clean build is ~35 CPU-minutes per LibTorch line, almost all of it
# compiling translation units that include torch; a second clone, a second
# checkout of the same commit, or CI after a local run then recompiles only
# what changed. The settings are the ones ccache's manual asks for:
#   - CCACHE_BASEDIR: paths under the source tree are hashed relative to it,
#     so clones at other paths share entries; CCACHE_NOHASHDIR: the build
#     directory is not hashed either (the debug info's compilation directory
#     may then name the clone that first compiled an object).
#   - CCACHE_SLOPPINESS pch_defines,time_macros (and the include file times):
#     required for GCC's precompiled header, which CMake passes with -include
#     (src/pch), so the header and every TU that uses it are cached too.
# The cache lives where ccache keeps it (~/.cache/ccache); CCACHE_MAXSIZE
# bounds it at 16 GB unless the builder set their own.
option(ANCHOR_CCACHE "Compile through ccache when it is installed" ON)
if(ANCHOR_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  find_program(ANCHOR_CCACHE_PROGRAM ccache)
  if(ANCHOR_CCACHE_PROGRAM)
    set(_maxsize "$ENV{CCACHE_MAXSIZE}")
    if(NOT _maxsize)
      set(_maxsize 16G)
    endif()
    set(CMAKE_CXX_COMPILER_LAUNCHER
        ${CMAKE_COMMAND} -E env
        "CCACHE_BASEDIR=${PROJECT_SOURCE_DIR}" CCACHE_NOHASHDIR=1 "CCACHE_MAXSIZE=${_maxsize}"
        CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
        ${ANCHOR_CCACHE_PROGRAM})
    message(STATUS "anchor: compiling through ${ANCHOR_CCACHE_PROGRAM} (ANCHOR_CCACHE=OFF turns it off)")
  endif()
endif()
