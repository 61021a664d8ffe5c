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
# Two things of this VM are worked around, and only when they are so: a
# hybrid cgroup layout (v1 controllers and a cgroup2 mount holding
# controllers; crun refuses it) is hidden by unmounting /sys/fs/cgroup/unified
# in a private mount namespace; and where the kernel refuses crun's setrlimit
# even at the current values (this one does), crun runs through a wrapper
# that drops process.rlimits from the container's config.json and execs crun.
# Podman writes /run/.containerenv either way; that is what is tested.
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
mkdir -p "$work/out" "$work/bin"

# crun with the container's rlimits dropped (see above).
cat > "$work/bin/crun" <<'EOF'
#!/usr/bin/env bash
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case ${args[i]} in
    --bundle|-b) bundle=${args[i+1]} ;;
    --bundle=*) bundle=${args[i]#--bundle=} ;;
  esac
done
if [[ -n ${bundle:-} && -f $bundle/config.json ]]; then
  python3 -c 'import json, sys
p = sys.argv[1]; c = json.load(open(p)); c.get("process", {}).pop("rlimits", None); json.dump(c, open(p, "w"))' "$bundle/config.json"
fi
exec crun "$@"
EOF
chmod +x "$work/bin/crun"
# A private store: nothing of this test stays in the host's Podman.
podman=(podman --root "$work/storage" --runroot "$work/run" --events-backend none)
runtime=crun  # the wrapper once crun is refused its setrlimit (run_in)

# The image: empty directories and the merged-/usr links; /usr and /etc come from the host.
mkdir -p "$work/rootfs"/{usr,etc,tmp,proc,sys,dev,run,root}
for l in lib lib64 bin sbin; do ln -s "usr/$l" "$work/rootfs/$l"; done
tar -C "$work/rootfs" -cf "$work/rootfs.tar" .
"${podman[@]}" import -q "$work/rootfs.tar" localhost/anchor-detect:test >/dev/null
id=$("${podman[@]}" images --no-trunc --format '{{.ID}}' localhost/anchor-detect:test)
id=${id#sha256:}
[[ $id =~ ^[0-9a-f]{64}$ ]] || fail "podman images gave no image id ('$id')"
say "image localhost/anchor-detect:test, id sha256:$id"

# What anchor pins inside: a config and one data file, in the shared output directory.
printf 'hello container\n' > "$work/out/data.txt"
printf 'data:\n  train: [data.txt]\n' > "$work/out/pin.yaml"
touch -d '-1 minute' "$work/out/data.txt"

hybrid=0
[[ -n $(cat /sys/fs/cgroup/unified/cgroup.controllers 2>/dev/null) ]] && hybrid=1
# run_in [podman run options...] -- anchor args...: status, and the output in $work/log
run_in() {
  local opts=()
  while [[ $1 != -- ]]; do opts+=("$1"); shift; done
  shift
  local cmd=("${podman[@]}" --runtime "$runtime" run --rm --network none --cgroups=disabled "${opts[@]}"
             -v /usr:/usr:ro -v /etc:/etc:ro -v "$build:$build:ro" -v "$work/out:/out"
             -w /out -e ANCHOR_CACHE_DIR=/out/cache -e HOME=/root
             localhost/anchor-detect:test "$anchor" "$@")
  local status=0
  if [[ $hybrid == 1 ]]; then
    unshare -m --propagation private bash -c 'umount /sys/fs/cgroup/unified && exec "$@"' _ "${cmd[@]}" \
      >"$work/log" 2>&1 || status=$?
  else
    "${cmd[@]}" >"$work/log" 2>&1 || status=$?
  fi
  if [[ $status != 0 && $runtime == crun ]] && grep -q "crun: setrlimit" "$work/log"; then
    say "crun's setrlimit is refused here: running crun without the container's rlimits"
    runtime=$work/bin/crun
    run_in "${opts[@]}" -- "$@"
    return
  fi
  return $status
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
