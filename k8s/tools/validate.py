#!/usr/bin/env python3
"""`make validate`: every deployment file in the repository, checked with the real tools.

1. Kubernetes manifests (k8s/**): core resources against the Kubernetes OpenAPI schema
   (PyPI `kubernetes-validate`, strict: unknown fields are errors). Custom resources
   (EnvoyFilter, WasmPlugin, Istio Gateway/VirtualService, InferencePool) have no schema
   there: they are parsed and their required fields checked here. Kustomizations must
   name files that exist, and the wasm ConfigMaps `k8s/tools/wasm-configmaps.py` writes
   are validated and measured against the 1 MiB ConfigMap limit (gzip-compressed). Every
   Deployment (and the Istio gateway patch) mounting them unpacks them with an init
   container into the folder Envoy reads; that init container's script is run here with
   /bin/sh on the generated ConfigMaps and must give back the modules byte for byte.
2. Every Envoy configuration: envoy/envoy.yaml.template rendered for each variant, the
   compose configuration, the one in the standalone ConfigMap, and bootstraps assembled
   from the Istio EnvoyFilter patches. Each passes `envoy --mode validate`, which loads the
   filter's .wasm and runs its configuration check, so file paths are rewritten to the
   built modules and to a scratch service-account folder. Validate mode skips bootstrap
   extensions, so configurations with the singleton are also started for real for a
   moment (ports 0, no listener conflicts) until the singleton logs that it is configured,
   with WASM_EPP_PODS_API_KEY in Envoy's environment; a singleton naming the pods' API key
   variable must get it through its vm_config's host_env_keys (never inline key_values).
   The Istio assemblies hold another application's host beside the inference one, as Istio
   merges every server of a port into one listener: in that start, its requests must reach
   its own route and the inference host's health path the filter.
3. The docker-compose file parses and agrees with its Envoy configuration.
4. The Helm chart (k8s/helm/wasm-epp), rendered by `make helm-check` into target/helm/, goes
   through 1 and 2 too, and with its default values must render the same Envoy
   configuration as k8s/standalone and k8s/istio/singleton (plugin configurations aside).
5. The alerting rules (k8s/alerts) with promtool, and the chart's PrometheusRule and
   PodMonitor against them; the dashboard's queries with promtool on series of given shapes
   (k8s/tools/alerts_check.py).
6. The docs name only series the plugin exports and `make` targets the Makefile has
   (k8s/tools/docs_check.py).
7. With OLDEST_ENVOY_BIN set (the Makefile sets it), every configuration of 2 without the
   Kubernetes token injector's `header_value_prefix` (Envoy >= 1.37) also passes
   `envoy --mode validate` on that older Envoy (docs/deployment.md, "Envoy versions").

Run by `make validate` (part of `make test`) with the Makefile's .venv python.
"""

import copy
import http.client
import json
import os
import re
import select
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml
import kubernetes_validate

import alerts_check
import docs_check
import envoy_template
import modules_check

wasm_configmaps = __import__("wasm-configmaps")

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s"
ENVOY = Path(os.environ.get("ENVOY_BIN", ROOT / ".venv/bin/envoy"))
# Where `make wasm` built them: under CARGO_TARGET_DIR when set (relative to the root, where
# make runs cargo), else target/ (a stale build there would be validated instead).
TARGET_DIR = ROOT / (os.environ.get("CARGO_TARGET_DIR") or "target")
WASM_DIR = Path(os.environ.get("WASM_DIR") or TARGET_DIR / "wasm32-wasip1/release")
ENVOY_VERSION = os.environ.get("ENVOY_VERSION", "1.40.0")
# The oldest Envoy the configurations must load on, but for the token injector's prefix.
OLDEST_ENVOY = os.environ.get("OLDEST_ENVOY_BIN")
NEEDS_ENVOY_1_37 = "header_value_prefix"
KUBERNETES_VERSION = os.environ.get("KUBERNETES_VERSION", "1.33.0")
# Files a kustomization deliberately leaves out (documented alternatives).
OPTIONAL_MANIFESTS = {
    "k8s/standalone/inference-pool.yaml",
    "k8s/standalone/vllm-pd.yaml",
    "k8s/standalone/vllm-adapters.yaml",
    "k8s/istio/no-singleton/wasmplugin.yaml",
}
# Logged by the pool service once its configuration is accepted (poller/src/service.rs).
SINGLETON_CONFIGURED = "wasm-epp pool service configured"
SMOKE_SECONDS = 20
SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
# The Helm chart's templates are not YAML; `make helm-check` renders them here, one folder per
# value set, and they are checked like the hand-written manifests.
HELM_CHART = K8S / "helm"
HELM_RENDERED = Path(os.environ.get("HELM_RENDERED", ROOT / "target/helm"))
ALERTS = K8S / "alerts"
DASHBOARDS = K8S / "dashboards"

failures = []
# Where each checked resource comes from (id of the parsed document -> file), for messages.
SOURCES = {}


def fail(where, message):
    failures.append(f"{where}: {message}")


def rel(path):
    return str(Path(path).resolve().relative_to(ROOT))


def manifest_paths():
    """Every manifest to check: k8s/** except the chart's templates, and the rendered chart."""
    # k8s/alerts and k8s/dashboards hold Prometheus rule files and promtool tests, not
    # Kubernetes resources (alerts_check.py checks them).
    skipped = (HELM_CHART, ALERTS, DASHBOARDS)
    paths = [p for p in sorted(K8S.rglob("*.yaml")) if not any(folder in p.parents for folder in skipped)]
    return paths + sorted(HELM_RENDERED.rglob("*.yaml"))


# --- 1. Kubernetes manifests ----------------------------------------------------------------

def dig(doc, *keys):
    for key in keys:
        if not isinstance(doc, dict) or key not in doc:
            return None
        doc = doc[key]
    return doc


def check_envoy_filter(where, doc):
    patches = dig(doc, "spec", "configPatches") or []
    if not patches:
        fail(where, "EnvoyFilter has no configPatches")
    if not dig(doc, "spec", "workloadSelector", "labels") and not dig(doc, "spec", "targetRefs"):
        fail(where, "EnvoyFilter selects no workload (it would apply to every proxy)")
    apply_to = {"BOOTSTRAP", "CLUSTER", "LISTENER", "FILTER_CHAIN", "NETWORK_FILTER", "HTTP_FILTER",
                "ROUTE_CONFIGURATION", "VIRTUAL_HOST", "HTTP_ROUTE", "EXTENSION_CONFIG", "LISTENER_FILTER"}
    operations = {"MERGE", "ADD", "REMOVE", "INSERT_BEFORE", "INSERT_AFTER", "INSERT_FIRST", "REPLACE"}
    for i, patch in enumerate(patches):
        target, operation = patch.get("applyTo"), dig(patch, "patch", "operation")
        if target not in apply_to:
            fail(where, f"configPatches[{i}].applyTo {target!r} is not an EnvoyFilter target")
        if operation not in operations:
            fail(where, f"configPatches[{i}].patch.operation {operation!r} is unknown")
        if operation != "REMOVE" and not isinstance(dig(patch, "patch", "value"), dict):
            fail(where, f"configPatches[{i}] has no patch.value")
        if target == "BOOTSTRAP" and operation != "MERGE":
            fail(where, "BOOTSTRAP patches only support MERGE")


def check_wasm_plugin(where, doc):
    url = dig(doc, "spec", "url") or ""
    if not re.match(r"^(oci|file|https?)://", url):
        fail(where, f"WasmPlugin url {url!r} needs an oci://, file:// or http(s):// scheme")
    if not dig(doc, "spec", "selector") and not dig(doc, "spec", "targetRefs"):
        fail(where, "WasmPlugin selects no workload")
    if not isinstance(dig(doc, "spec", "pluginConfig"), dict):
        fail(where, "WasmPlugin has no pluginConfig object")


# The v1 InferencePool's endpointPickerRef (gateway-api-inference-extension,
# api/v1/inferencepool_types.go): its fields, and its failure modes.
ENDPOINT_PICKER_REF_KEYS = {"group", "kind", "name", "port", "failureMode"}
FAILURE_MODES = {"FailOpen", "FailClose"}
# targetPorts: 1 to 8 (data-parallel ranks, one engine per port; wasm-epp reads them all).
MAX_TARGET_PORTS = 8


def valid_port(port):
    return isinstance(port, dict) and set(port) == {"number"} and isinstance(port["number"], int) \
        and 0 < port["number"] < 65536


