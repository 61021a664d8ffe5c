#!/usr/bin/env bash
# The Debian package against Debian's policy, and reproducible (issue 43;
# docs/development.md, "A Debian package"), as the ctest install.deb_lintian
# runs it:
#
#   tests/install/deb_lintian.sh BUILD_DIR
#
#  1. cpack twice with SOURCE_DATE_EPOCH set to the last commit's time: the two
#     packages are byte for byte the same, and every member's mtime is that time.
#  2. lintian finds no error and no warning in it (its info tags are printed).
#  3. Control: the same package with its copyright file taken out (unpacked,
#     removed, built again with dpkg-deb) makes lintian report
#     no-copyright-file, so step 2 reads a package lintian can fault.
#
# Exit 0 when all of it holds, 1 otherwise, 77 (skipped, with the reason)
# without lintian (scripts/install-deps.sh --test installs it).
set -euo pipefail

build=${1:?usage: deb_lintian.sh BUILD_DIR}
build=$(cd "$build" && pwd)
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
say() { echo "deb_lintian: $*"; }
fail() { echo "deb_lintian: FAIL: $*" >&2; exit 1; }
command -v lintian >/dev/null || { echo "deb_lintian: SKIP: lintian is not installed (scripts/install-deps.sh --test)"; exit 77; }

work=$(mktemp -d "${TMPDIR:-/tmp}/anchor-lintian.XXXXXX")
trap 'rm -rf "$work"' EXIT
epoch=$(git log -1 --format=%ct 2>/dev/null || echo 1700000000)

# 1. Two packages, the same bytes, every mtime the epoch.
for n in 1 2; do
  (cd "$work" && SOURCE_DATE_EPOCH=$epoch cpack --config "$build/CPackConfig.cmake" -B "$work/pkg$n" >"$work/cpack$n.log" 2>&1) ||
    { cat "$work/cpack$n.log" >&2; fail "cpack failed"; }
done
deb=$(ls "$work"/pkg1/anchor_*_amd64.deb)
cmp -s "$deb" "$work/pkg2/$(basename "$deb")" || fail "two packages of the same build with SOURCE_DATE_EPOCH=$epoch differ"
want=$(date -u -d "@$epoch" '+%Y-%m-%d %H:%M')
other=$(dpkg-deb -c "$deb" | awk -v want="$want" '$4 " " $5 != want { print $6 }')
[[ -z "$other" ]] || fail "members whose mtime is not SOURCE_DATE_EPOCH ($want): $(echo "$other" | head -3)"
say "$(basename "$deb") ($(du -h "$deb" | cut -f1)): two builds identical, every member dated $want (SOURCE_DATE_EPOCH)"

# 2. lintian: errors and warnings fail; info tags are shown.
lint() { lintian --display-info "$1" 2>&1 | grep -v '^running with root privileges' || true; }
out=$(lint "$deb")
[[ -z "$out" ]] || echo "$out"
bad=$(echo "$out" | grep -E '^[EW]: ' || true)
[[ -z "$bad" ]] || fail "lintian: $(echo "$bad" | wc -l) errors or warnings"
say "lintian $(lintian --version | awk '{print $2}'): no error, no warning"

# 3. Control: lintian faults a package without its copyright file.
dpkg-deb -R "$deb" "$work/unpacked"
rm "$work/unpacked/usr/share/doc/anchor/copyright"
dpkg-deb --root-owner-group -b "$work/unpacked" "$work/broken.deb" >/dev/null
lint "$work/broken.deb" | grep -q 'E: anchor: no-copyright-file' ||
  fail "control: lintian did not report the missing copyright file"
say "OK (control: without its copyright file, lintian reports no-copyright-file)"
