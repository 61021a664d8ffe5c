#!/usr/bin/env bash
# ctest build.exit_codes: tests/compile/exit_codes.py finds each kind of bare
# exit code in its fixture (the negative control: the check can fail), and none
# in src/. test_exit_codes.sh PYTHON
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
py=${1:-python3}
out=$("$py" tests/compile/exit_codes.py --file tests/compile/exit_codes_fixture.txt)
rc=$?
n=$(printf '%s\n' "$out" | grep -c '^tests/compile/exit_codes_fixture.txt:[0-9]*: ')
if [[ $rc -ne 1 || $n -ne 5 ]]; then
  echo "negative control: expected exit 1 and 5 findings in the fixture, got exit $rc and $n:"
  echo "$out"
  exit 1
fi
echo "negative control: the fixture's 5 bare exit codes are found"
"$py" tests/compile/exit_codes.py .
