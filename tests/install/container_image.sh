#!/usr/bin/env bash
# The Dockerfile built and run (issue 19; docs/development.md, "A container
# image"), as the ctest install.container_image runs it in the torch2 build:
#
#   tests/install/container_image.sh
#
# No registry is reachable here, so the base is not docker.io's PyTorch image
# but one made here with what that image brings: PyTorch 2.x with CUDA (the
# torch2 environment: PyPI's CUDA wheel), nvcc, cmake and ninja, through
# read-only mounts of the host's /usr and /etc and of the environment, its
# python3 first on PATH. Then, with Podman (tests/install/podman_lib.sh):
#  1. `podman build --build-arg BASE=<that image>` of the source tree's
#     Dockerfile (its context: the sources and build/gpu-prefix, by
#     .dockerignore); ccache's directory is mounted, so objects the torch2
#     build already compiled are not compiled again; the image's user is
#     10001, its OCI labels name the commit and the license, and it holds
#     no sources and no build tree (the build stage's);
#  2. in a --privileged container of the image: `anchor --version`, and the
#     embedded default pilot with container.required: true passes, and its
#     report's manifest records container.digest sha256:<the image's id>
#     (Podman's /run/.containerenv), source podman;
#  3. control: unprivileged, the same pilot is refused (exit 2) before it
#     trains, naming /run/.containerenv.
#
# Exit 0 when all of it holds, 1 otherwise (also when TMPDIR has less than
# 6 GiB free, which the build needs), 77 (skipped, with the reason) when
# not root, without podman/crun, or without the torch2 environment.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
src=$(pwd)
say() { echo "container_image: $*"; }
fail() { echo "container_image: FAIL: $*" >&2; exit 1; }
skip() { echo "container_image: SKIP: $*"; exit 77; }
[[ $(id -u) -eq 0 ]] || skip "needs root (rootful Podman, a private mount namespace)"
for tool in podman crun python3; do
  command -v $tool >/dev/null || skip "$tool is not installed (scripts/install-deps.sh --test installs podman)"
done
env_dir=$(scripts/torch2-python --env-dir)
[[ -x $env_dir/bin/python3 ]] || skip "no torch2 environment at $env_dir (scripts/install-torch2.sh)"
[[ -d build/gpu-prefix/usr ]] || fail "build/gpu-prefix is missing (scripts/gpu-prefix.sh): the Dockerfile builds against it"

# Podman's store under $work holds the base, the context and the image's build
# tree: 2.5 GB at its peak here with ccache warm, more with it cold. Too little
# room fails the build deep inside the container (ar: No space left on device):
# say so up front instead.
scratch=${TMPDIR:-/tmp}
need_mib=6144
free_mib=$(df -Pm "$scratch" | awk 'NR == 2 { print $4 }')
[[ $free_mib =~ ^[0-9]+$ ]] || fail "cannot read the free space of $scratch (df -Pm)"
((free_mib >= need_mib)) ||
  fail "$scratch has ${free_mib} MiB free; building the image needs about ${need_mib} MiB: free space there or point TMPDIR elsewhere"
work=$(mktemp -d "$scratch/anchor-image.XXXXXX")
cleanup() { rm -rf "$work" 2>/dev/null || true; }
trap cleanup EXIT
source "$src/tests/install/podman_lib.sh"
podman_setup

# 1. The base, then the Dockerfile on it.
# ccache hashes the locale variables into every key: the build in the image
# gets the host's, or it could take none of the torch2 build's objects from the
# mounted cache (with LANG=C.UTF-8 outside and none inside, it compiled all of
# them again: ~17 of this test's ~20 minutes on 2 cores).
locale_env=()
for v in LANG LC_ALL LC_CTYPE LC_MESSAGES; do
  if [[ -n ${!v:-} ]]; then locale_env+=(--change "ENV $v=${!v}"); fi
done
podman_base_image localhost/anchor-base:test \
  --change "ENV PATH=$env_dir/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
  --change "ENV HOME=/root" "${locale_env[@]}"
