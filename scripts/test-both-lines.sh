#!/usr/bin/env bash
# `make test`: build and run the whole suite against both LibTorch lines, in
# separate build trees: `release` (Debian's LibTorch 1.13, CPU) and `torch2`
# (PyTorch 2.x with CUDA from PyPI, scripts/install-torch2.sh; it runs on the
# CPU where there is no GPU, and its `gpu` tests skip saying why). Both lines
# run even when the first fails; the exit status is 0 only when both built
# and passed. Ends with each line's summary and how long it took.
#
#   scripts/test-both-lines.sh [JOBS]     (default 2)
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
jobs=${1:-2}
summary=()
status=0

for preset in release torch2; do
  echo "== ${preset}: configure, build (-j ${jobs}), test"
  start=$(date +%s)
  log="build/${preset}-ctest.log"
  rc=0
  if cmake --preset "$preset" >/dev/null && cmake --build --preset "$preset" -j "$jobs"; then
    mkdir -p build
    ctest --preset "$preset" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    line=$(grep -E '^[0-9]+% tests passed' "$log" | tail -n 1)
    skipped=$(grep -c '(Skipped)$' "$log" || true)
    summary+=("${preset}: ${line:-no summary (ctest exit ${rc})}; ${skipped} skipped; $(( $(date +%s) - start )) s")
  else
    rc=1
    summary+=("${preset}: configure or build FAILED after $(( $(date +%s) - start )) s")
  fi
  [[ $rc -eq 0 ]] || status=1
done

echo
echo "== both LibTorch lines"
for s in "${summary[@]}"; do echo "  $s"; done
exit "$status"
