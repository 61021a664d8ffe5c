#!/usr/bin/env bash
# clang-tidy (.clang-tidy: bugprone, performance, function size) over the C++
# sources a change touched, or the ones named. Exit 1 on any finding in them,
# 0 when they are clean, 2 when it cannot run (no clang-tidy, no compile
# database, a base that is not a commit, clang-tidy failing without a finding).
#
#   scripts/tidy.sh                 # .cpp files changed since origin/main (else HEAD~1), uncommitted and untracked
#   scripts/tidy.sh --base REF      # .cpp files changed since REF, uncommitted and untracked
#   scripts/tidy.sh FILE...         # these files
#   --build DIR                     # the compile database's build (default build/release: cmake --preset release)
#
# clang-tidy 14 (Debian 12's) when it is there: the checks bugprone-* and
# performance-* hold differ from version to version. A file not in the
# compile database (a fixture) is read as C++17 with include/ and src/ on the
# include path. Module headers are checked through the sources that include
# them. The tree's findings from before this check are not all fixed: a
# change must leave the files it touches clean.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

tidy=$(command -v clang-tidy-14 || command -v clang-tidy || true)
if [[ -z $tidy ]]; then
  echo "tidy: no clang-tidy on PATH (apt-get install clang-tidy)" >&2
  exit 2
fi

base=""
db=build/release
files=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --base|--build)
      if [[ $# -lt 2 ]]; then echo "tidy: $1 needs a value" >&2; exit 2; fi
      if [[ $1 == --base ]]; then base=$2; else db=$2; fi
      shift 2 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) files+=("$1"); shift ;;
  esac
done
if [[ ! -f $db/compile_commands.json ]]; then
  echo "tidy: no $db/compile_commands.json; run: cmake --preset release" >&2
  exit 2
fi
if [[ ${#files[@]} -eq 0 ]]; then
  if [[ -z $base ]]; then
    base=$(git rev-parse -q --verify origin/main >/dev/null && echo origin/main || echo HEAD~1)
  fi
  if ! git rev-parse -q --verify "$base^{commit}" >/dev/null; then
    echo "tidy: $base is not a commit here" >&2
    exit 2
  fi
  changed=$(git diff --name-only --diff-filter=d "$base" -- '*.cpp')
  changed+=$'\n'$(git diff --name-only --diff-filter=d -- '*.cpp')
  changed+=$'\n'$(git ls-files --others --exclude-standard -- '*.cpp')
  mapfile -t files < <(printf '%s\n' "$changed" | grep -v '^$' | sort -u || true)
fi
if [[ ${#files[@]} -eq 0 ]]; then
  echo "tidy: no C++ source changed"
  exit 0
fi

status=0
for f in "${files[@]}"; do
  if [[ ! -f $f ]]; then
    echo "tidy: $f: no such file" >&2
    exit 2
  fi
  abs=$(realpath "$f")
  extra=()
  if ! grep -qF "\"file\": \"$abs\"" "$db/compile_commands.json"; then
    extra=(-- -std=c++17 -Iinclude -Isrc)
  fi
  rc=0
  out=$("$tidy" -p "$db" --quiet "$f" "${extra[@]}" 2>&1) || rc=$?
  found=$(printf '%s\n' "$out" | grep -E '^[^ ].*:[0-9]+:[0-9]+: (warning|error): ' || true)
  if [[ -n $found ]]; then
    echo "$found"
    status=1
  elif [[ $rc -ne 0 ]]; then
    echo "tidy: clang-tidy failed on $f (exit $rc) without a finding:" >&2
    printf '%s\n' "$out" | tail -5 >&2
    exit 2
  fi
done
if [[ $status -eq 0 ]]; then
  echo "tidy: ${#files[@]} file(s) clean"
fi
exit $status
