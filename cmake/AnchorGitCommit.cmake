# Run at every build (cmake -P, from the anchor_git_commit target in
# cmake/AnchorVersion.cmake): writes OUT, the git commit the sources are at and
# whether tracked files differ from it, only when that changed, so an
# incremental build after a commit reports that commit and an unchanged one
# relinks nothing. Reads SOURCE_DIR and OUT.
# --no-optional-locks: a build running beside `git commit` must not take the
# index lock. A status that fails says nothing about the tree: dirty then.
execute_process(COMMAND git --no-optional-locks rev-parse HEAD
  WORKING_DIRECTORY "${SOURCE_DIR}"
  RESULT_VARIABLE commit_rc OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
# The commit's date (YYYY-MM-DD): the man page's date, the same for every build of a commit.
execute_process(COMMAND git --no-optional-locks log -1 --format=%cd --date=short HEAD
  WORKING_DIRECTORY "${SOURCE_DIR}"
  RESULT_VARIABLE date_rc OUTPUT_VARIABLE date OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
execute_process(COMMAND git --no-optional-locks status --porcelain --untracked-files=no
  WORKING_DIRECTORY "${SOURCE_DIR}"
  RESULT_VARIABLE status_rc OUTPUT_VARIABLE status OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(NOT commit_rc EQUAL 0 OR NOT commit)
  set(commit "unknown")  # not a git checkout (a source tarball), or no git
  set(date "")
  set(dirty "false")
elseif(NOT status_rc EQUAL 0 OR status)
  set(dirty "true")
else()
  set(dirty "false")
endif()
if(NOT date MATCHES "^[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]$")
  # Outside git: the build's date (SOURCE_DATE_EPOCH when set, for reproducible builds).
  string(TIMESTAMP date "%Y-%m-%d" UTC)
endif()
set(content "// Generated at build time by cmake/AnchorGitCommit.cmake.
#include \"anchor/build_info.hpp\"
namespace anchor::build {
const char* const kGitCommit = \"${commit}\";
const bool kGitDirty = ${dirty};
const char* const kGitDate = \"${date}\";
}  // namespace anchor::build
")
set(old "")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL content)
  file(WRITE "${OUT}" "${content}")
endif()