def check_inference_pool(where, doc):
    version = doc.get("apiVersion")
    if version == "inference.networking.k8s.io/v1":
        labels, ports = dig(doc, "spec", "selector", "matchLabels"), dig(doc, "spec", "targetPorts")
        if not isinstance(ports, list) or not 1 <= len(ports) <= MAX_TARGET_PORTS \
                or not all(valid_port(p) for p in ports):
            fail(where, f"InferencePool v1 needs 1 to {MAX_TARGET_PORTS} spec.targetPorts of {{number: 1..65535}}")
        elif len({p["number"] for p in ports}) != len(ports):
            fail(where, "InferencePool v1 spec.targetPorts lists a port twice")
        ref = dig(doc, "spec", "endpointPickerRef")
        if not isinstance(ref, dict) or not ref.get("name"):
            fail(where, "InferencePool v1 needs spec.endpointPickerRef.name")
        else:
            unknown = sorted(set(ref) - ENDPOINT_PICKER_REF_KEYS)
            if unknown:
                fail(where, f"spec.endpointPickerRef has fields the v1 CRD does not: {unknown} "
                            f"(v1alpha2's portNumber is v1's port: {{number: N}})")
            if ref.get("kind", "Service") == "Service" and "port" not in ref:
                fail(where, "spec.endpointPickerRef needs port when kind is Service (the default)")
            if "port" in ref and not valid_port(ref["port"]):
                fail(where, "spec.endpointPickerRef.port must be {number: 1..65535}")
            if "failureMode" in ref and ref["failureMode"] not in FAILURE_MODES:
                fail(where, f"spec.endpointPickerRef.failureMode must be one of {sorted(FAILURE_MODES)}")
    elif version == "inference.networking.x-k8s.io/v1alpha2":
        labels = dig(doc, "spec", "selector")
        if not 0 < (dig(doc, "spec", "targetPortNumber") or 0) < 65536:
            fail(where, "InferencePool v1alpha2 needs spec.targetPortNumber")
    else:
        return fail(where, f"unknown InferencePool apiVersion {version}")
    if not isinstance(labels, dict) or not labels:
        fail(where, "InferencePool selects no label")


def check_istio_gateway(where, doc):
    if not dig(doc, "spec", "selector") or not dig(doc, "spec", "servers"):
        fail(where, "Gateway needs spec.selector and spec.servers")


def check_virtual_service(where, doc):
    if not dig(doc, "spec", "hosts") or not dig(doc, "spec", "http"):
        fail(where, "VirtualService needs spec.hosts and spec.http")
    # The route the EnvoyFilter sends to the ORIGINAL_DST wasm_epp_pool: every retry would go
    # to the same pod, and the patch cannot remove Istio's default retries (a merge skips 0).
    for route in dig(doc, "spec", "http") or []:
        if route.get("name") == "wasm-epp" and dig(route, "retries", "attempts") != 0:
            fail(where, "the wasm-epp route needs retries: {attempts: 0} (Istio's default retries reach the "
                        "same pod through the ORIGINAL_DST cluster)")


def check_prometheus_rule(where, doc):
    for problem in alerts_check.check_prometheus_rule(doc):
        fail(where, problem)


def check_pod_monitor(where, doc):
    for problem in alerts_check.check_pod_monitor(doc):
        fail(where, problem)


CUSTOM = {
    ("monitoring.coreos.com/v1", "PrometheusRule"): check_prometheus_rule,
    ("monitoring.coreos.com/v1", "PodMonitor"): check_pod_monitor,
    ("networking.istio.io/v1alpha3", "EnvoyFilter"): check_envoy_filter,
    ("extensions.istio.io/v1alpha1", "WasmPlugin"): check_wasm_plugin,
    ("inference.networking.k8s.io/v1", "InferencePool"): check_inference_pool,
    ("inference.networking.x-k8s.io/v1alpha2", "InferencePool"): check_inference_pool,
    ("networking.istio.io/v1", "Gateway"): check_istio_gateway,
    ("networking.istio.io/v1", "VirtualService"): check_virtual_service,
}


def check_kustomization(where, path, doc):
    listed = set()
    for entry in doc.get("resources") or []:
        target = (path.parent / entry).resolve()
        if target.is_dir():
            if not (target / "kustomization.yaml").exists():
                fail(where, f"resource {entry} is a folder without kustomization.yaml")
        elif not target.exists():
            fail(where, f"resource {entry} does not exist")
        listed.add(target)
    for sibling in sorted(path.parent.glob("*.yaml")):
        if sibling != path and sibling.resolve() not in listed and rel(sibling) not in OPTIONAL_MANIFESTS:
            fail(where, f"{sibling.name} is neither in the kustomization nor a documented optional file")


def validate_documents(where, documents):
    """Returns the parsed documents that are Kubernetes resources."""
    resources = []
    for index, doc in enumerate(documents):
        if doc is None:
            continue
        name = f"{where}[{index}] {doc.get('kind')}/{dig(doc, 'metadata', 'name')}"
        key = (doc.get("apiVersion"), doc.get("kind"))
        if key in CUSTOM:
            CUSTOM[key](name, doc)
        else:
            try:
                kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
            except kubernetes_validate.ValidationError as error:
                fail(name, f"schema: {error.message} at {'.'.join(str(p) for p in error.path)}")
            except (kubernetes_validate.SchemaNotFoundError, kubernetes_validate.InvalidSchemaError) as error:
                fail(name, f"no schema for {key}: {error}")
        SOURCES[id(doc)] = name
        resources.append(doc)
    return resources


def check_manifests():
    resources = []
    if not (HELM_RENDERED / "cases.json").exists():
        fail("k8s/helm", f"chart not rendered into {HELM_RENDERED} (make helm-check)")
    for path in manifest_paths():
        where = rel(path)
        try:
            documents = list(yaml.safe_load_all(path.read_text()))
        except yaml.YAMLError as error:
            fail(where, f"not YAML: {error}")
            continue
        if path.name == "kustomization.yaml":
            check_kustomization(where, path, documents[0] or {})
            continue
        resources += validate_documents(where, documents)
    return resources


def check_gateway_patch():
    """The JSON patch k8s/README.md applies to istio-ingressgateway: applied to a skeleton
    of that Deployment, the result passes the Kubernetes schema, and its liveness probe goes
    through the filter on a listener that carries it."""
    where = "k8s/istio/common/gateway-deployment-patch.json"
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment",
                  "metadata": {"name": "istio-ingressgateway", "namespace": "istio-system"},
                  "spec": {"selector": {"matchLabels": {"istio": "ingressgateway"}}, "template": {
                      "metadata": {"labels": {"istio": "ingressgateway"}},
                      "spec": {"volumes": [], "containers": [{"name": "istio-proxy", "image": "istio/proxyv2",
                                                              "volumeMounts": []}]}}}}
    for op in json.loads((K8S / "istio/common/gateway-deployment-patch.json").read_text()):
        *parents, last = op["path"].strip("/").split("/")
        node = deployment
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        if op.get("op") != "add":
            fail(where, f"unexpected op {op.get('op')}")
        elif last == "-":
            node.append(op["value"])
        else:
            node[last] = op["value"]
    validate_documents(where, [deployment])
    probe = dig(deployment, "spec", "template", "spec", "containers")[0].get("livenessProbe") or {}
    if dig(probe, "httpGet", "path") != "/wasm-epp/healthz" or dig(probe, "httpGet", "port") not in GATEWAY_TARGET_PORTS.values():
        fail(where, "the gateway's liveness probe must be GET /wasm-epp/healthz on a listener with the filter")
    return deployment


def check_wasm_configmaps(scratch):
    try:
        text, sizes = wasm_configmaps.render(WASM_DIR, "llm")
    except (OSError, ValueError) as error:
        return fail("k8s/tools/wasm-configmaps.py", str(error))
    (scratch / "wasm-epp-modules.yaml").write_text(text)
    documents = validate_documents("generated wasm ConfigMaps", yaml.safe_load_all(text))
    print(f"  wasm ConfigMaps: {', '.join(f'{k} {v} bytes ({packed} gzipped)' for k, (v, packed) in sizes.items())}"
          f" (limit {wasm_configmaps.CONFIGMAP_LIMIT} each, gzipped)")
    return documents


DRAIN_SCRIPT = ROOT / "envoy/drain-before-exit.sh"


def check_probe_ports(resources):
    """Every port an Envoy pod's probes use is one its Envoy configuration listens on: a
    listener left out (by a values switch, say) leaves the pods never ready and unscraped."""
    def folder(doc):
        return SOURCES.get(id(doc), "").split("[")[0].rsplit("/", 1)[0]
    listeners = {}
    for doc in resources:
        if doc.get("kind") != "ConfigMap":
            continue
        ports = {}
        for key, text in (doc.get("data") or {}).items():
            parsed = yaml.safe_load(text) if key.endswith(".yaml") else None
            if not isinstance(parsed, dict):
                continue
            capped = "global_downstream_max_connections" in yaml.safe_dump(parsed.get("overload_manager") or {})
            for listener in dig(parsed, "static_resources", "listeners") or []:
                ports[dig(listener, "address", "socket_address", "port_value")] = (listener, capped)
        if ports:
            listeners[(folder(doc), dig(doc, "metadata", "namespace"), dig(doc, "metadata", "name"))] = ports
    checked = 0
    for deployment in (d for d in resources if d.get("kind") == "Deployment"):
        spec = dig(deployment, "spec", "template", "spec") or {}
        names = [dig(v, "configMap", "name") for v in spec.get("volumes") or []]
        names += [dig(s, "configMap", "name") for v in spec.get("volumes") or []
                  for s in dig(v, "projected", "sources") or []]
        key = lambda name: (folder(deployment), dig(deployment, "metadata", "namespace"), name)
        ports = {}
        for name in filter(None, names):
            ports.update(listeners.get(key(name), {}))
        if not ports:
            continue  # not an Envoy of ours (e.g. the simulated pods)
        checked += 1
        where = SOURCES.get(id(deployment), "Deployment")
        for container in spec.get("containers") or []:
            named = {p.get("name"): p.get("containerPort") for p in container.get("ports") or []}
            for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
                port = dig(container, probe, "httpGet", "port")
                if port is None:
                    continue
                if named.get(port, port) not in ports:
                    fail(where, f"{container.get('name')}'s {probe} uses port {port}, where its Envoy does not listen "
                                f"(listeners on {sorted(ports)})")
                    continue
                listener, capped = ports[named.get(port, port)]
                # A probe counted against the overload manager's connection cap fails when
                # clients hold every connection: the kubelet would restart a busy Envoy.
                if capped and not listener.get("ignore_global_conn_limit"):
                    fail(where, f"{container.get('name')}'s {probe} uses listener {listener.get('name')}, which the "
                                "global connection cap covers (probe a listener with ignore_global_conn_limit)")
                path = dig(container, probe, "httpGet", "path")
                if probe == "livenessProbe" and not wasm_answers(listener, path):
                    fail(where, f"{container.get('name')}'s livenessProbe {path} is not answered by a wasm-epp filter "
                                f"on listener {listener.get('name')}")
    return checked


