# Shared by the Podman tests (podman_container.sh, container_image.sh): a
# rootful Podman with a private store under $work, and what this VM needs to
# run a container at all, each only where it is needed:
#  - a hybrid cgroup layout (v1 controllers and a cgroup2 mount that holds
#    controllers), which crun refuses, is hidden by unmounting
#    /sys/fs/cgroup/unified in a private mount namespace (--cgroups=disabled);
#  - where the kernel refuses crun's setrlimit even at the current values,
#    crun runs through a wrapper that drops process.rlimits from the
#    container's config.json and execs crun.
# Podman itself (its /run/.containerenv, its image ids, its builds) is real.
# Sourced; needs $work (a scratch directory, removed by the caller) and say/fail.

podman_setup() {
  mkdir -p "$work/bin"
  cat > "$work/bin/crun" <<'WRAP'
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
WRAP
  chmod +x "$work/bin/crun"
  PODMAN=(podman --root "$work/storage" --runroot "$work/run" --events-backend none --cgroup-manager cgroupfs)
  PODMAN_RUNTIME=crun
  PODMAN_HYBRID=0
  [[ -n $(cat /sys/fs/cgroup/unified/cgroup.controllers 2>/dev/null) ]] && PODMAN_HYBRID=1
  return 0
}

# podman_do ARGS...: podman with the private store and the runtime chosen, in a
# mount namespace without the cgroup2 mount where the layout is hybrid.
podman_do() {
  local cmd=("${PODMAN[@]}" --runtime "$PODMAN_RUNTIME" "$@")
  if [[ $PODMAN_HYBRID == 1 ]]; then
    unshare -m --propagation private bash -c 'umount /sys/fs/cgroup/unified && exec "$@"' _ "${cmd[@]}"
  else
    "${cmd[@]}"
  fi
}

# podman_pick_runtime IMAGE: runs /usr/bin/true in IMAGE; crun's setrlimit
# refused: the wrapper from then on; any other failure: fail.
podman_pick_runtime() {
  local log=$work/pick.log
  podman_do run --rm --network none --cgroups=disabled -v /usr:/usr:ro "$1" /usr/bin/true >"$log" 2>&1 && return 0
  if grep -q "crun: setrlimit" "$log"; then
    say "crun's setrlimit is refused here: running crun without the container's rlimits"
    PODMAN_RUNTIME=$work/bin/crun
    podman_do run --rm --network none --cgroups=disabled -v /usr:/usr:ro "$1" /usr/bin/true >"$log" 2>&1 && return 0
  fi
  cat "$log" >&2
  fail "podman cannot run a container here"
}

# podman_base_image TAG [podman import --change ...]: an image of empty
# directories and the merged-/usr links (/usr, /etc come from the host by -v).
podman_base_image() {
  local tag=$1
  shift
  rm -rf "$work/rootfs"
  mkdir -p "$work/rootfs"/{usr,etc,tmp,proc,sys,dev,run,root}
  for l in lib lib64 bin sbin; do ln -s "usr/$l" "$work/rootfs/$l"; done
  tar -C "$work/rootfs" -cf "$work/rootfs.tar" .
  podman_do import -q "$@" "$work/rootfs.tar" "$tag" >/dev/null
}

# podman_image_id TAG: the image's id, 64 hex
podman_image_id() {
  local id
  id=$(podman_do images --no-trunc --format '{{.ID}}' "$1")
  echo "${id#sha256:}"
}
