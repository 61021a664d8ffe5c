#!/usr/bin/env bash
# clang-format (.clang-format) over anchor's C++ sources.
#
#   scripts/format.sh                # format the C++ files changed since HEAD (uncommitted and untracked)
#   scripts/format.sh FILE...        # format these files
#   scripts/format.sh --check        # every tracked C++ file: list the ones not formatted, exit 1 if any
#   scripts/format.sh --check FILE...  # these files only
#
# clang-format 14 (Debian 12's) when it is there: another version lays some
# lines out differently, and the tree is formatted with 14. Exit 0 when done
# (or clean), 1 when --check finds a file to format, 2 when it cannot run.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

fmt=$(command -v clang-format-14 || command -v clang-format || true)
if [[ -z $fmt ]]; then
  echo "format: no clang-format on PATH (apt-get install clang-format)" >&2
  exit 2
fi
check=0
files=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --check) check=1; shift ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    -*) echo "format: unknown option $1" >&2; exit 2 ;;
    *) files+=("$1"); shift ;;
  esac
done
sources=('*.cpp' '*.hpp' '*.h' '*.cu')
if [[ ${#files[@]} -eq 0 ]]; then
  if [[ $check -eq 1 ]]; then
    mapfile -t files < <(git ls-files -- "${sources[@]}")
  else
    mapfile -t files < <({ git diff --name-only --diff-filter=d HEAD -- "${sources[@]}";
                           git ls-files --others --exclude-standard -- "${sources[@]}"; } | sort -u)
  fi
fi
if [[ ${#files[@]} -eq 0 ]]; then
  echo "format: no C++ source changed"
  exit 0
fi
for f in "${files[@]}"; do
  if [[ ! -f $f ]]; then echo "format: $f: no such file" >&2; exit 2; fi
done
if [[ $check -eq 0 ]]; then
  "$fmt" -i -- "${files[@]}"
  echo "format: ${#files[@]} file(s) formatted"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  if ! "$fmt" --dry-run -Werror -- "$f" >/dev/null 2>&1; then
    # Tell a file to format from clang-format failing to read it.
    if "$fmt" -- "$f" >/dev/null 2>&1; then bad+=("$f"); else echo "format: clang-format cannot read $f" >&2; exit 2; fi
  fi
done
if [[ ${#bad[@]} -gt 0 ]]; then
  printf 'format: not formatted: %s\n' "${bad[@]}"
  echo "format: run scripts/format.sh ${bad[*]}"
  exit 1
fi
echo "format: ${#files[@]} file(s) formatted as .clang-format says"