podman_pick_runtime localhost/anchor-base:test
ccache_dir=$(ccache --get-config cache_dir 2>/dev/null || true)
# The environment's interpreter lives under its base prefix (a venv links to it).
base_prefix=$("$env_dir/bin/python3" -c 'import sys; print(sys.base_prefix)')
mounts=(-v /usr:/usr:ro -v /etc:/etc:ro -v "$env_dir:$env_dir:ro")
[[ $base_prefix == /usr || $base_prefix == /usr/* ]] || mounts+=(-v "$base_prefix:$base_prefix:ro")
build_mounts=("${mounts[@]}")
[[ -n $ccache_dir && -d $ccache_dir ]] && build_mounts+=(-v "$ccache_dir:/root/.cache/ccache")
t0=$(date +%s)
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
podman_do build --isolation oci --network none --build-arg BASE=localhost/anchor-base:test \
  --build-arg REVISION="$revision" \
  "${build_mounts[@]}" -t localhost/anchor:test -f Dockerfile . >"$work/build.log" 2>&1 ||
  { tail -n 40 "$work/build.log" >&2; fail "podman build of the Dockerfile failed (above)"; }
id=$(podman_image_id localhost/anchor:test)
[[ $id =~ ^[0-9a-f]{64}$ ]] || fail "podman images gave no id for the built image ('$id')"
say "built localhost/anchor:test (sha256:$id) from the Dockerfile in $(( $(date +%s) - t0 )) s"
# Its user and labels, and only what runs: no sources, no build tree.
facts=$(podman_do image inspect --format '{{.Config.User}} {{index .Config.Labels "org.opencontainers.image.revision"}} {{index .Config.Labels "org.opencontainers.image.licenses"}}' localhost/anchor:test) || fail "podman image inspect failed"
[[ $facts == "10001:10001 $revision MIT" ]] || fail "the image's user, revision and license labels are '$facts', not '10001:10001 $revision MIT'"
inside=$(podman_do run --rm --network none --cgroups=disabled "${mounts[@]}" localhost/anchor:test \
  sh -c 'echo "$(id -u) $HOME $(pwd)"; ls /opt/anchor/src/build/gpu-prefix/usr; if test -e /opt/anchor/src/CMakeLists.txt; then echo sources; fi') ||
  fail "the image's sh -c 'id -u; ...' failed: $inside"
[[ $inside == "10001 /home/anchor /work"$'\n'"lib" ]] ||
  fail "in the image: expected uid 10001, HOME /home/anchor in /work and no sources, found: $inside"
say "the image runs as uid 10001 in /work, labelled revision $revision, license MIT; no sources or build tree in it"

run=(run --rm --network none --cgroups=disabled "${mounts[@]}" localhost/anchor:test)
# 2. The image's anchor, and the default pilot in a --privileged container.
podman_do "${run[@]:0:4}" --privileged "${run[@]:4}" anchor --version >"$work/log" 2>&1 ||
  { cat "$work/log" >&2; fail "anchor --version in the image failed"; }
say "$(head -n 1 "$work/log")"
pilot=(anchor pilot /opt/anchor/share/anchor/configs/pilot.yaml --run-dir /work/run --set container.required=true
       --set report.signing_key=none --json)
podman_do "${run[@]:0:4}" --privileged "${run[@]:4}" "${pilot[@]}" >"$work/report.json" 2>"$work/log" ||
  { tail -n 30 "$work/log" >&2; fail "the default pilot in a --privileged container of the image failed"; }
python3 - "$work/report.json" "$id" <<'PY' || fail "the pilot's report does not record the image"
import json, sys
r = json.load(open(sys.argv[1]))
c = r["manifest"]["container"]
assert r["status"] == "passed" and r["resume"]["verdict"] == "match", (r.get("status"), r.get("resume"))
assert c["digest"] == "sha256:" + sys.argv[2] and c["source"] == "podman", c
assert c["detected"]["image"] == "localhost/anchor:test", c
print("container_image: the pilot passed in the image; manifest.container.digest", c["digest"], "(podman)")
PY

# 3. Control: unprivileged, no digest is known: refused before training.
status=0
podman_do "${run[@]}" "${pilot[@]}" >"$work/refused.json" 2>"$work/log" || status=$?
[[ $status == 2 ]] || { tail -n 20 "$work/log" >&2; fail "unprivileged, container.required exited $status, not 2"; }
grep -q "/run/.containerenv" "$work/log" || { tail -n 20 "$work/log" >&2; fail "the refusal does not name /run/.containerenv"; }
say "unprivileged: container.required refused with exit 2 naming /run/.containerenv"
