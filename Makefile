# llmops.sglang - one-command setup, demo and tests. Everything it needs it creates itself.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
VENV := .venv
EMU_VENV := .venv-emulator
BIN := $(VENV)/bin
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export SGLANG_EMULATOR_PYTHON := $(CURDIR)/$(EMU_VENV)/bin/python
export PYTHONDONTWRITEBYTECODE := 1
PYTEST := $(BIN)/python -m pytest -p no:cacheprovider
# The pytest suites run their files side by side (pytest-xdist): TEST_WORKERS processes, each
# file's tests on one worker in file order (--dist loadfile: the tests of one file may share an
# instance name or a module-scoped fixture; across files names, ports and state dirs are per test,
# the cleanup marker per worker). In tests/integration the long files of independent tests
# (SPLIT_FILES in its conftest.py) are handed out test by test. TEST_WORKERS=0 runs a suite in one process. --durations shows
# the slow tests of every run.
TEST_WORKERS ?= 4
SUITE := $(PYTEST) -q --durations=15 -n $(TEST_WORKERS) --dist loadfile
# `$(call timed,NAME,COMMAND)`: COMMAND, then `== NAME: N s` (the per-suite times of docs/development.md),
# printed for a failed COMMAND too (its exit status kept)
timed = echo "== $(1): $(2)"; start=$$(date +%s); rc=0; $(2) || rc=$$?; \
        echo "== $(1): $$(( $$(date +%s) - start )) s$$( [ $$rc -eq 0 ] || echo ", failed (exit status $$rc)")"; exit $$rc
# ansible.cfg's collections_path = ./collections: this link makes the checkout itself the
# collection llmops.sglang for ad hoc use and the tests. Made here, never committed (gitignored).
COLLECTION_LINK := collections/ansible_collections/llmops/sglang

.PHONY: help venv collection-link emulator-venv demo test test-unit test-emulator test-integration test-security \
        test-faults test-molecule test-packaging lint sanity build bench gpu clean test-multihost

help:
	@echo "make demo   - set up and run restart_extraction.yml against the emulator on localhost"
	@echo "make test   - every test: ansible-lint and sanity first, then unit, emulator, integration, security,"
	@echo "              faults, molecule, build, packaging (TEST_WORKERS=N: pytest workers, default 4)"
	@echo "make bench  - benchmarks -> docs/benchmarks.md"

venv: $(VENV)/.stamp $(COLLECTION_LINK)

collection-link: $(COLLECTION_LINK)
$(COLLECTION_LINK):
	mkdir -p $(@D)
	ln -sfn ../../.. $@

$(VENV)/.stamp: requirements-dev.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check -U pip
	$(BIN)/python -m pip install -q --disable-pip-version-check -r requirements-dev.txt
	touch $@

emulator-venv: $(EMU_VENV)/.stamp
$(EMU_VENV)/.stamp: $(shell find tests/emulator -name '*.py' -o -name 'pyproject.toml' 2>/dev/null | grep -v '/tests/')
	test -x $(EMU_VENV)/bin/python || $(PYTHON) -m venv $(EMU_VENV)
	$(EMU_VENV)/bin/python -m pip install -q --disable-pip-version-check --force-reinstall --no-deps ./tests/emulator
	$(EMU_VENV)/bin/python -m pip install -q --disable-pip-version-check ./tests/emulator
	touch $@

demo: venv emulator-venv
	./scripts/demo.sh

# Fail fast: the static checks first (seconds to minutes), then the suites, quickest first.
test: venv emulator-venv router-venv lint sanity test-unit test-emulator test-integration test-security test-faults \
      test-molecule build test-packaging

test-unit: venv
	@$(call timed,test-unit,$(SUITE) tests/unit)

test-emulator: venv emulator-venv
	@$(call timed,test-emulator,$(SUITE) tests/emulator/tests)

test-integration: venv emulator-venv router-venv
	@$(call timed,test-integration,$(SUITE) tests/integration)

# One test per finding of the shared-host threat model (root, a throwaway user, private PID namespaces)
test-security: venv emulator-venv
	@$(call timed,test-security,$(SUITE) tests/security)

# One test per honest fault a restart meets (full disks, benign warnings, interrupted plays, ...)
test-faults: venv emulator-venv
	@$(call timed,test-faults,$(SUITE) tests/faults)

test-molecule: venv emulator-venv
	@$(call timed,test-molecule,./scripts/molecule.sh)

# ansible-builder renders an execution-environment context from the collection's artifact and its
# introspection finds requirements.txt / bindep.txt (installs ansible-builder into tests/output/)
test-packaging: venv
	@$(call timed,test-packaging,$(PYTEST) -q --durations=15 tests/packaging)

lint: venv
	@$(call timed,lint,$(BIN)/ansible-lint --profile production --offline)

sanity: venv
	@$(call timed,sanity,./scripts/sanity.sh)

build: venv
	@$(call timed,build,./scripts/build.sh)

# SSH hosts in network + PID namespaces (root, ip netns, openssh-server via apt): docs/multihost.md
test-multihost: venv emulator-venv
	@$(call timed,test-multihost,./scripts/multihost.sh)

bench: venv emulator-venv router-venv
	$(BIN)/python benchmarks/run_all.py

gpu:
	@echo "GPU validation runs on a GPU host: bash tests/gpu/run.sh (see docs/gpu-validation.md)"

# The real sglang-router (0.3.2, a Rust binary on CPU) for the fleet-roll tests and benchmark
router-venv:
	./scripts/router_venv.sh

clean:
	rm -rf $(VENV) $(EMU_VENV) .venv-router .venv-router-* build tests/output
