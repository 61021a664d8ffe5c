#!/usr/bin/env bash
# Installs PyTorch 2.x (PyPI's CUDA build) for the `torch2` build, pinned by
# hash: a virtual environment made from requirements/torch2.txt with
# `pip install --require-hashes`, outside the source tree, keyed by the lock
# file's SHA-256 (scripts/torch2-python --env-dir says where). Every clone and
# every CI run on a machine reuses it; a changed lock gets a new environment.
#
# Idempotent: with the environment in place it downloads nothing. It says what
# it downloads. Two runs at once wait for each other (flock). An environment
# left half-made by a killed run is removed and made again.
#
# The interpreter: $ANCHOR_PYTHON, else the first python3 on PATH, else
# /usr/bin/python3; it must be a CPython the lock has wheels for.
# ANCHOR_SKIP_TORCH2=1 skips the install (a machine that builds only the
# Debian LibTorch line).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
lock="$here/../requirements/torch2.txt"
env_dir=$("$here/torch2-python" --env-dir)
digest=$(sha256sum "$lock" | cut -c1-64)

if [[ "${ANCHOR_SKIP_TORCH2:-0}" == 1 ]]; then
  echo "install-torch2: ANCHOR_SKIP_TORCH2=1, not installing anything"
  exit 0
fi

complete() { [[ "$(cat "$env_dir/.anchor-complete" 2>/dev/null)" == "$digest" ]]; }
torch_line=$(grep -m1 '^torch==' "$lock")
if complete; then
  echo "install-torch2: ${torch_line%% *} present in $env_dir"
  exit 0
fi

mkdir -p "$(dirname "$env_dir")"
exec 9>"$env_dir.lock"
flock 9
if complete; then   # another run finished it while this one waited
  echo "install-torch2: ${torch_line%% *} present in $env_dir"
  exit 0
fi

# The Pythons the lock serves, from its header ("# Linux x86_64, CPython 3.11, 3.12").
served=$(sed -n 's/^# Linux x86_64, CPython \(.*\); install with$/\1/p' "$lock")
if [[ "$(uname -sm)" != "Linux x86_64" ]]; then
  echo "install-torch2: requirements/torch2.txt has wheels for Linux x86_64 only, this is $(uname -sm)" >&2
  exit 2
fi
python=""
for candidate in ${ANCHOR_PYTHON:-} python3 /usr/bin/python3; do
  command -v "$candidate" >/dev/null 2>&1 || continue
  version=$("$candidate" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) || continue
  if [[ ", $served, " == *", $version, "* ]]; then python=$candidate; break; fi
  echo "install-torch2: $candidate is Python $version; the lock has wheels for CPython $served"
  [[ -n "${ANCHOR_PYTHON:-}" && "$candidate" == "$ANCHOR_PYTHON" ]] && exit 2
done
if [[ -z "$python" ]]; then
  echo "install-torch2: no Python among ${ANCHOR_PYTHON:-} python3 /usr/bin/python3 is CPython $served" >&2
  echo "hint: set ANCHOR_PYTHON to one, or relock for yours with scripts/lock_torch2.py" >&2
  exit 2
fi

# The wheels are about 4 GB and unpack to about 7 GB (measured for torch 2.15.0).
need_kb=$((12 * 1024 * 1024))
free_kb=$(df -Pk "$(dirname "$env_dir")" | awk 'NR == 2 {print $4}')
if (( free_kb < need_kb )); then
  echo "install-torch2: $(dirname "$env_dir") has $((free_kb / 1024 / 1024)) GiB free; the environment needs about 12 GiB while it installs" >&2
  echo "hint: free space there, or set ANCHOR_CACHE_DIR to a file system with room" >&2
  exit 1
fi

count=$(grep -c '^[a-z0-9]' "$lock")
echo "install-torch2: installing ${torch_line%% *} and $((count - 1)) more distributions it needs"
echo "install-torch2:   from PyPI, every wheel checked against its SHA-256 in requirements/torch2.txt"
echo "install-torch2:   into $env_dir (Python $version: $(command -v "$python"))"
rm -rf "$env_dir"
"$python" -m venv "$env_dir" || {
  echo "install-torch2: $python -m venv failed; on Debian install python3-venv" >&2
  exit 1
}
# --no-deps: the lock is the whole closure; --no-cache-dir: keep no second copy of 4 GB of wheels.
"$env_dir/bin/python" -m pip install --quiet --disable-pip-version-check --no-cache-dir \
  --progress-bar off --require-hashes --only-binary=:all: --no-deps -r "$lock"
"$env_dir/bin/python" -m pip check >/dev/null
"$env_dir/bin/python" -c 'import torch; print("install-torch2: torch", torch.__version__, "CUDA", torch.version.cuda, "at", torch.__file__.rsplit("/", 1)[0])'
echo "$digest" > "$env_dir/.anchor-complete"
echo "install-torch2: done ($(du -sh "$env_dir" | cut -f1))"
