#!/usr/bin/env bash
# Makes build/gpu-prefix: the Debian packages anchor builds against, other
# than LibTorch, unpacked (dpkg -x) into a prefix that CMake finds through
# CMAKE_PREFIX_PATH. A GPU node has PyTorch (and so LibTorch), CMake, ninja
# and nvcc, but no package registry: this folder travels with the working
# tree instead (well under 64 MiB), and the torch2 preset builds against it
# here too, so CI proves on every run the build a GPU node will do.
#
# Idempotent: the folder is made again only when the package list or a
# package's version changes (build/gpu-prefix/.packages holds what is there).
# Needs Debian's apt (apt-get download; no root needed for that).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dest="$root/build/gpu-prefix"
packages=(
  libcli11-dev nlohmann-json3-dev        # header-only
  libyaml-cpp-dev libyaml-cpp0.7
  libspdlog-dev libspdlog1.10 libfmt-dev libfmt9
  libgtest-dev                           # the gpu tests (tests/gpu/)
  libssl-dev libssl3                     # OpenSSL 3: signing; a node may lack the headers
  libgloo-dev                            # headers that ProcessGroupGloo.hpp includes (the code is in libtorch_cpu)
)

if ! command -v apt-get >/dev/null || ! command -v dpkg >/dev/null; then
  echo "gpu-prefix: needs Debian's apt-get and dpkg (run it on the build machine, then carry build/gpu-prefix)" >&2
  exit 2
fi
versions() { apt-cache policy "${packages[@]}" 2>/dev/null | awk '/^[^ ]/ {p=$1} /Candidate:/ {print p, $2}'; }
want=$(versions)
if [[ "$want" != *"(none)"* && -f "$dest/.packages" && "$(cat "$dest/.packages")" == "$want" ]]; then
  echo "gpu-prefix: $dest is up to date ($(du -sh "$dest" | cut -f1))"
  exit 0
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/anchor-gpu-prefix.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
if ! apt-get download -qq "${packages[@]}" 2>/dev/null; then
  echo "gpu-prefix: apt-get download failed; refreshing the package lists"
  sudo=()
  [[ $(id -u) -eq 0 ]] || sudo=(sudo)
  "${sudo[@]}" apt-get update -qq
  apt-get download -qq "${packages[@]}"
  want=$(versions)
fi
mkdir -p stage
for deb in *.deb; do dpkg -x "$deb" stage; done
# What a build does not read: docs, manuals, and OpenSSL's static archives.
rm -rf stage/usr/share/doc stage/usr/share/man stage/usr/share/lintian
rm -f stage/usr/lib/x86_64-linux-gnu/libssl.a stage/usr/lib/x86_64-linux-gnu/libcrypto.a
echo "$want" > stage/.packages
mkdir -p "$(dirname "$dest")"
rm -rf "$dest.tmp"
mv stage "$dest.tmp"
rm -rf "$dest"
mv "$dest.tmp" "$dest"
echo "gpu-prefix: unpacked $(ls *.deb | wc -l) packages into $dest ($(du -sh "$dest" | cut -f1)):"
sed 's/^/gpu-prefix:   /' "$dest/.packages"
