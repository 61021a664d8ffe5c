#!/usr/bin/env bash
# Installs the Debian 12 packages anchor needs, only those missing.
# Idempotent; prints what it installs; works as root and uses sudo otherwise.
# Set ANCHOR_SKIP_DEPS=1 to skip (e.g. a node without a package registry,
# building against a prefix named in CMAKE_PREFIX_PATH).
# --test adds what only the test suite needs (`make test` passes it).
set -euo pipefail

if [[ "${ANCHOR_SKIP_DEPS:-0}" == 1 ]]; then
  echo "install-deps: ANCHOR_SKIP_DEPS=1, not installing anything"
  exit 0
fi

packages=(
  cmake ninja-build g++ make git
  ccache                   # a rebuild, another clone or CI after a local build recompiles only what changed (cmake/AnchorCcache.cmake)
  libtorch-dev
  libopenblas0-pthread     # LibTorch's BLAS: 40x faster than Debian's reference BLAS
  libgloo-dev              # headers ProcessGroupGloo.hpp includes
  libcli11-dev libyaml-cpp-dev nlohmann-json3-dev libspdlog-dev libfmt-dev
  libgtest-dev libssl-dev openssl
  python3-venv             # the torch2 environment (scripts/install-torch2.sh) when python3 is Debian's
)
# What only the test suite needs (`make test`); `make pilot` does without.
if [[ "${1:-}" == --test ]]; then
  packages+=(
    python3-torch                         # interop tests and torchrun (for /usr/bin/python3 only)
    python3-cryptography                  # independent signature verification in the tests
    slurmctld slurmd slurm-client munge   # `srun anchor pilot` on a private Slurm cluster (tests/support/slurm_cluster.hpp)
    libxml2-utils                         # xmllint: the JUnit files against Jenkins' xunit schema (tests/support/junit-10.xsd)
    zsh fish mandoc                       # the generated zsh and fish completion run in their shells, the man page linted (test_cli_completion)
    lintian                               # the .deb against Debian's policy (tests/install/deb_lintian.sh)
    chromium                              # report.html loaded in a real headless browser (test_report_html)
    mmdebstrap                            # a fresh Debian root for the .deb's install test (tests/install/deb_fresh_root.sh)
    podman crun                           # the image id detected in a real container (tests/install/podman_container.sh)
    clang-tidy                            # the tidy check (scripts/tidy.sh, tests/tidy/test_tidy.sh)
    clang-format                          # the layout check (scripts/format.sh, tests/format/test_format.sh)
    time python3-yaml                     # GNU time and the Python peer's YAML (bench/bench_pilot.sh, ctest bench.pilot_tiny)
  )
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo=()
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "install-deps: not root and no sudo; install: ${missing[*]}" >&2; exit 1; }
  sudo=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "install-deps: done"
