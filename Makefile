# The two README commands. Everything else is plain CMake (see CMakePresets.json).
#   make pilot   install what is missing, build the two binaries, run the pilot on the embedded default
#   make test    install what is missing, build and run the whole suite against both
#                LibTorch lines: Debian's 1.13 (build/release) and PyTorch 2.x with
#                CUDA from PyPI (build/torch2)
# and the pieces:
#   make build   the release preset (Debian's LibTorch 1.13)
#   make torch2  the torch2 preset: installs the hash-locked PyTorch 2.x environment
#                (scripts/install-torch2.sh, once per lock file per machine) and the
#                other libraries as a GPU node gets them (scripts/gpu-prefix.sh), and builds
.PHONY: pilot test deps test-deps build torch2 torch2-deps clean

JOBS ?= 2

deps:
	@scripts/install-deps.sh

test-deps:
	@scripts/install-deps.sh --test

torch2-deps:
	@scripts/install-torch2.sh
	@scripts/gpu-prefix.sh

build: deps
	cmake --preset release
	cmake --build --preset release -j $(JOBS)

torch2: deps torch2-deps
	cmake --preset torch2
	cmake --build --preset torch2 -j $(JOBS)

# Only what the pilot runs: the two binaries, not the tests and benchmarks
# (docs/development.md, "Set-up time").
pilot: deps
	cmake --preset release
	cmake --build --preset release -j $(JOBS) --target anchor anchor-torch
	build/release/bin/anchor pilot configs/pilot.yaml

# Both lines are built and tested even when the first one fails, then the
# exit status says whether both passed (scripts/test-both-lines.sh).
test: test-deps torch2-deps
	@scripts/test-both-lines.sh $(JOBS)

clean:
	rm -rf build
