#!/usr/bin/env python3
"""The alerting rules (k8s/alerts/wasm-epp.rules.yaml) and the dashboard's queries, checked with
Prometheus's own promtool.

1. `promtool check rules`: the file parses, every expression and template compiles.
2. `promtool test rules k8s/alerts/wasm-epp.rules.test.yaml`: every alert fires on the series
   that show its trouble and not on healthy ones. promtool compares every annotation, and the
   descriptions are prose, so the tests run against a copy of the rules without them.
3. The Helm chart's PrometheusRule (rendered by `make helm-check`) carries the same groups as
   the file, and its PodMonitor keeps the plugin's `pod` label (honorLabels).
4. k8s/dashboards/wasm-epp.dashboard.test.yaml: panel queries of k8s/dashboards/wasm-epp.json,
   named by panel title and refId and taken from the dashboard as it is (Grafana's `$pool` as
   `.*`, `$__rate_interval` as the file's `rate_interval`), evaluated by `promtool test rules`
   on series of a given shape (several gateway replicas, Istio's stat names) against the
   values they must show. tests/e2e/tests/dashboard.rs checks that each query finds data on
   a real Envoy; this checks what it shows where no e2e test runs.

Called by k8s/tools/validate.py (`make validate`); runs alone too:
`.venv/bin/python k8s/tools/alerts_check.py`.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "k8s/alerts"
RULES = ALERTS / "wasm-epp.rules.yaml"
TESTS = ALERTS / "wasm-epp.rules.test.yaml"
DASHBOARD = ROOT / "k8s/dashboards/wasm-epp.json"
DASHBOARD_TESTS = ROOT / "k8s/dashboards/wasm-epp.dashboard.test.yaml"
# Debian's prometheus package (`make prometheus`) installs it beside the server.
PROMTOOL = os.environ.get("PROMTOOL", "/usr/bin/promtool")


def rule_groups():
    return yaml.safe_load(RULES.read_text())["groups"]


def promtool(*args, cwd=None):
    """Runs promtool; returns its output if it failed, else None."""
    done = subprocess.run([PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    return None if done.returncode == 0 else (done.stdout + done.stderr).strip()


def without_descriptions(groups):
    for group in groups:
        for rule in group["rules"]:
            rule.get("annotations", {}).pop("description", None)
    return {"groups": groups}


def check_rule_files():
    """Returns the problems found by promtool (empty if none)."""
    if not Path(PROMTOOL).exists():
        return [f"{PROMTOOL} missing (make prometheus installs it)"]
    problems = []
    failed = promtool("check", "rules", str(RULES))
    if failed:
        problems.append(f"promtool check rules:\n{failed}")
    with tempfile.TemporaryDirectory(prefix="wasm-epp-alerts-") as scratch:
        Path(scratch, RULES.name).write_text(yaml.safe_dump(without_descriptions(rule_groups()), sort_keys=False))
        shutil.copy(TESTS, scratch)
        failed = promtool("test", "rules", TESTS.name, cwd=scratch)
        if failed:
            problems.append(f"promtool test rules:\n{failed}")
    return problems


def panel_queries():
    """`(panel title, refId) -> expr` of every query of the dashboard."""
    dashboard = json.loads(DASHBOARD.read_text())
    return {(panel["title"], target["refId"]): target["expr"]
            for panel in dashboard["panels"] for target in panel.get("targets", [])}


def dashboard_tests_for_promtool(spec, queries):
    """The dashboard tests as promtool's own test file (each `panel` and `ref` replaced by the
    panel's query), and the problems met (a panel or refId the dashboard does not have)."""
    rate_interval = spec.get("rate_interval", "5m")
    problems, tests = [], []
    for test in spec["tests"]:
        checks = []
        for check in test.pop("panel_tests"):
            key = (check.pop("panel"), check.pop("ref"))
            if key not in queries:
                problems.append(f"{test.get('name')}: the dashboard has no query {key}")
                continue
            expr = queries[key].replace("$__rate_interval", rate_interval).replace("$pool", ".*")
            checks.append({"expr": expr, **check})
        tests.append({**test, "promql_expr_test": checks})
    promtool_spec = {"rule_files": [], "evaluation_interval": spec.get("evaluation_interval", "1m"), "tests": tests}
    return promtool_spec, problems


def check_dashboard_queries():
    """Returns the problems found (empty if none)."""
    if not Path(PROMTOOL).exists():
        return [f"{PROMTOOL} missing (make prometheus installs it)"]
    spec, problems = dashboard_tests_for_promtool(yaml.safe_load(DASHBOARD_TESTS.read_text()), panel_queries())
    with tempfile.TemporaryDirectory(prefix="wasm-epp-dashboard-") as scratch:
        Path(scratch, DASHBOARD_TESTS.name).write_text(yaml.safe_dump(spec, sort_keys=False))
        failed = promtool("test", "rules", DASHBOARD_TESTS.name, cwd=scratch)
        if failed:
            problems.append(f"promtool test rules (dashboard queries):\n{failed}")
    return problems


def check_prometheus_rule(doc):
    """A rendered PrometheusRule: the problems with it (empty if none)."""
    if (doc.get("spec") or {}).get("groups") != rule_groups():
        return ["PrometheusRule's spec.groups differ from k8s/alerts/wasm-epp.rules.yaml"]
    return []


def check_pod_monitor(doc):
    """A rendered PodMonitor: the problems with it (empty if none)."""
    spec = doc.get("spec") or {}
    problems = []
    if not (spec.get("selector") or {}).get("matchLabels"):
        problems.append("PodMonitor selects no pod")
    endpoints = spec.get("podMetricsEndpoints") or []
    if not endpoints:
        problems.append("PodMonitor has no podMetricsEndpoints")
    for endpoint in endpoints:
        if endpoint.get("path") != "/stats/prometheus" or not endpoint.get("port"):
            problems.append(f"PodMonitor endpoint {endpoint} is not a port's /stats/prometheus")
        if endpoint.get("honorLabels") is not True:
            problems.append("PodMonitor without honorLabels: the plugin's `pod` label would become exported_pod")
    return problems


def main():
    problems = check_rule_files()
    dashboard_problems = check_dashboard_queries()
    for problem in problems + dashboard_problems:
        print(f"  FAILED {problem}")
    if not problems:
        print(f"  ok  {RULES.relative_to(ROOT)}: promtool check rules, test rules")
    if not dashboard_problems:
        print(f"  ok  {DASHBOARD.relative_to(ROOT)}: queries tested by {DASHBOARD_TESTS.relative_to(ROOT)}")
    if problems or dashboard_problems:
        sys.exit(1)


if __name__ == "__main__":
    main()
