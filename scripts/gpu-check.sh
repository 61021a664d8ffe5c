#!/usr/bin/env bash
# The GPU check: on an NVIDIA node with a Python PyTorch 2.x CUDA install,
# CMake, ninja and nvcc, but no internet and no Debian -dev packages, build
# anchor against that node's torch and check it on the GPU; one JSON summary.
#
#   scripts/gpu-check.sh [--dry-run] [--python PY] [--out DIR] [--jobs N]
#
#   --python PY  the Python whose torch to build against and to compare with
#                (default: python3 on PATH; with --dry-run: scripts/torch2-python)
#   --out DIR    runs, data and gpu-check.json (default: $OUT when set, as the
#                device runner sets it, else build/gpu-check)
#   --dry-run    no device: build against the PyPI CUDA torch and run every
#                check up to its first CUDA call (CI does, after make test)
#
# The other libraries come from build/gpu-prefix (scripts/gpu-prefix.sh, run
# on a machine with Debian's registry; carry that folder to the node, ~14 MB).
# The build is the torch2 preset with ANCHOR_TORCH_PYTHON set to PY; only the
# targets the checks run are built. The checks: scripts/gpu_check.py.
# Exit 0 when every check passed (dry: reached its first CUDA call).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
dry=0
python=""
out="${OUT:-}"
jobs=$(nproc)
while [[ $# -gt 0 ]]; do
  case $1 in
    --dry-run) dry=1; shift ;;
    --python) python=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu-check: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ -n $python ]] || { [[ $dry == 1 ]] && python=scripts/torch2-python || python=python3; }
[[ -n $out ]] || out=build/gpu-check
python=$(command -v "$python") || { echo "gpu-check: no Python '$python'" >&2; exit 2; }
# Absolute, as the torch2 preset names its own (a different string would reconfigure).
[[ $python == /* ]] || python="$(cd "$(dirname "$python")" && pwd)/$(basename "$python")"

say() { echo "gpu-check: $*"; }
fail() { echo "gpu-check: $1" >&2; [[ -z ${2:-} ]] || echo "hint: $2" >&2; exit 2; }

# What the node must have; each missing piece is named with what to do.
for tool in cmake ninja; do
  command -v $tool >/dev/null || fail "no $tool on PATH" "the GPU node image brings cmake and ninja"
done
[[ -d build/gpu-prefix/usr ]] ||
  fail "build/gpu-prefix is missing: the Debian -dev packages anchor builds against" \
       "run scripts/gpu-prefix.sh on a machine with Debian's registry and carry build/gpu-prefix"
torch_info=$("$python" -c 'import torch; print(torch.__version__, torch.version.cuda or "none")' 2>/dev/null) ||
  fail "$python cannot import torch" "give the Python of the node's PyTorch with --python"
read -r torch_version torch_cuda <<<"$torch_info"
[[ $torch_cuda != none ]] || fail "$python's torch $torch_version is a CPU build" "the check needs PyTorch's CUDA build"
if [[ $dry == 0 ]]; then
  "$python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' ||
    fail "torch $torch_version (CUDA $torch_cuda) sees no GPU" "check nvidia-smi; without a GPU, run with --dry-run"
fi
say "torch $torch_version (CUDA $torch_cuda) from $python; $( [[ $dry == 1 ]] && echo 'dry run (no device)' || echo 'on the GPU')"

# Build: the torch2 preset against this Python's torch, NCCL required.
t0=$(date +%s)
mkdir -p "$out"
cmake --preset torch2 -DANCHOR_TORCH_PYTHON="$python" >"$out/configure.log" 2>&1 ||
  { tail -n 30 "$out/configure.log" >&2; fail "configure failed (log: $out/configure.log)"; }
# Every package but LibTorch must come from the carried prefix, or the build
# here proves nothing about the node.
prefix=$(cd build/gpu-prefix && pwd)
for var in CLI11_DIR yaml-cpp_DIR nlohmann_json_DIR fmt_DIR spdlog_DIR GTest_DIR OPENSSL_INCLUDE_DIR ANCHOR_GLOO_INCLUDE_DIR; do
  value=$(sed -n "s|^${var}:[A-Z]*=||p" build/torch2/CMakeCache.txt)
  [[ $value == "$prefix"/* ]] || fail "$var is $value, not from build/gpu-prefix" "rerun scripts/gpu-prefix.sh"
done
cmake --build build/torch2 -j "$jobs" --target anchor anchor-torch test_gpu
build_s=$(( $(date +%s) - t0 ))
say "built in ${build_s} s"

args=(--build build/torch2 --out "$out" --build-seconds "$build_s")
[[ $dry == 0 ]] || args+=(--dry-run)
"$python" scripts/gpu_check.py "${args[@]}"
