#!/usr/bin/env bash
# The container image detected in a real Podman container (issue 19;
# docs/manifest.md, "Container"), as the ctest install.podman_container runs it:
#
#   tests/install/podman_container.sh BUILD_DIR
#
#  1. An image made here with `podman import` (a few directories and the
#     merged-/usr links; no registry is reachable), in a private storage
#     directory that is removed afterwards. Its id is what `podman images`
#     gives.
#  2. `anchor pin` of a small config run in a container of that image with
#     --privileged (the host's /usr and /etc read-only, BUILD_DIR at its own
#     path): with container.required: true it passes, and the manifest's
#     container.digest is sha256:<that id>, source podman, and
#     container.detected names the image.
#  3. Controls: the same without --privileged (Podman then writes only
#     engine= into /run/.containerenv) detects nothing: container.required
#     is refused with exit 2 naming the file, and without it the manifest
#     says source none, digest null, containerised (the file exists).
#
# What this VM needs to run a container at all (a hybrid cgroup layout,
# crun's setrlimit refused) is worked around in tests/install/podman_lib.sh,
# each only where it is needed; what Podman writes is what is tested.
#
# Exit 0 when all of it holds, 1 at the first thing that does not, 77 (ctest:
# skipped, with the reason) when not root or podman/crun are not installed.
set -euo pipefail

build=${1:?usage: podman_container.sh BUILD_DIR}
build=$(cd "$build" && pwd)
anchor=$build/bin/anchor
say() { echo "podman_container: $*"; }
fail() { echo "podman_container: FAIL: $*" >&2; exit 1; }
if [[ $(id -u) -ne 0 ]]; then
  echo "podman_container: SKIP: needs root (a rootful Podman container, and a private mount namespace)"
  exit 77
fi
for tool in podman crun python3; do
  command -v $tool >/dev/null || { echo "podman_container: SKIP: $tool is not installed (scripts/install-deps.sh --test installs podman)"; exit 77; }
done
[[ -x $anchor ]] || fail "no anchor at $anchor"

work=$(mktemp -d "${TMPDIR:-/tmp}/anchor-podman.XXXXXX")
cleanup() { rm -rf "$work" 2>/dev/null || true; }
trap cleanup EXIT
mkdir -p "$work/out"
source "$(dirname "${BASH_SOURCE[0]}")/podman_lib.sh"
podman_setup
podman_base_image localhost/anchor-detect:test
id=$(podman_image_id localhost/anchor-detect:test)
[[ $id =~ ^[0-9a-f]{64}$ ]] || fail "podman images gave no image id ('$id')"
say "image localhost/anchor-detect:test, id sha256:$id"
podman_pick_runtime localhost/anchor-detect:test

# What anchor pins inside: a config and one data file, in the shared output directory.
printf 'hello container\n' > "$work/out/data.txt"
printf 'data:\n  train: [data.txt]\n' > "$work/out/pin.yaml"
touch -d '-1 minute' "$work/out/data.txt"

# run_in [podman run options...] -- anchor args...: status, and the output in $work/log
run_in() {
  local opts=()
  while [[ $1 != -- ]]; do opts+=("$1"); shift; done
  shift
  podman_do run --rm --network none --cgroups=disabled "${opts[@]}" \
    -v /usr:/usr:ro -v /etc:/etc:ro -v "$build:$build:ro" -v "$work/out:/out" \
    -w /out -e ANCHOR_CACHE_DIR=/out/cache -e HOME=/root \
    localhost/anchor-detect:test "$anchor" "$@" >"$work/log" 2>&1
}
field() { python3 -c 'import json, sys; c = json.load(open(sys.argv[1]))["container"]; print(json.dumps(c.get(sys.argv[2])))' "$@"; }

# 2. --privileged: Podman fills /run/.containerenv; container.required is met by it.
run_in --privileged -- pin pin.yaml -o /out/privileged.json --set container.required=true ||
  { cat "$work/log" >&2; fail "anchor pin in a --privileged container exited $?"; }
[[ $(field "$work/out/privileged.json" digest) == "\"sha256:$id\"" ]] ||
  fail "container.digest is $(field "$work/out/privileged.json" digest), not sha256:$id"
[[ $(field "$work/out/privileged.json" source) == '"podman"' ]] || fail "container.source is not podman"
python3 - "$work/out/privileged.json" "$id" <<'EOF' || fail "container.detected is not the image"
import json, sys
d = json.load(open(sys.argv[1]))["container"]["detected"]
assert d == {"digest": "sha256:" + sys.argv[2], "source": "podman", "image": "localhost/anchor-detect:test"}, d
EOF
say "--privileged: container.digest sha256:$id (source podman), container.required met"

# 3. Controls: unprivileged, Podman writes only engine=; nothing is detected.
status=0
run_in -- pin pin.yaml -o /out/required.json --set container.required=true || status=$?
[[ $status == 2 ]] || { cat "$work/log" >&2; fail "container.required without a detected digest exited $status, not 2"; }
grep -q "/run/.containerenv" "$work/log" || { cat "$work/log" >&2; fail "the refusal does not name /run/.containerenv"; }
[[ ! -e $work/out/required.json ]] || fail "a refused pin left required.json"
run_in -- pin pin.yaml -o /out/plain.json || { cat "$work/log" >&2; fail "anchor pin in an unprivileged container exited $?"; }
[[ $(field "$work/out/plain.json" digest) == null && $(field "$work/out/plain.json" source) == '"none"' &&
   $(field "$work/out/plain.json" detected) == null && $(field "$work/out/plain.json" containerised) == true ]] ||
  fail "unprivileged: expected no digest, source none, nothing detected, containerised; got $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["container"])' "$work/out/plain.json")"
say "unprivileged: nothing detected; container.required refused with exit 2 naming /run/.containerenv"
