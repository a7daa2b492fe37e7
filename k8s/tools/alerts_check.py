#!/usr/bin/env python3
"""The alerting rules (k8s/alerts/wasm-epp.rules.yaml), checked with Prometheus's own promtool.

1. `promtool check rules`: the file parses, every expression and template compiles.
2. `promtool test rules k8s/alerts/wasm-epp.rules.test.yaml`: every alert fires on the series
   that show its trouble and not on healthy ones. promtool compares every annotation, and the
   descriptions are prose, so the tests run against a copy of the rules without them.
3. The Helm chart's PrometheusRule (rendered by `make helm-check`) carries the same groups as
   the file, and its PodMonitor keeps the plugin's `pod` label (honorLabels).

Called by k8s/tools/validate.py (`make validate`); runs alone too:
`.venv/bin/python k8s/tools/alerts_check.py`.
"""

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
    for problem in problems:
        print(f"  FAILED {problem}")
    if problems:
        sys.exit(1)
    print(f"  ok  {RULES.relative_to(ROOT)}: promtool check rules, test rules")


if __name__ == "__main__":
    main()
