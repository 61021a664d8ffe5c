#!/usr/bin/env bash
# The .deb installed into a fresh Debian root (issue 19; docs/development.md,
# "A Debian package"), as the ctest install.deb_fresh_root runs it:
#
#   tests/install/deb_fresh_root.sh BUILD_DIR
#
#  1. cpack writes anchor_<version>_amd64.deb from BUILD_DIR; its Depends are
#     dpkg-shlibdeps' (the packages holding the libraries the binaries link).
#  2. A fresh Debian 12 root with nothing but those Depends (mmdebstrap
#     --variant=minbase from Debian's registry). It is made once per Depends
#     list and kept as a tarball under ${ANCHOR_CACHE_DIR:-~/.cache/anchor}:
#     the first run downloads about 200 MB, later runs unpack it.
#  3. The root unpacked into a temporary directory and the package installed
#     there with apt-get, offline: a dependency the Depends missed fails here.
#  4. Chrooted there, in private mount and PID namespaces with a fresh /proc,
#     as a new user with a login environment (nothing of the caller's): `anchor --version`; the embedded
#     default pilot (`anchor pilot /usr/share/anchor/configs/pilot.yaml`,
#     nothing of the source tree in sight) passes and is signed; `anchor
#     verify` accepts its run; the man page and the completions are there;
#     `dpkg -r anchor` leaves none of the package's files.
#
# Exit 0 when all of it holds, 1 at the first thing that does not (said on
# stderr), 77 (ctest: skipped, with the reason) when not root: chroot and the
# mounts need it.
set -euo pipefail

build=${1:?usage: deb_fresh_root.sh BUILD_DIR}
build=$(cd "$build" && pwd)
say() { echo "deb_fresh_root: $*"; }
fail() { echo "deb_fresh_root: FAIL: $*" >&2; exit 1; }
if [[ $(id -u) -ne 0 ]]; then
  echo "deb_fresh_root: SKIP: needs root (chroot into the fresh root and mount /proc there)"
  exit 77
fi
command -v mmdebstrap >/dev/null || fail "mmdebstrap is not installed (scripts/install-deps.sh --test installs it)"

work=$(mktemp -d "${TMPDIR:-/tmp}/anchor-deb.XXXXXX")
cleanup() {
  umount -l "$work/root/proc" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# 1. The package.
(cd "$work" && cpack --config "$build/CPackConfig.cmake" -B "$work/pkg" >"$work/cpack.log" 2>&1) ||
  { cat "$work/cpack.log" >&2; fail "cpack failed"; }
deb=$(ls "$work"/pkg/anchor_*_amd64.deb)
depends=$(dpkg-deb -f "$deb" Depends)
say "built $(basename "$deb") ($(du -h "$deb" | cut -f1)); Depends: $depends"
[[ "$depends" == *libtorch* ]] || fail "Depends names no LibTorch package: $depends"
# The package names, first of each alternative, without versions: what the fresh root gets.
names=$(echo "$depends" | tr ',' '\n' | sed 's/|.*//; s/(.*)//; s/ //g' | sort -u | paste -sd, -)

# 2. The fresh root, once per Depends list.
cache=${ANCHOR_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/anchor}
mkdir -p "$cache"
key=$(printf 'bookworm minbase v1 %s' "$names" | sha256sum | cut -c1-16)
tarball="$cache/deb-root-$key.tar"
exec 9>"$tarball.lock"
flock 9
if [[ ! -s "$tarball" ]]; then
  say "making a fresh Debian 12 root with $names (once; kept as $tarball)"
  mmdebstrap --quiet --variant=minbase --format=tar --include="$names" bookworm "$tarball.part" \
    "deb http://deb.debian.org/debian bookworm main" \
    "deb http://deb.debian.org/debian bookworm-updates main" \
    "deb http://deb.debian.org/debian-security bookworm-security main" >"$work/mmdebstrap.log" 2>&1 ||
    { tail -20 "$work/mmdebstrap.log" >&2; rm -f "$tarball.part"; fail "mmdebstrap could not make the root"; }
  mv "$tarball.part" "$tarball"
fi
flock -u 9
root="$work/root"
mkdir "$root"
tar -C "$root" -xf "$tarball"
[[ ! -e "$root/usr/bin/anchor" ]] || fail "the fresh root already has /usr/bin/anchor"

# 3. The package, installed offline.
cp "$deb" "$root/tmp/anchor.deb"
# As docs/development.md says to: apt, which would fetch a missing dependency; here, with no
# package lists and no network, it can only find them installed.
chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get install -y /tmp/anchor.deb >"$work/apt.log" 2>&1 ||
  { cat "$work/apt.log" >&2; fail "apt-get install ./anchor.deb failed in the fresh root"; }
say "installed in a fresh root: $(chroot "$root" dpkg-query -W -f='${Package} ${Version}' anchor)"

# 4. Run it there: a private mount and PID namespace, a fresh /proc, a user of its own.
in_root() {
  unshare --mount --pid --fork --mount-proc="$root/proc" chroot "$root" "$@"
}
chroot "$root" useradd --create-home pilot >/dev/null 2>&1 || true
in_root su -l pilot -s /bin/sh -c 'cd && anchor --version' >"$work/version.txt" 2>&1 ||
  { cat "$work/version.txt" >&2; fail "anchor --version failed"; }
say "$(head -1 "$work/version.txt")"
in_root su -l pilot -s /bin/sh -c 'cd && anchor pilot /usr/share/anchor/configs/pilot.yaml --run-dir run' \
  >"$work/pilot.txt" 2>&1 || { tail -40 "$work/pilot.txt" >&2; fail "the embedded default pilot failed in the fresh root"; }
grep -q 'passed' "$work/pilot.txt" || { tail -20 "$work/pilot.txt" >&2; fail "the pilot's output does not say passed"; }
[[ -s "$root/home/pilot/run/report.intoto.json" ]] || fail "the pilot's run is not signed"
in_root su -l pilot -s /bin/sh -c 'cd && anchor verify run --key ~/.config/anchor/anchor.pub' >"$work/verify.txt" 2>&1 ||
  { cat "$work/verify.txt" >&2; fail "anchor verify refused the run"; }
say "the embedded default pilot passed in the fresh root and its signed run verifies: $(tail -1 "$work/verify.txt")"
for f in /usr/share/man/man1/anchor.1.gz /usr/share/man/man1/anchor-torch.1.gz /usr/share/bash-completion/completions/anchor \
  /usr/share/zsh/site-functions/_anchor /usr/share/fish/vendor_completions.d/anchor.fish \
  /usr/share/anchor/catalog.yaml /usr/share/anchor/configs/catalog.yaml /usr/share/doc/anchor/copyright /usr/bin/anchor-torch; do
  [[ -f "$root$f" ]] || fail "$f is not installed"
done
# Removed, it leaves none of its files.
chroot "$root" dpkg -L anchor | while read -r f; do if [[ -f "$root$f" ]]; then echo "$f"; fi; done >"$work/files.txt"
chroot "$root" dpkg -r anchor >"$work/remove.log" 2>&1 || { cat "$work/remove.log" >&2; fail "dpkg -r failed"; }
left=$(while read -r f; do if [[ -e "$root$f" ]]; then echo "$f"; fi; done <"$work/files.txt")
[[ -z "$left" ]] || fail "dpkg -r left $(echo "$left" | wc -l) files: $(echo "$left" | head -3)"
say "OK: $(wc -l <"$work/files.txt") files installed and removed again, nothing left"