def wasm_answers(listener, path):
    """Whether a GET of `path` on the listener meets a wasm-epp filter that runs there: the
    first route matching it, and a Wasm filter not disabled or enabled by that route."""
    for chain in listener.get("filter_chains") or []:
        for network_filter in chain.get("filters") or []:
            hcm = network_filter.get("typed_config") or {}
            wasm = [f for f in hcm.get("http_filters") or [] if dig(f, "typed_config", "@type") == WASM_FILTER_TYPE]
            for host in dig(hcm, "route_config", "virtual_hosts") or []:
                for route in host.get("routes") or []:
                    match = route.get("match") or {}
                    if not (match.get("path") == path or path.startswith(match.get("prefix", "\0"))):
                        continue
                    enabled = route.get("typed_per_filter_config") or {}
                    return any(not f.get("disabled") or f.get("name") in enabled for f in wasm)
    return False


def check_coherence(resources):
    """The manifests agree with each other: names, namespaces, selectors, ports."""
    # The preStop hook's ConfigMap carries a copy of envoy/drain-before-exit.sh (kustomize
    # cannot read files outside its folder); the copy must not drift.
    drain_script = DRAIN_SCRIPT.read_text()
    for doc in resources:
        script = dig(doc, "data", "drain-before-exit.sh")
        if doc.get("kind") == "ConfigMap" and script is not None and script != drain_script:
            fail(f"ConfigMap/{dig(doc, 'metadata', 'name')}", f"drain-before-exit.sh differs from {rel(DRAIN_SCRIPT)}")
    by_kind = {}
    for doc in resources:
        by_kind.setdefault(doc["kind"], []).append(doc)
    configmaps = {(dig(d, "metadata", "namespace"), dig(d, "metadata", "name")) for d in by_kind.get("ConfigMap", [])}
    for deployment in by_kind.get("Deployment", []):
        namespace = dig(deployment, "metadata", "namespace")
        for volume in dig(deployment, "spec", "template", "spec", "volumes") or []:
            names = [dig(volume, "configMap", "name")]
            names += [dig(s, "configMap", "name") for s in dig(volume, "projected", "sources") or []]
            for name in filter(None, names):
                if (namespace, name) not in configmaps:
                    fail(f"Deployment/{deployment['metadata']['name']}", f"mounts ConfigMap {name} that nothing provides")
    # A Secret rendered beside a Deployment that reads it at start must roll the pods when it
    # changes (a chart's generated secret is new on every `helm template`): a checksum of it
    # on the pod template. Running pods would keep the old value otherwise.
    def folder(doc):
        return SOURCES.get(id(doc), "").split("[")[0].rsplit("/", 1)[0]
    secrets = {(folder(d), dig(d, "metadata", "namespace"), dig(d, "metadata", "name")) for d in by_kind.get("Secret", [])}
    for deployment in by_kind.get("Deployment", []):
        namespace = (folder(deployment), dig(deployment, "metadata", "namespace"))
        pod = dig(deployment, "spec", "template", "spec") or {}
        used = {dig(e, "valueFrom", "secretKeyRef", "name") for c in (pod.get("containers") or []) + (pod.get("initContainers") or [])
                for e in c.get("env") or []}
        annotations = dig(deployment, "spec", "template", "metadata", "annotations") or {}
        for name in sorted(n for n in used if (*namespace, n) in secrets):
            if not any(k.startswith("checksum/") and "secret" in k for k in annotations):
                fail(SOURCES.get(id(deployment), f"Deployment/{dig(deployment, 'metadata', 'name')}"),
                     f"reads Secret {name} rendered beside it, with no checksum/…secret annotation to roll the pods when it changes")
    # An autoscaler must scale a Deployment that is there.
    for scaler in by_kind.get("HorizontalPodAutoscaler", []):
        target = dig(scaler, "spec", "scaleTargetRef") or {}
        namespace = dig(scaler, "metadata", "namespace")
        if target.get("kind") != "Deployment" or not any(
                dig(d, "metadata", "namespace") == namespace and dig(d, "metadata", "name") == target.get("name")
                for d in by_kind.get("Deployment", [])):
            fail(f"HorizontalPodAutoscaler/{dig(scaler, 'metadata', 'name')}", f"scales no Deployment here: {target}")
    # A PodDisruptionBudget that selects no Deployment's pods protects nothing.
    for budget in by_kind.get("PodDisruptionBudget", []):
        wanted = dig(budget, "spec", "selector", "matchLabels") or {}
        namespace = dig(budget, "metadata", "namespace")
        if not any(dig(d, "metadata", "namespace") == namespace
                   and all((dig(d, "spec", "template", "metadata", "labels") or {}).get(k) == v for k, v in wanted.items())
                   for d in by_kind.get("Deployment", [])):
            fail(f"PodDisruptionBudget/{dig(budget, 'metadata', 'name')}", f"selects no Deployment's pods ({wanted})")
    # Every singleton configuration's selector and port match a Deployment of the pool.
    pods = [(dig(d, "spec", "template", "metadata", "labels") or {},
             [p.get("containerPort") for c in dig(d, "spec", "template", "spec", "containers") or []
              for p in c.get("ports") or []], dig(d, "metadata", "namespace"))
            for d in by_kind.get("Deployment", [])]
    for where, config in SINGLETON_CONFIGS:
        kubernetes = config.get("kubernetes") or {}
        selector = kubernetes.get("label_selector")
        if not selector:
            continue
        wanted = dict(term.split("=", 1) for term in selector.split(","))
        matches = [p for p in pods if p[2] == kubernetes.get("namespace")
                   and all(p[0].get(k) == v for k, v in wanted.items())]
        if not matches:
            fail(where, f"no Deployment in {kubernetes.get('namespace')} has pods labelled {selector}")
        elif not any(kubernetes.get("target_port") in p[1] for p in matches):
            fail(where, f"target_port {kubernetes.get('target_port')} is not a containerPort of {selector}")


# --- 2. Envoy configurations ----------------------------------------------------------------

SINGLETON_CONFIGS = []  # (where, parsed singleton JSON), for the coherence check.


def render_template(cluster_mode, singleton, peers=False, pools=None):
    """envoy/envoy.yaml.template for one setup (k8s/tools/envoy_template.py)."""
    config, left = envoy_template.render(cluster_mode, singleton, peers=peers, pools=pools)
    if left:
        fail("envoy/envoy.yaml.template",
             f"placeholders this check does not know: {left} (update k8s/tools/envoy_template.py)")
    return config


def singleton_configs(config):
    for extension in config.get("bootstrap_extensions") or []:
        value = dig(extension, "typed_config", "config", "configuration", "value")
        if value is not None:
            yield extension, value


# A gateway's Service maps each Gateway server port to the Envoy listener on its targetPort:
# EnvoyFilter patches match listeners by the latter, routes by the former. The two gateways
# k8s/README.md deploys on differ; a set of patches fits one of them.
GATEWAY_LAYOUTS = {
    "istioctl's istio-ingressgateway": {80: 8080, 443: 8443},
    "the istio/gateway Helm chart": {80: 80, 443: 443},
}
GATEWAY_TARGET_PORTS = GATEWAY_LAYOUTS["istioctl's istio-ingressgateway"]
STRIP_FILTER_TYPE = "type.googleapis.com/envoy.extensions.filters.http.header_mutation.v3.HeaderMutation"
# The Istio assemblies' two hosts on each Gateway port: the inference host (the one the
# gateway's liveness probe names) and another application, answered by Envoy itself.
INFERENCE_HOST = "llm.example.com"
OTHER_APP_HOST = "other.example.com"
OTHER_APP_ANSWER = "the other application's own answer"
# Requests made to a configuration once its real start is up: where -> [(listener, host,
# method, path, status, body part, why)].
SMOKE_REQUESTS = {}
WASM_FILTER_TYPE = "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm"


