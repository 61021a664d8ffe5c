#!/usr/bin/env bash
# docs/development.md, "GPU nodes": the by-hand lines run as the doc writes
# them (issue 19), as the ctest docs.gpu_node_recipe runs them in the torch2
# build:
#
#   tests/install/gpu_node_recipe.sh
#
# The lines after "# or only build, by hand" in that section's sh block are
# read from the doc (not copied here) and run one by one, in the source root,
# with `python3` on PATH the torch2 environment's: PyPI's CUDA PyTorch, what a
# node's Python has. A line that asks for a CUDA device (`device=cuda`) must
# pass where torch sees a GPU; where it sees none it must stop with exit 2
# saying that no CUDA device is usable (as far as the recipe goes without
# one), and every other line must pass. Afterwards the torch2 build is put
# back as its preset configures and builds it, and what the pilot line wrote
# under runs/ is removed.
#
# Exit 0 when every line did what it should, 1 otherwise (said on stderr).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
say() { echo "gpu_node_recipe: $*"; }
fail() { echo "gpu_node_recipe: FAIL: $*" >&2; exit 1; }

# The lines, from the doc.
mapfile -t lines < <(awk '
  /^## GPU nodes/ { in_section = 1; next }
  in_section && /^## / { exit }
  in_section && /^```sh/ { in_block = 1; next }
  in_block && /^```/ { exit }
  in_block && /^# or only build, by hand/ { by_hand = 1; next }
  in_block && by_hand && /^[^#]/ { print }
' docs/development.md)
[[ ${#lines[@]} -ge 2 ]] || fail "docs/development.md, \"GPU nodes\": no by-hand lines found after '# or only build, by hand'"

env_dir=$(scripts/torch2-python --env-dir)
[[ -x $env_dir/bin/python3 ]] || fail "no torch2 environment at $env_dir (scripts/install-torch2.sh)"
export PATH="$env_dir/bin:$PATH"
[[ $(command -v python3) == "$env_dir/bin/python3" ]] || fail "python3 on PATH is not the torch2 environment's"
gpu=$(python3 -c 'import torch; print(int(torch.cuda.is_available()))')

mkdir -p runs
before=$(ls -A runs)
restore() {
  # The preset names its own ANCHOR_TORCH_PYTHON (scripts/torch2-python): put it back, and
  # rebuild what the other Python's path changed (the tests' ANCHOR_TEST_PYTHON), so the
  # build tree is again what its preset makes (ccache: tens of seconds).
  { cmake --preset torch2 >/dev/null 2>&1 && cmake --build --preset torch2 -j 2 >/dev/null 2>&1; } ||
    echo "gpu_node_recipe: could not rebuild build/torch2 as its preset does" >&2
  comm -13 <(echo "$before" | sort) <(ls -A runs | sort) | while read -r made; do
    [[ -n $made ]] && rm -rf "runs/$made"
  done
  [[ -n $before ]] || rmdir runs 2>/dev/null || true
}
trap restore EXIT

log=$(mktemp "${TMPDIR:-/tmp}/gpu-recipe.XXXXXX")
for line in "${lines[@]}"; do
  say "\$ $line"
  status=0
  bash -c "set -euo pipefail; $line" >"$log" 2>&1 || status=$?
  if [[ $line == *device=cuda* && $gpu == 0 ]]; then
    # Without a GPU the recipe ends here: refused, with the reason, not crashed.
    [[ $status == 2 ]] || { tail -n 20 "$log" >&2; fail "without a GPU, '$line' exited $status, not 2"; }
    grep -qi "cuda" "$log" || { tail -n 20 "$log" >&2; fail "'$line' exited 2 without naming CUDA"; }
    say "  exit 2 without a GPU, as it should: $(grep -i -m1 cuda "$log")"
    continue
  fi
  [[ $status == 0 ]] || { tail -n 30 "$log" >&2; fail "'$line' exited $status"; }
  tail -n 1 "$log" | sed 's/^/  /'
done
rm -f "$log"
say "every by-hand line of docs/development.md, \"GPU nodes\" ran as written ($([[ $gpu == 1 ]] && echo 'on a GPU' || echo 'no GPU: the cuda pilot refused with exit 2'))"
