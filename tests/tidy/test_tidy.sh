#!/usr/bin/env bash
# ctest tidy.clean_tree: scripts/tidy.sh (.clang-tidy) reports the fixture's
# 90-line function (the negative control: the check can fail), and finds
# nothing in any source under src/ (the headers through the sources that
# include them). A new finding anywhere in them fails the suite. Needs clang-tidy (scripts/install-deps.sh --test)
# and the build's compile_commands.json: test_tidy.sh BUILD_DIR (ctest passes
# its own; default build/release).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
build=${1:-build/release}

out=$(scripts/tidy.sh --build "$build" tests/tidy/long_function.cpp 2>&1)
rc=$?
if [[ $rc -ne 1 || $out != *"function 'long_function' exceeds"*"[readability-function-size]"* ]]; then
  echo "negative control: expected exit 1 naming long_function (readability-function-size), got $rc:"
  echo "$out"
  exit 1
fi
if [[ $out == *short_function* ]]; then
  echo "negative control: a 1-line function was reported: $out"
  exit 1
fi
echo "negative control: the 90-line fixture is reported"

# Sources checked together: a finding in the group's last source is reported
# at its own path, and the two fixtures that define the same name in an
# anonymous namespace (they do not compile as one unit) are checked apart
# rather than failing the run.
out=$(scripts/tidy.sh --no-cache --verbose --build "$build" tests/tidy/same_name_a.cpp tests/tidy/same_name_b.cpp \
  tests/tidy/long_function.cpp 2>&1)
rc=$?
if [[ $rc -ne 1 || $(grep -c ': warning: \|: error: ' <<<"$out") -ne 1 \
  || $out != *"tests/tidy/long_function.cpp:3:5: warning: function 'long_function' exceeds"* \
  || $out != *"one run over 3: tests/tidy/same_name_a.cpp tests/tidy/same_name_b.cpp tests/tidy/long_function.cpp"* \
  || $out != *"one run over 1: tests/tidy/same_name_b.cpp"* ]]; then
  echo "grouped sources: expected exit 1, the one finding in long_function.cpp, and same_name_b.cpp checked alone; got $rc:"
  echo "$out"
  exit 1
fi
echo "negative control: a finding inside a group is reported at its path; a clash is checked apart"

# The default mode: files changed since a base; nothing changed since HEAD in a clean checkout.
if [[ -z $(git status --porcelain -- '*.cpp' 2>/dev/null) ]] && git rev-parse -q --verify HEAD >/dev/null; then
  out=$(scripts/tidy.sh --build "$build" --base HEAD 2>&1)
  if [[ $? -ne 0 || $out != "tidy: no C++ source changed" ]]; then
    echo "scripts/tidy.sh --base HEAD in a clean checkout: expected 'no C++ source changed', got: $out"
    exit 1
  fi
fi

mapfile -t files < <(git ls-files -- 'src/*.cpp')
if [[ ${#files[@]} -lt 50 ]]; then
  echo "tidy: only ${#files[@]} sources under src/ (git ls-files): not a checkout of the tree?"
  exit 1
fi
# Two clang-tidy runs at a time, sources with the same flags in one run (scripts/tidy_run.py).
out=$(scripts/tidy.sh -j 2 --build "$build" "${files[@]}" 2>&1)
rc=$?
echo "$out" | grep -E ': (warning|error): |no clang-tidy|no build|no such file|clang-tidy failed' || true
if [[ $rc -ne 0 ]]; then
  echo "tidy: findings (or a failure to run) in files that were clean: fix them (docs/development.md, \"Tidy\")"
  exit 1
fi
echo "tidy: ${#files[@]} files clean"