def gateway_server_ports():
    ports = []
    for doc in yaml.safe_load_all((K8S / "istio/common/gateway.yaml").read_text()):
        if doc and doc.get("kind") == "Gateway":
            ports += [dig(server, "port", "number") for server in dig(doc, "spec", "servers") or []]
    return ports


def matches_port(patch, *keys_and_port):
    *keys, port = keys_and_port
    wanted = dig(patch, "match", *keys)
    return wanted is None or wanted == port


def gateway_layout(where, patches):
    """The gateway the patches fit: the one whose listeners for the servers routed to
    wasm_epp_pool are exactly the listeners patched. A route patch applies on either gateway
    (it matches the server's port) but a listener patch only where its port is the
    listener's: with no layout pairing them, some server would reach the pool with neither
    the header strip nor the filter, and a client's destination header would pick any address."""
    listener_ports = {dig(p, "match", "listener", "portNumber") for p in patches
                      if p.get("applyTo") in ("LISTENER", "NETWORK_FILTER", "HTTP_FILTER")}
    routed = set()
    for patch in patches:
        if patch.get("applyTo") == "HTTP_ROUTE" and dig(patch, "patch", "value", "route", "cluster") == "wasm_epp_pool":
            port = dig(patch, "match", "routeConfiguration", "portNumber")
            routed |= {port} if port is not None else set(gateway_server_ports())
    for name, layout in GATEWAY_LAYOUTS.items():
        if {layout.get(port) for port in routed} == listener_ports:
            return name, layout
    fail(where, f"route patches send Gateway servers {sorted(routed)} to wasm_epp_pool, listener patches match "
                f"listeners {sorted(listener_ports, key=str)}: no gateway ({', '.join(GATEWAY_LAYOUTS)}) pairs them, "
                "so a server would reach the pool without the header strip and the filter")
    return None, GATEWAY_TARGET_PORTS


def check_gateway_coverage(where, listeners):
    """Every server whose route reaches wasm_epp_pool carries the header-stripping filter
    and then wasm-epp; every server carrying wasm-epp has its route patched."""
    for server_port, (route, filters) in listeners.items():
        types = [dig(f, "typed_config", "@type") for f in filters]
        has_wasm = WASM_FILTER_TYPE in types
        to_pool = dig(route, "route", "cluster") == "wasm_epp_pool"
        if to_pool and not has_wasm:
            fail(where, f"Gateway server {server_port} routes to wasm_epp_pool without the wasm-epp filter")
        if has_wasm and not to_pool:
            fail(where, f"Gateway server {server_port} carries the filter but its route is not patched")
        if to_pool and has_wasm and (STRIP_FILTER_TYPE not in types
                                     or types.index(STRIP_FILTER_TYPE) > types.index(WASM_FILTER_TYPE)):
            fail(where, f"Gateway server {server_port}: client destination headers are not removed before wasm-epp")
        if has_wasm:
            wasm = filters[types.index(WASM_FILTER_TYPE)]
            policy = dig(wasm, "typed_config", "config", "failure_policy")
            if policy != "FAIL_RELOAD":
                fail(where, f"Gateway server {server_port}: wasm-epp failure_policy is {policy}, not FAIL_RELOAD")
            # Istio serves every host of the Gateway port from this one listener: a filter on
            # for the whole listener answers other applications' requests (their /v1/models,
            # 404s for models, 503s without a pod table) and ejects pods on their 5xx.
            if not wasm.get("disabled"):
                fail(where, f"Gateway server {server_port}: wasm-epp runs for every host on the listener; "
                            "insert it with disabled: true and turn it on in the wasm-epp route")
            elif wasm.get("name") not in (route.get("typed_per_filter_config") or {}):
                fail(where, f"Gateway server {server_port}: the wasm-epp route does not turn on the filter "
                            f"{wasm.get('name')} (typed_per_filter_config)")


def other_app_requests(listener):
    """What a gateway listener carrying wasm-epp must answer: the other host's requests reach
    that application (the filter would answer them itself: its model list, or 503 with no
    pod table, which the assembly never gets), and the inference host runs the filter (its
    health path, the gateway's liveness probe)."""
    chat = json.dumps({"model": "qwen3-8b", "messages": [{"role": "user", "content": "hi"}]})
    return [
        (listener, OTHER_APP_HOST, "GET", "/v1/models", None, 200, OTHER_APP_ANSWER,
         "another host's GET /v1/models is its own, not the pool's model list"),
        (listener, OTHER_APP_HOST, "POST", "/v1/chat/completions", chat, 200, OTHER_APP_ANSWER,
         "another host's chat request reaches it, not the filter"),
        (listener, INFERENCE_HOST, "GET", "/wasm-epp/healthz", None, 200, '"status":"ok"',
         "the inference host runs the filter (the gateway's liveness probe)"),
    ]


