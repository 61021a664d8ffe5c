#!/usr/bin/env bash
# ctest build.owned_fds: every descriptor in src/ is owned (fs::UniqueFd,
# include/anchor/common/unique_fd.hpp): close(2) is called only by UniqueFd
# itself and, after fork, on the child side of proc::spawn, which never
# returns into the parent's objects. The control: the fixture's raw close is found.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
pattern='(^|[^A-Za-z0-9_.>])::close\('
fixture=$(printf '  if (fd >= 0) ::close(fd);\n')
if ! grep -qE "$pattern" <<<"$fixture"; then
  echo "negative control: the pattern does not find a raw ::close"
  exit 1
fi
found=$(grep -nE "$pattern" -r src --include='*.cpp' --include='*.hpp' |
  grep -v '^src/common/unique_fd\.cpp:' |
  grep -v '^src/common/process\.cpp:.*close_inherited\|^src/common/process\.cpp:.*for (int fd = 3; fd < max_fd' || true)
if [[ -n $found ]]; then
  echo "$found"
  echo "owned_fds: a raw ::close in src/: own the descriptor with fs::UniqueFd instead"
  exit 1
fi
echo "owned_fds: no raw ::close in src/ outside UniqueFd and the child side of proc::spawn"
