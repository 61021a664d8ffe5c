#!/usr/bin/env bash
# ctest format.clean: every tracked C++ file is laid out as .clang-format says
# (scripts/format.sh --check), and a file that is not is reported (the
# negative control: the check can fail). Needs clang-format
# (scripts/install-deps.sh --test). test_format.sh BUILD_DIR: the control's
# file is written under the build directory, inside the tree, so clang-format
# finds the repository's .clang-format for it as it does for a source.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
build=${1:-build/release}

dir=$build/format-control
mkdir -p "$dir"
printf 'int  f( int x ){\nreturn x+1;}\n' > "$dir/unformatted.cpp"
printf 'int f(int x) { return x + 1; }\n' > "$dir/formatted.cpp"
out=$(scripts/format.sh --check "$dir/unformatted.cpp" "$dir/formatted.cpp" 2>&1)
rc=$?
if [[ $rc -ne 1 || $out != *"not formatted: $dir/unformatted.cpp"* || $out == *"not formatted: $dir/formatted.cpp"* ]]; then
  echo "negative control: expected exit 1 naming unformatted.cpp only, got $rc:"
  echo "$out"
  exit 1
fi
echo "negative control: the unformatted file is reported, the formatted one is not"

out=$(scripts/format.sh --check 2>&1)
rc=$?
echo "$out"
if [[ $rc -ne 0 ]]; then
  echo "format: files not formatted: run scripts/format.sh on them (docs/development.md, \"Formatting\")"
  exit 1
fi
