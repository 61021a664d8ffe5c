# The two README commands. Everything else is plain CMake (see CMakePresets.json).
#   make pilot   install what is missing, build, run the pilot on the embedded default
#   make test    install what is missing, build, run the whole test suite
.PHONY: pilot test deps test-deps build clean

JOBS ?= 2

deps:
	@scripts/install-deps.sh

test-deps:
	@scripts/install-deps.sh --test

build: deps
	cmake --preset release
	cmake --build --preset release -j $(JOBS)

pilot: build
	build/release/bin/anchor pilot configs/pilot.yaml

test: test-deps build
	ctest --preset release

clean:
	rm -rf build
