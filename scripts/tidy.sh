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
#   --no-cache                      # run clang-tidy on every file, even one found clean before with the same inputs
#   -j N                            # clang-tidy runs at a time (default 2)
#   --verbose                       # say which sources each clang-tidy run checks
#
# clang-tidy 14 (Debian 12's) when it is there: the checks bugprone-* and
# performance-* hold differ from version to version. A file not in the
# compile database (a fixture) is read as C++17 with include/ and src/ on the
# include path. Module headers are checked through the sources that include
# them. Sources with the same compile flags are checked together, one parse
# for up to 40 of them (scripts/tidy_run.py says why and how). A file found clean is remembered by the key scripts/tidy_key.py gives
# (clang-tidy's version, .clang-tidy, the compile command, the preprocessed
# file: a change to the file or to any header it includes is a new key) in
# $ANCHOR_TIDY_CACHE (default ~/.cache/anchor-tidy), and not parsed again.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

tidy=$(command -v clang-tidy-14 || command -v clang-tidy || true)
if [[ -z $tidy ]]; then
  echo "tidy: no clang-tidy on PATH (apt-get install clang-tidy)" >&2
  exit 2
fi

base=""
db=build/release
use_cache=1
jobs=2
verbose=()
cache=${ANCHOR_TIDY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/anchor-tidy}
files=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --base|--build)
      if [[ $# -lt 2 ]]; then echo "tidy: $1 needs a value" >&2; exit 2; fi
      if [[ $1 == --base ]]; then base=$2; else db=$2; fi
      shift 2 ;;
    --no-cache) use_cache=0; shift ;;
    --verbose) verbose=(--verbose); shift ;;
    -j|--jobs)
      if [[ $# -lt 2 ]]; then echo "tidy: $1 needs a value" >&2; exit 2; fi
      jobs=$2; shift 2 ;;
    -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
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

# clang-tidy gets a copy of the database with one entry per source: the
# build compiles sources in generated unity units (cmake/AnchorTargets.cmake,
# anchor_unity), which scripts/compile_db.py expands into the sources they hold.
# The torch sources are compiled with GCC's precompiled header (-include
# .../cmake_pch.hxx, its .gch beside it), which clang cannot read: in the copy
# -include names a copy of each cmake_pch.hxx with no .gch beside it (the
# same header text, parsed).
tidy_db=$(mktemp -d "${TMPDIR:-/tmp}/anchor-tidy.XXXXXX")
trap 'rm -rf "$tidy_db"' EXIT
python3 scripts/compile_db.py "$db" "$tidy_db"
if grep -q 'cmake_pch\.hxx' "$tidy_db/compile_commands.json"; then
  i=0
  while IFS= read -r pch; do
    mkdir -p "$tidy_db/pch$i"
    cp "$pch" "$tidy_db/pch$i/cmake_pch.hxx"
    sed -i "s|$pch\\([ \"]\\)|$tidy_db/pch$i/cmake_pch.hxx\\1|g" "$tidy_db/compile_commands.json"
    i=$((i + 1))
  done < <(grep -oE '/[^ "]*/cmake_pch\.hxx[ "]' "$tidy_db/compile_commands.json" | sed 's/.$//' | sort -u)
fi

for f in "${files[@]}"; do
  if [[ ! -f $f ]]; then
    echo "tidy: $f: no such file" >&2
    exit 2
  fi
done
cache_args=()
if [[ $use_cache -eq 1 ]]; then cache_args=(--cache "$cache"); fi
rc=0
python3 scripts/tidy_run.py --root . --db "$db" --tidy-db "$tidy_db" --tidy "$tidy" \
  --jobs "$jobs" "${verbose[@]}" "${cache_args[@]}" "${files[@]}" || rc=$?
exit $rc