def assemble_istio(patch_files, where):
    """A bootstrap built from EnvoyFilter patches the way Istio would apply them to a
    gateway with one listener per Gateway server: bootstrap MERGE, clusters ADDed, filters
    inserted first or before the router of the listener they match, the listener, its
    connection manager and its route MERGEd when their port matches. Each listener's route
    table also holds another application's host, as Istio merges every server of a port
    into one: its requests, made in the real start, must not meet the filter."""
    config = {
        "node": {"id": "router~10.0.0.1~istio-ingressgateway.istio-system~istio-system.svc.cluster.local",
                 "cluster": "istio-ingressgateway.istio-system"},
        "admin": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": 15000}}},
        "static_resources": {"clusters": [], "listeners": []},
    }
    patches = []
    for path in patch_files:
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "EnvoyFilter":
                patches += dig(doc, "spec", "configPatches") or []
    for patch in patches:
        value, target = copy.deepcopy(dig(patch, "patch", "value")), patch.get("applyTo")
        if target == "BOOTSTRAP":
            config.setdefault("stats_config", {}).update(value.get("stats_config", {}))
            config.setdefault("bootstrap_extensions", []).extend(value.get("bootstrap_extensions", []))
            layers = dig(value, "layered_runtime", "layers") or []
            if layers:
                config.setdefault("layered_runtime", {"layers": []})["layers"].extend(layers)
            config["static_resources"]["clusters"] += dig(value, "static_resources", "clusters") or []
        elif target == "CLUSTER":
            config["static_resources"]["clusters"].append(value)
    layout_name, layout = gateway_layout(where, patches)
    if layout_name:
        print(f"  ..  {where}: patches for {layout_name} (listeners {sorted(layout.values())})")
    coverage = {}
    for server_port in gateway_server_ports():
        listener_port = layout.get(server_port)
        if listener_port is None:
            fail(where, f"Gateway server port {server_port} has no known gateway listener port")
            continue
        filters, listener_merge, hcm_merge = [], {}, {}
        route = {"name": "wasm-epp", "match": {"prefix": "/"},
                 "route": {"cluster": "outbound|8000||vllm-qwen.llm.svc.cluster.local"}}
        for patch in patches:
            value, target = copy.deepcopy(dig(patch, "patch", "value")), patch.get("applyTo")
            if target == "HTTP_ROUTE" and matches_port(patch, "routeConfiguration", "portNumber", server_port):
                route["route"].update(value.pop("route", {}))
                route.update(value)
                continue
            if not matches_port(patch, "listener", "portNumber", listener_port):
                continue
            if target == "HTTP_FILTER":
                if dig(patch, "patch", "operation") == "INSERT_FIRST":
                    filters.insert(0, value)
                else:
                    filters.append(value)
            elif target == "LISTENER":
                listener_merge.update(value)
            elif target == "NETWORK_FILTER":
                hcm_merge.update(value.get("typed_config", {}))
        hcm = {
            "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
            "stat_prefix": f"outbound_0.0.0.0_{listener_port}",
            # Istio merges every Gateway server of a port into one route table: the inference
            # host beside another application's, which must never meet the filter.
            "route_config": {"virtual_hosts": [
                {"name": f"{INFERENCE_HOST}:{server_port}", "domains": [INFERENCE_HOST, f"{INFERENCE_HOST}:*"],
                 "routes": [route]},
                {"name": f"{OTHER_APP_HOST}:{server_port}", "domains": [OTHER_APP_HOST, f"{OTHER_APP_HOST}:*"],
                 "routes": [{"name": "other-app", "match": {"prefix": "/"},
                             "direct_response": {"status": 200, "body": {"inline_string": OTHER_APP_ANSWER}}}]}]},
            "http_filters": filters + [{"name": "envoy.filters.http.router", "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}],
        }
        hcm.update(hcm_merge)
        listener = {"name": f"0.0.0.0_{listener_port}",
                    "address": {"socket_address": {"address": "0.0.0.0", "port_value": listener_port}},
                    "filter_chains": [{"filters": [{"name": "envoy.filters.network.http_connection_manager",
                                                    "typed_config": hcm}]}]}
        listener.update(listener_merge)
        config["static_resources"]["listeners"].append(listener)
        coverage[server_port] = (route, filters)
        cluster = route["route"].get("cluster")
        if not any(c.get("name") == cluster for c in config["static_resources"]["clusters"]):
            fail(where, f"server {server_port}: the route goes to {cluster}, which no patch adds")
        if WASM_FILTER_TYPE in [dig(f, "typed_config", "@type") for f in filters]:
            SMOKE_REQUESTS.setdefault(f"{where} (assembled)", []).extend(other_app_requests(listener["name"]))
    check_gateway_coverage(where, coverage)
    filters = [f for _, fs in coverage.values() for f in fs]
    # The no-singleton filter carries the poller's configuration in its own (lease mode):
    # check it as the singleton's too (once: every listener carries the same filter), the
    # rest as the filter's.
    poller_added = False
    for wasm_filter in filters:
        holder = dig(wasm_filter, "typed_config", "config", "configuration")
        plugin = json.loads(holder["value"]) if holder and holder.get("value") else {}
        if "poller" in plugin:
            poller = plugin.pop("poller")
            holder["value"] = json.dumps(plugin)
            if poller_added:
                continue
            poller_added = True
            config.setdefault("bootstrap_extensions", []).append({"name": "envoy.bootstrap.wasm", "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.wasm.v3.WasmService", "singleton": True,
                "config": {"name": "lease-mode-poller", "root_id": "wasm-epp-singleton",
                           "vm_config": {"vm_id": "wasm-epp", "runtime": "envoy.wasm.runtime.v8",
                                         "code": {"local": {"filename": "/etc/wasm-epp/wasm_epp_shared_state.wasm"}}},
                           "configuration": {"@type": "type.googleapis.com/google.protobuf.StringValue",
                                             "value": json.dumps(poller)}}}})
    return config


def envoy_configs():
    """(where, parsed config, {file name: text} of sibling files the config reads)."""
    configs = []
    for mode in ("override_host", "original_dst"):
        configs.append((f"envoy/envoy.yaml.template ({mode})", render_template(mode, True), {}))
    configs.append(("envoy/envoy.yaml.template (no singleton)", render_template("override_host", False), {}))
    configs.append(("envoy/envoy.yaml.template (peers)", render_template("override_host", True, peers=True), {}))
    two_pools = {"alpha": ["127.0.0.1:8001", "127.0.0.1:8002"], "beta": ["127.0.0.1:8003"]}
    configs.append(("envoy/envoy.yaml.template (two pools)", render_template("override_host", True, pools=two_pools), {}))
    configs.append(("envoy/envoy.yaml.template (two pools, peers)",
                    render_template("override_host", True, peers=True, pools=two_pools), {}))
    configs.append(("envoy/compose/envoy.yaml", yaml.safe_load((ROOT / "envoy/compose/envoy.yaml").read_text()), {}))
    configs.append(("envoy/examples/two-pools.yaml",
                    yaml.safe_load((ROOT / "envoy/examples/two-pools.yaml").read_text()), {}))
    for path in manifest_paths():
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "ConfigMap" and isinstance(doc.get("data"), dict):
                for key, text in doc["data"].items():
                    if not key.endswith(".yaml"):
                        continue  # e.g. the preStop hook's drain-before-exit.sh
                    parsed = yaml.safe_load(text)
                    if isinstance(parsed, dict) and "static_resources" in parsed:
                        configs.append((f"{rel(path)} data.{key}", parsed, dict(doc["data"])))
    istio_sds = {}
    for doc in yaml.safe_load_all((K8S / "istio/common/sds.yaml").read_text()):
        istio_sds.update(doc.get("data") or {})
    configs.append(("k8s/istio/singleton (assembled)",
                    assemble_istio([K8S / "istio/singleton/envoyfilter.yaml"], "k8s/istio/singleton"), istio_sds))
    for rendered in sorted(HELM_RENDERED.glob("*/istio/envoyfilter.yaml")):
        # With a WasmPlugin the filter comes from Istio, not from these patches: schema only.
        if (rendered.parent / "wasmplugin.yaml").exists():
            continue
        configs.append((f"{rel(rendered)} (assembled)", assemble_istio([rendered], rel(rendered)), istio_sds))
    no_singleton = [K8S / "istio/no-singleton/clusters.yaml", K8S / "istio/no-singleton/filter.yaml"]
    configs.append(("k8s/istio/no-singleton (assembled)", assemble_istio(no_singleton, "k8s/istio/no-singleton"),
                    istio_sds))
    return configs


def localise(text, scratch, files):
    """Points every path a deployment uses at the built modules and a scratch folder."""
    text = re.sub(r"[^\s\"'{},]*/(wasm_epp_(?:filter|shared_state)\.wasm)", lambda m: str(WASM_DIR / m.group(1)), text)
    text = text.replace(SERVICE_ACCOUNT, str(scratch / "serviceaccount"))
    for directory in ("/etc/envoy/", "/etc/wasm-epp-sds/"):
        text = text.replace(directory, f"{scratch}/files/")
    for name, content in files.items():
        if name.endswith("-sds.yaml"):
            (scratch / "files" / name).write_text(localise(content, scratch, {}))
    return text


def set_ports_to_zero(config):
    config["admin"]["address"]["socket_address"]["port_value"] = 0
    for listener in dig(config, "static_resources", "listeners") or []:
        listener["address"]["socket_address"].update({"address": "127.0.0.1", "port_value": 0})


def check_inference_listeners(where, config):
    """Every listener carrying wasm-epp: client destination headers removed before it, the
    crash policy that reloads, the client treated as external, a bound on slow requests."""
    for listener in dig(config, "static_resources", "listeners") or []:
        for chain in listener.get("filter_chains") or []:
            for network_filter in chain.get("filters") or []:
                hcm = network_filter.get("typed_config") or {}
                types = [dig(f, "typed_config", "@type") for f in hcm.get("http_filters") or []]
                if WASM_FILTER_TYPE not in types:
                    continue
                name = f"{where} listener {listener.get('name')}"
                wasm_index = types.index(WASM_FILTER_TYPE)
                removed = set()
                for f in (hcm.get("http_filters") or [])[:wasm_index]:
                    for mutation in dig(f, "typed_config", "mutations", "request_mutations") or []:
                        removed.add(mutation.get("remove"))
                for header in ("x-gateway-destination-endpoint", "x-envoy-original-dst-host", "x-prefiller-host-port",
                               "x-gateway-destination-endpoint-subset"):
                    if header not in removed:
                        fail(name, f"{header} is not removed before the wasm-epp filter")
                policy = dig(hcm["http_filters"][wasm_index], "typed_config", "config", "failure_policy")
                if policy != "FAIL_RELOAD":
                    fail(name, f"wasm-epp failure_policy is {policy}, not FAIL_RELOAD")
                if not hcm.get("use_remote_address") or not hcm.get("request_timeout"):
                    fail(name, "needs use_remote_address: true and a request_timeout")
                if routes_to_pool(hcm):
                    for key, wanted in template_inference_settings().items():
                        if hcm.get(key) != wanted:
                            fail(name, f"{key} differs from envoy/envoy.yaml.template's inference listener "
                                       f"({hcm.get(key)!r})")
                    check_pool_route_timeouts(name, hcm)
                    check_body_buffer(name, listener, hcm)
                    if not any(dig(m, "filter", "status_code_filter", "comparison", "value", "default_value") == 413
                               and dig(m, "filter", "status_code_filter", "comparison", "op") == "EQ"
                               for m in dig(hcm, "local_reply_config", "mappers") or []):
                        fail(name, "local_reply_config leaves Envoy's 413 (a body past the listener's buffer) as "
                                   "plain text, not OpenAI's shape")


# What every inference listener (one routing to a pool) takes from the template as it is:
# the OpenAI-shaped bodies of Envoy's own errors, and HTTP/1.0 clients accepted. A copy
# that lacks them answers clients in another shape.
TEMPLATE_INFERENCE_KEYS = ("local_reply_config", "http_protocol_options")
_template_inference = {}


def template_inference_settings():
    if not _template_inference:
        config = render_template("override_host", True)
        listener = next(l for l in config["static_resources"]["listeners"] if l["name"] == "inference")
        hcm = listener["filter_chains"][0]["filters"][0]["typed_config"]
        _template_inference.update({key: hcm.get(key) for key in TEMPLATE_INFERENCE_KEYS})
    return _template_inference


# The filter's max_body_bytes when its configuration sets none, Envoy's listener buffer
# when the listener sets none, and the room the listener needs above max_body_bytes: the
# chunk that carries a body past it is buffered before the filter stops reading.
PLUGIN_MAX_BODY_BYTES = 4 << 20
ENVOY_LISTENER_BUFFER_BYTES = 1 << 20
BODY_CHUNK_ROOM = 1 << 20


def check_body_buffer(name, listener, hcm):
    """The filter buffers a body up to its max_body_bytes before it picks the pod. Envoy adds
    each read of the connection (up to the listener's per_connection_buffer_limit_bytes) to
    that buffer before the filter sees it, and answers 413 once the stream's limit is passed:
    each pool route's request_body_buffer_limit (honoured from Envoy 1.37 on) must hold its
    filter's max_body_bytes plus one whole read, or a body without a length (chunked) gets
    413 below max_body_bytes. Before 1.37 the listener's limit is the stream's, so it must
    still exceed max_body_bytes: a max_body_bytes raised (for base64 images, say) without it
    turns every body between the two into a 413."""
    limit = listener.get("per_connection_buffer_limit_bytes", ENVOY_LISTENER_BUFFER_BYTES)
    bodies = {}
    for http_filter in hcm.get("http_filters") or []:
        value = dig(http_filter, "typed_config", "config", "configuration", "value")
        if dig(http_filter, "typed_config", "@type") != WASM_FILTER_TYPE or not value:
            continue
        plugin = json.loads(value)
        if "peer_receiver" in plugin:
            continue
        body = plugin.get("max_body_bytes", PLUGIN_MAX_BODY_BYTES)
        bodies[http_filter.get("name")] = (body, bool(http_filter.get("disabled")))
        if limit < body + BODY_CHUNK_ROOM:
            fail(name, f"per_connection_buffer_limit_bytes {limit} leaves less than {BODY_CHUNK_ROOM} bytes above "
                       f"{http_filter.get('name')}'s max_body_bytes {body}: bodies in between get Envoy's 413")
    for host in dig(hcm, "route_config", "virtual_hosts") or []:
        for route in host.get("routes") or []:
            cluster = dig(route, "route", "cluster") or ""
            if not is_pool_cluster(cluster):
                continue
            enabled = [bodies[f][0] for f in route.get("typed_per_filter_config") or {} if f in bodies]
            enabled = enabled or [body for body, disabled in bodies.values() if not disabled]
            if not enabled:
                continue
            wanted = max(enabled) + limit + BODY_CHUNK_ROOM
            got = route.get("request_body_buffer_limit", host.get("request_body_buffer_limit"))
            if got is None or int(got) < wanted:
                fail(name, f"the route to {cluster} buffers {got or limit} bytes of a body, less than its filter's "
                           f"max_body_bytes {max(enabled)} plus one read of the listener ({limit}) and "
                           f"{BODY_CHUNK_ROOM}: a body without a length gets Envoy's 413 below max_body_bytes; set "
                           f"its request_body_buffer_limit to {wanted}")


# Envoy's stream_idle_timeout when the connection manager sets none.
ENVOY_STREAM_IDLE_SECONDS = 300.0


def seconds(duration):
    """An Envoy duration as YAML writes it (`600s`, `0.5s`), in seconds."""
    return float(str(duration).removesuffix("s"))


def check_pool_route_timeouts(name, hcm):
    """A non-streamed answer sends no byte until it is done: on every route to a pool the
    stream's idle timer (the route's idle_timeout, else the listener's stream_idle_timeout)
    must not fire before the route's timeout, which starts once the filter lets the request
    go, up to request_timeout after its last byte. Else the client gets 504 "stream timeout"
    (SI) at the idle timeout, and that 504 must be in OpenAI's shape too."""
    listener_idle = seconds(hcm.get("stream_idle_timeout", ENVOY_STREAM_IDLE_SECONDS))
    request = seconds(hcm.get("request_timeout", 0))
    for host in dig(hcm, "route_config", "virtual_hosts") or []:
        for route in host.get("routes") or []:
            action = route.get("route") or {}
            if not is_pool_cluster(action.get("cluster", "")):
                continue
            idle = seconds(action.get("idle_timeout", listener_idle))
            timeout = seconds(action.get("timeout", 15))
            if idle != 0 and idle < timeout + request:
                fail(name, f"the route to {action['cluster']} cuts a stream idle for {idle:g} s, before its timeout "
                           f"({timeout:g} s after the request_timeout's {request:g} s): a non-streamed answer "
                           f"longer than that gets 504 \"stream timeout\"; set the route's idle_timeout to "
                           f"{timeout + request:g}s")
    flags = [f for mapper in dig(hcm, "local_reply_config", "mappers") or []
             for f in dig(mapper, "filter", "response_flag_filter", "flags") or []]
    if "SI" not in flags:
        fail(name, "local_reply_config leaves Envoy's stream idle timeout (SI) as plain text, not OpenAI's shape")


def is_pool_cluster(name):
    """The cluster inference requests go to: the template's `pool` (`pool-<name>` with
    several), Istio's `wasm_epp_pool`."""
    return name == "pool" or name.startswith("pool-") or name == "wasm_epp_pool"


def routes_to_pool(hcm):
    clusters = [dig(route, "route", "cluster") or "" for host in dig(hcm, "route_config", "virtual_hosts") or []
                for route in host.get("routes") or []]
    return any(is_pool_cluster(c) for c in clusters)


def check_pool_clusters(where, config):
    """Every pool cluster carries the template's circuit breakers: Envoy's defaults (1024
    requests, 3 retries in flight) would answer a busy pool's further requests 503 (UO)."""
    wanted = template_pool_circuit_breakers()
    for cluster in dig(config, "static_resources", "clusters") or []:
        if is_pool_cluster(cluster.get("name", "")) and cluster.get("circuit_breakers") != wanted:
            fail(where, f"cluster {cluster['name']}: circuit_breakers {cluster.get('circuit_breakers')} differ from "
                        f"envoy/envoy.yaml.template's pool cluster ({wanted})")
    # An ORIGINAL_DST pool follows the one address the filter wrote: a retry goes to the same
    # pod, so a dead one costs a connect timeout per attempt.
    original_dst = {c.get("name") for c in dig(config, "static_resources", "clusters") or []
                    if is_pool_cluster(c.get("name", "")) and c.get("type") == "ORIGINAL_DST"}
    for listener in dig(config, "static_resources", "listeners") or []:
        for chain in listener.get("filter_chains") or []:
            for network_filter in chain.get("filters") or []:
                for host in dig(network_filter, "typed_config", "route_config", "virtual_hosts") or []:
                    for route in host.get("routes") or []:
                        retries = dig(route, "route", "retry_policy", "num_retries")
                        cluster = dig(route, "route", "cluster")
                        if cluster in original_dst and dig(route, "route", "retry_policy") and retries != 0:
                            fail(where, f"the route to the ORIGINAL_DST cluster {cluster} retries "
                                        f"({retries if retries is not None else 'Envoy default 1'}): every attempt "
                                        "goes to the address that failed")


def template_pool_circuit_breakers():
    config = render_template("override_host", True)
    return next(c for c in config["static_resources"]["clusters"] if c["name"] == "pool")["circuit_breakers"]


def check_pods_api_key(where, extension, singleton):
    """A singleton reading the pods' API key from a variable gets that variable from Envoy:
    a Wasm VM sees only those its vm_config.environment_variables names (the singleton
    refuses to start without it). The key itself stays out of the configuration."""
    variable = singleton.get("pods_api_key_env")
    if not variable:
        return
    env = dig(extension, "typed_config", "config", "vm_config", "environment_variables") or {}
    if variable not in (env.get("host_env_keys") or []):
        fail(where, f"pods_api_key_env {variable} is not in the singleton's vm_config.environment_variables.host_env_keys")
    if variable in (env.get("key_values") or {}):
        fail(where, f"the pods' API key {variable} is inline in key_values, in plain text in config_dump")


def run_envoy_checks(where, config, files, scratch):
    check_inference_listeners(where, config)
    check_pool_clusters(where, config)
    for extension, value in singleton_configs(config):
        try:
            SINGLETON_CONFIGS.append((where, json.loads(value)))
        except json.JSONDecodeError as error:
            fail(where, f"singleton configuration is not JSON: {error}")
            continue
        check_pods_api_key(where, extension, SINGLETON_CONFIGS[-1][1])
    path = scratch / "envoy.yaml"
    path.write_text(localise(yaml.safe_dump(config, sort_keys=False), scratch, files))
    started = time.monotonic()
    result = subprocess.run([str(ENVOY), "--mode", "validate", "-c", str(path), "-l", "warn"],
                            capture_output=True, text=True, timeout=120)
    if result.returncode != 0 or "OK" not in result.stdout + result.stderr:
        tail = (result.stdout + result.stderr).strip().splitlines()[-3:]
        return fail(where, "envoy --mode validate: " + " | ".join(tail))
    note = ""
    if config.get("bootstrap_extensions"):
        smoke = copy.deepcopy(config)
        set_ports_to_zero(smoke)
        smoke_path = scratch / "envoy-smoke.yaml"
        smoke_path.write_text(localise(yaml.safe_dump(smoke, sort_keys=False), scratch, files))
        note = smoke_start(where, smoke_path, len(list(singleton_configs(config))), SMOKE_REQUESTS.get(where, []))
    print(f"  ok  {where} ({time.monotonic() - started:.1f} s{note})")


def smoke_start(where, path, singletons, requests=()):
    """Starts Envoy for real until every singleton logs that it is configured, then makes
    `requests` (SMOKE_REQUESTS) to its listeners."""
    admin_file = path.parent / "admin-address"
    # A configuration naming the pods' API key variable gets it from Envoy's environment
    # (the chart's Deployment sets it from a Secret): the singleton refuses to start without.
    process = subprocess.Popen([str(ENVOY), "-c", str(path), "--disable-hot-restart", "--concurrency", "1",
                                "-l", "info", "--admin-address-path", str(admin_file)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env={**os.environ, "WASM_EPP_PODS_API_KEY": "validate-pods-key"})
    seen, log = 0, []
    deadline = time.monotonic() + SMOKE_SECONDS
    try:
        while time.monotonic() < deadline and seen < singletons and process.poll() is None:
            ready, _, _ = select.select([process.stdout], [], [], 0.2)
            if not ready:
                continue
            line = process.stdout.readline()
            log.append(line)
            seen += SINGLETON_CONFIGURED in line
            if "wasm-epp singleton:" in line and ("invalid" in line or "error" in line):
                break
        if seen >= singletons and requests:
            make_requests(where, admin_file, requests)
    finally:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
    if seen < singletons:
        lines = [l.strip() for l in log if "wasm-epp singleton" in l or "wasm-epp pool service" in l or "critical" in l][-3:]
        fail(where, "the singleton did not configure in a real start: " + " | ".join(lines))
        return ""
    return ", singleton configured in a real start" + (f", {len(requests)} requests answered" if requests else "")


def make_requests(where, admin_file, requests):
    """Each request to its listener (found through the admin's /listeners: ports are 0),
    retried for a few seconds while the workers' filters start."""
    admin = admin_file.read_text().strip()
    with urllib.request.urlopen(f"http://{admin}/listeners?format=json", timeout=5) as reply:
        statuses = json.load(reply).get("listener_statuses") or []
    ports = {s["name"]: dig(s, "local_address", "socket_address", "port_value") for s in statuses}
    for listener, host, method, path, body, status, part, why in requests:
        deadline, got = time.monotonic() + 5, None
        while time.monotonic() < deadline:
            connection = http.client.HTTPConnection("127.0.0.1", ports.get(listener), timeout=5)
            try:
                headers = {"Host": host, **({"content-type": "application/json"} if body else {})}
                connection.request(method, path, body=body, headers=headers)
                answer = connection.getresponse()
                got = (answer.status, answer.read().decode(errors="replace"))
            except OSError as error:
                got = (None, str(error))
            finally:
                connection.close()
            if got[0] == status and part in got[1]:
                break
            time.sleep(0.2)
        else:
            fail(where, f"listener {listener}: {method} {host}{path} answered {got[0]} {got[1][:160]!r}, "
                        f"wanted {status} with {part!r}: {why}")


# Stat names as the plugin defines them (Envoy adds `wasmcustom.`), and the labels the
# template's stats_tags must cut out of them (Python's re reads these regexes as Envoy does).
STAT_NAME_SAMPLES = {
    "wasmcustom.wasm_epp.requests_routed": {},
    "wasmcustom.wasm_epp.picks.pod.10.0.0.1:8000": {"pod": "10.0.0.1:8000"},
    "wasmcustom.wasm_epp.pool.qwen-3.picks.pod.[fd00::1]:80": {"pool": "qwen-3", "pod": "[fd00::1]:80"},
    "wasmcustom.wasm_epp.pool.a.pod_waiting.pod.10.0.0.2:8000": {"pool": "a", "pod": "10.0.0.2:8000"},
    "wasmcustom.wasm_epp.pool.a.picks_by_reason.reason.load": {"pool": "a", "reason": "load"},
    "wasmcustom.wasm_epp.pool.a.flow.dropped.ttl_expired": {"pool": "a", "reason": "ttl_expired"},
    "wasmcustom.wasm_epp.pool.a.decision_time_us_bucket.le.+Inf": {"pool": "a", "le": "+Inf"},
    "wasmcustom.wasm_epp.pool.a.flow.wait_ms_bucket.le_50": {"pool": "a", "le": "50"},
    "wasmcustom.wasm_epp.flow.wait_ms_bucket.le_+Inf": {"le": "+Inf"},
    "wasmcustom.wasm_epp.pool.a.flow.band_entered_bytes.n1": {"pool": "a", "band": "n1"},
    "wasmcustom.wasm_epp.pool.a.flow.released_by_worker.w0": {"pool": "a", "worker": "w0"},
    "wasmcustom.wasm_epp.pool.a.flow.pod_saturated.pod.10_0_0_1_8000": {"pool": "a", "pod": "10_0_0_1_8000"},
    "wasmcustom.wasm_epp.model_requests.model.meta-llama/Llama-3.1-8B": {"model": "meta-llama/Llama-3.1-8B"},
    "wasmcustom.wasm_epp.pool.a.model_requests.model.qwen": {"pool": "a", "model": "qwen"},
    "wasmcustom.wasm_epp.comparison_requests.arm.picker": {"arm": "picker"},
    "wasmcustom.wasm_epp.pool.a.comparison_first_byte_ms_bucket.arm.baseline.le.250": {
        "pool": "a",
        "arm": "baseline",
        "le": "250",
    },
    "wasmcustom.wasm_epp.comparison_duration_ms_bucket.arm.picker.le.+Inf": {"arm": "picker", "le": "+Inf"},
    "wasmcustom.wasm_epp.comparison_duration_ms_sum.arm.baseline": {"arm": "baseline"},
    # Envoy's VM reload counters, which the WasmEppVmReloaded alert reads by this label.
    "wasm.wasm-epp.vm_reload_success": {"wasm_plugin": "wasm-epp"},
    "wasm.wasm-epp-peer.vm_reload_failure": {"wasm_plugin": "wasm-epp-peer"},
    "wasm.wasm-epp-llama-3.vm_reload_success": {"wasm_plugin": "wasm-epp-llama-3"},
    "wasm.envoy.wasm.runtime.v8.created": {},
}


def check_stats_tags(configs):
    """Every Envoy configuration that names the plugin's stat labels names them as the
    template does: a copy that lags behind leaves labels in the stats' names, and the
    dashboard's and the alerts' queries find nothing."""
    wanted = dig(configs[0][1], "stats_config", "stats_tags")
    for name, tags in STAT_NAME_SAMPLES.items():
        found = {}
        for rule in wanted or []:
            match = re.search(rule["regex"], name)
            if match:
                found[rule["tag_name"]] = match.group(2)
        if found != tags:
            fail("envoy/envoy.yaml.template", f"stats_tags make {found} of {name}, not {tags}")
    for where, config, _ in configs[1:]:
        tags = dig(config, "stats_config", "stats_tags")
        if tags is not None and tags != wanted:
            fail(where, "stats_config.stats_tags differ from envoy/envoy.yaml.template's")


def normalized(node):
    """A configuration with what the two renderers fill differently taken out: module paths
    (to their file names), the access log (the example has none), plugin configurations
    parsed, and the poll interval the launcher always sets."""
    if isinstance(node, list):
        return [normalized(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if key == "access_log":
            continue
        if key == "filename" and str(value).endswith(".wasm"):
            value = Path(value).name
        elif key == "value" and isinstance(value, str) and value.startswith("{"):
            value = {k: v for k, v in json.loads(value).items() if k != "poll_interval_ms"}
        out[key] = normalized(value)
    return out


def check_renderers_agree():
    """k8s/tools/envoy_template.py renders two pools as the launcher does: the same as the
    committed envoy/examples/two-pools.yaml (launcher/src/compose.rs), but for what
    `normalized` takes out. A change to one renderer that is not made to the other fails."""
    pods = {"llama": ["127.0.0.1:8001", "127.0.0.1:8002"], "qwen": ["127.0.0.1:8003", "127.0.0.1:8004"]}
    ours = normalized(render_template("override_host", True, pools=pods))
    example = normalized(yaml.safe_load((ROOT / "envoy/examples/two-pools.yaml").read_text()))
    if ours != example:
        fail("k8s/tools/envoy_template.py", "renders two pools otherwise than the launcher "
                                            "(envoy/examples/two-pools.yaml): update one to match the other")
    else:
        print("  ok  envoy_template.py and the launcher render two pools alike")


def check_envoy_configs(scratch_root):
    if not ENVOY.exists():
        return fail("envoy", f"{ENVOY} not found (make envoy)")
    for module in ("wasm_epp_filter.wasm", "wasm_epp_shared_state.wasm"):
        if not (WASM_DIR / module).exists():
            return fail("wasm", f"{WASM_DIR / module} not built (make wasm)")
    jobs = []
    configs = envoy_configs()
    check_stats_tags(configs)
    check_renderers_agree()
    for index, (where, config, files) in enumerate(configs):
        scratch = scratch_root / f"envoy-{index}"
        (scratch / "files").mkdir(parents=True)
        (scratch / "serviceaccount").mkdir()
        (scratch / "serviceaccount" / "token").write_text("validate-token")
        (scratch / "serviceaccount" / "ca.crt").write_text("not a certificate: validation does not connect\n")
        jobs.append((where, config, files, scratch))
    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(lambda job: run_envoy_checks(*job), jobs))
    if OLDEST_ENVOY:
        older = [job for job in jobs if NEEDS_ENVOY_1_37 not in yaml.safe_dump(job[1])]
        with ThreadPoolExecutor(max_workers=4) as pool:
            list(pool.map(lambda job: validate_on_oldest(*job), older))


def validate_on_oldest(where, config, files, scratch):
    """`envoy --mode validate` with the oldest Envoy the configuration must load on."""
    path = scratch / "envoy-oldest.yaml"
    path.write_text(localise(yaml.safe_dump(config, sort_keys=False), scratch, files))
    result = subprocess.run([OLDEST_ENVOY, "--mode", "validate", "-c", str(path), "-l", "warn"],
                            capture_output=True, text=True, timeout=120)
    if result.returncode != 0 or "OK" not in result.stdout + result.stderr:
        tail = (result.stdout + result.stderr).strip().splitlines()[-3:]
        return fail(where, f"envoy --mode validate on {OLDEST_ENVOY}: " + " | ".join(tail))
    print(f"  ok  {where} (also on {Path(OLDEST_ENVOY).parent.parent.name})")


# --- the chart against the hand-written manifests ---------------------------------------------

def without_configurations(node):
    """The structure with every plugin `configuration` blanked: those carry the values."""
    if isinstance(node, dict):
        return {k: "<configuration>" if k == "configuration" else without_configurations(v) for k, v in node.items()}
    if isinstance(node, list):
        return [without_configurations(v) for v in node]
    return node


def check_chart_follows_manifests():
    """With its default values the chart renders the same Envoy configuration as the
    hand-written manifests (plugin configurations aside, which carry the values): a change
    to one that is not made to the other fails here."""
    before = len(failures)
    pairs = [("standalone/standalone/envoy-config.yaml", "standalone/envoy-config.yaml", lambda d: d["data"]),
             ("istio/istio/envoyfilter.yaml", "istio/singleton/envoyfilter.yaml", lambda d: {"spec": d["spec"]})]
    for rendered, manual, part in pairs:
        if not (HELM_RENDERED / rendered).exists():
            continue  # reported by check_manifests
        chart = part(next(d for d in yaml.safe_load_all((HELM_RENDERED / rendered).read_text()) if d))
        hand = part(next(d for d in yaml.safe_load_all((K8S / manual).read_text()) if d))
        for key in hand:
            parse = yaml.safe_load if isinstance(hand[key], str) else (lambda v: v)
            if without_configurations(parse(chart.get(key))) != without_configurations(parse(hand[key])):
                fail(f"k8s/helm/wasm-epp ({rendered})", f"{key} differs from k8s/{manual} beyond the plugin configurations")
    if len(failures) == before:
        print("  ok  the chart's default render follows k8s/standalone and k8s/istio/singleton")


# --- 3. docker compose ------------------------------------------------------------------------

def check_compose_builds(where, compose_dir, services):
    """Every image compose builds has its Dockerfile, on the Rust the workspace declares, and a
    context that leaves the build outputs out (.dockerignore)."""
    rust_version = re.search(r'^rust-version = "([0-9.]+)"', (ROOT / "Cargo.toml").read_text(), re.M)
    for name, service in services.items():
        build = service.get("build")
        if not build:
            continue
        context = (compose_dir / build.get("context", ".")).resolve()
        dockerfile = context / build.get("dockerfile", "Dockerfile")
        if not dockerfile.is_file():
            fail(where, f"{name}: builds from {dockerfile.relative_to(ROOT)}, which does not exist")
            continue
        bases = re.findall(r"^FROM rust:([0-9.]+)", dockerfile.read_text(), re.M)
        if rust_version and bases and bases != [rust_version.group(1)]:
            fail(where, f"{name}: {dockerfile.name} builds on rust:{bases}, the workspace declares {rust_version.group(1)}")
        ignored = (context / ".dockerignore").read_text().split() if (context / ".dockerignore").is_file() else []
        if "target/" not in ignored:
            fail(where, f"{name}: its build context sends target/ to Docker (no .dockerignore entry)")


def report_check(where, problems, ok_line):
    """Each of a checker's problems as a failure of `where`; its ok line when it has none."""
    for problem in problems:
        fail(where, problem)
    if not problems:
        print(f"  ok  {ok_line}")


def check_compose():
    where = "envoy/compose/docker-compose.yaml"
    compose_dir = ROOT / "envoy/compose"
    compose = yaml.safe_load((compose_dir / "docker-compose.yaml").read_text())
    services = compose.get("services") or {}
    envoy = services.get("envoy")
    if not envoy:
        return fail(where, "no envoy service")
    if not str(envoy.get("image", "")).endswith(f":v{ENVOY_VERSION}"):
        fail(where, f"envoy image {envoy.get('image')} is not v{ENVOY_VERSION}, the version tested here")
    for volume in envoy.get("volumes") or []:
        source = volume.split(":")[0]
        if not (compose_dir / source).resolve().exists():
            fail(where, f"volume source {source} does not exist (build first: make wasm)")
    for name, service in services.items():
        for volume in service.get("volumes") or [] if name != "envoy" else []:
            source = volume.split(":")[0]
            if source.startswith(".") and not (compose_dir / source).resolve().exists():
                fail(where, f"{name}: volume source {source} does not exist")
    check_compose_builds(where, compose_dir, services)
    prometheus = yaml.safe_load((compose_dir / "prometheus.yml").read_text())
    mounted = {v.split(":")[1] for v in dig(services, "prometheus", "volumes") or []}
    for rule_file in prometheus.get("rule_files") or []:
        if rule_file not in mounted:
            fail(where, f"prometheus.yml loads {rule_file}, which no volume of the prometheus service mounts")
    addresses = {dig(s, "networks", "pool", "ipv4_address") for s in services.values()}
    config = yaml.safe_load((compose_dir / "envoy.yaml").read_text())
    for _, value in singleton_configs(config):
        for pod in json.loads(value).get("pool") or []:
            if pod.split(":")[0] not in addresses:
                fail(where, f"the singleton's pod {pod} is no compose service address")
    for mapping in envoy.get("ports") or []:
        if str(mapping).endswith(":9901") and not str(mapping).startswith("127.0.0.1:"):
            fail(where, f"the admin port is published as {mapping}: bind it to 127.0.0.1 only")
    published = {str(p).split(":")[-1] for p in envoy.get("ports") or []}
    for listener in dig(config, "static_resources", "listeners") or []:
        port = str(listener["address"]["socket_address"]["port_value"])
        if port not in published:
            fail(where, f"Envoy listens on {port} but compose does not publish it")
    print(f"  ok  {where} ({len(services)} services)")


def check_plain_envoy_guide():
    """docs/deployment.md's "Plain Envoy" points users at configurations to run natively:
    one whose admin listens beyond loopback (compose's, for Docker's port forward) must come
    with the instruction to bind it to 127.0.0.1 (admin can stop Envoy and dumps its
    configuration)."""
    where = "docs/deployment.md (Plain Envoy)"
    section = (ROOT / "docs/deployment.md").read_text().split("\n## Plain Envoy\n", 1)[-1].split("\n## ", 1)[0]
    named = sorted(set(re.findall(r"`(envoy/[\w./-]+\.yaml)`", section)))
    before = len(failures)
    for name in named:
        config = yaml.safe_load((ROOT / name).read_text())
        address = dig(config, "admin", "address", "socket_address", "address")
        if address not in ("127.0.0.1", "::1") and not re.search(r"`admin[\w.]*` to `127\.0\.0\.1`", section):
            fail(where, f"points native users at {name}, whose admin listens on {address}, without telling "
                        "them to set `admin.address` to `127.0.0.1`")
    if len(failures) == before:
        print(f"  ok  {where}: {', '.join(named) or 'no configuration named'}, admin on loopback or told to be")


def main():
    started = time.monotonic()
    print(f"Kubernetes manifests (schema {KUBERNETES_VERSION}, strict; custom resources by field checks)")
    resources = check_manifests()
    gateway = check_gateway_patch()
    with tempfile.TemporaryDirectory(prefix="wasm-epp-validate-") as scratch:
        modules = check_wasm_configmaps(Path(scratch)) or []
        resources += modules
        print(f"  {len(resources)} resources checked")
        print(f"Envoy configurations ({ENVOY})")
        check_envoy_configs(Path(scratch))
    check_coherence(resources)
    before = len(failures)
    checked = check_probe_ports(resources)
    if len(failures) == before:
        print(f"  ok  {checked} Envoy Deployments: every probe on a port Envoy listens on")
    before = len(failures)
    deployments = [(SOURCES.get(id(d), "Deployment"), d) for d in resources if d.get("kind") == "Deployment"]
    deployments.append(("k8s/istio/common/gateway-deployment-patch.json", gateway))
    scripts = modules_check.check(deployments, modules, WASM_DIR, fail)
    if len(failures) == before:
        print(f"  ok  {len(deployments)} Deployments: every mount of the module ConfigMaps unpacked by an init "
              f"container; {scripts} distinct unpack script(s) run, modules identical")
    check_chart_follows_manifests()
    print("alerting rules and dashboard queries (promtool)")
    report_check("k8s/alerts", alerts_check.check_rule_files(),
                 "k8s/alerts/wasm-epp.rules.yaml: promtool check rules, test rules")
    report_check("k8s/dashboards", alerts_check.check_dashboard_queries(),
                 "k8s/dashboards/wasm-epp.json: queries tested by wasm-epp.dashboard.test.yaml")
    print("docs: series and make targets")
    report_check("docs", docs_check.check(),
                 "every wasm_epp_* series the docs name is exported; every `make` target exists")
    print("docker compose")
    check_compose()
    check_plain_envoy_guide()
    if failures:
        print(f"\nvalidate: {len(failures)} problem(s):")
        for problem in failures:
            print(f"  - {problem}")
        sys.exit(1)
    print(f"validate: all good in {time.monotonic() - started:.1f} s")


if __name__ == "__main__":
    main()
