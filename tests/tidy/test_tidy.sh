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
# Two at a time (each file parses its headers: ~5 s on this VM, ~20 s with LibTorch's).
out=$(printf '%s\n' "${files[@]}" | xargs -r -P 2 -n 6 scripts/tidy.sh --build "$build" 2>&1)
rc=$?
echo "$out" | grep -E ': (warning|error): |no clang-tidy|no build|no such file' || true
if [[ $rc -ne 0 ]]; then
  echo "tidy: findings (or a failure to run) in files that were clean: fix them (docs/development.md, \"Tidy\")"
  exit 1
fi
echo "tidy: ${#files[@]} files clean"
