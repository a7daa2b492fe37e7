#!/usr/bin/env python3
"""The names users copy from the docs exist (part of `make validate`; runs in well under a second).

1. Every `wasm_epp_*` series the docs name is one the plugin exports. The exported names are
   read from the sources: each stat name the plugin registers (`"wasm_epp.…"`, a `{…}` in a
   `format!` matching any word) has the label parts that envoy/envoy.yaml.template's
   `stats_tags` rules take out of it cut, as Envoy cuts them, then `.` becomes `_`. A
   documented name matches one of those, or one with `_bucket`/`_sum`/`_count`, or names a
   labelled stat the untagged way (`wasm_epp_picks_pod_10_0_0_1_8000`: the stat's name, then
   its label). A name written as a prefix (`wasm_epp_peer_…`, ending in `_`) must begin one.
2. Every `make <target>` written as a command in the docs is a target of the Makefile.

Run alone: `.venv/bin/python k8s/tools/docs_check.py`.
"""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

DOCS = ["README.md", "docs/configuration.md", "docs/deployment.md", "docs/design.md", "docs/performance.md",
        "k8s/README.md", "simulator/README.md", "bench/README.md"]

SOURCES = ["router/src", "poller/src", "host/src", "filter/src", "picker/src", "shared-state/src"]

# Stands for a `{…}` of a format string while the tag rules run (a word they accept as a label).
WILD = "zzwild"


def tag_rules():
    text = (ROOT / "envoy/envoy.yaml.template").read_text()
    return [re.compile(r) for r in re.findall(r"^\s*regex: '(\^wasmcustom\\\.wasm_epp[^']*)'", text, re.M)]


def untagged(name, rules):
    """`name` as Prometheus shows it: each rule's first group cut, as Envoy's stats_tags do."""
    name = "wasmcustom." + name
    for rule in rules:
        match = rule.search(name)
        if match and match.group(1):
            name = name[:match.start(1)] + name[match.end(1):]
    return name.removeprefix("wasmcustom.").replace(".", "_")


def exported():
    """Regular expressions of the series names the plugin exports, and its raw stat names."""
    rules = tag_rules()
    files = subprocess.check_output(["git", "ls-files", *SOURCES], cwd=ROOT, text=True).split()
    raw = set()
    for file in files:
        text = (ROOT / file).read_text()
        for literal in re.findall(r'"(wasm_epp\.[a-z0-9_.{}]*)"', text):
            name = re.sub(r"\{[a-z_]*\}", WILD, literal).rstrip(".")
            if name != "wasm_epp":
                raw.add(name)
    patterns = set()
    for name in raw:
        # A family registered by its name alone (`wasm_epp.pod_healthy.pod`), its label added
        # per series: with a label value, as Envoy sees it, if a rule cuts that label.
        labelled = untagged(f"{name}.{WILD}", rules)
        for series in [untagged(name, rules)] + ([labelled] if WILD not in labelled else []):
            pattern = re.escape(series).replace(WILD, "[a-z0-9_]+")
            patterns.add(pattern)
            # A histogram named without its `_bucket` / `_sum` / `_count`.
            patterns.add(re.sub(r"_(bucket|sum|count)$", "", pattern))
    raw_names = {re.escape(name.replace(".", "_")).replace(WILD, "[a-z0-9_]+") for name in raw}
    return [re.compile(p) for p in patterns], [re.compile(p) for p in raw_names]


def not_series():
    """Names of the same shape that are no series: the shipped configurations' clusters
    (`wasm_epp_pool`, `wasm_epp_metrics`, ...) and the router crate (performance.md)."""
    names = {"wasm_epp_router"}
    configs = ["k8s/standalone/envoy-config.yaml", "envoy/examples/two-pools.yaml",
               "k8s/istio/singleton/envoyfilter.yaml", "k8s/istio/no-singleton/clusters.yaml"]
    for config in configs:
        names.update(re.findall(r"name: \"?(wasm_epp_[a-z_]+)", (ROOT / config).read_text()))
    return names


def documented_names():
    """`(document, name)` of every `wasm_epp_…` series name in the docs (not module files)."""
    names = set()
    skip = not_series()
    for doc in DOCS:
        text = (ROOT / doc).read_text()
        for match in re.finditer(r"(?<![A-Za-z0-9_])wasm_epp_[a-z0-9_]+(?![a-z0-9_.]*\.wasm)", text):
            if match.group(0) not in skip:
                names.add((doc, match.group(0)))
    return sorted(names)


def check_metric_names():
    series, raw = exported()
    problems = []
    for doc, name in documented_names():
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        if name.endswith("_"):
            ok = any(p.pattern.replace("\\", "").startswith(name) or p.match(name) for p in series + raw)
        else:
            ok = any(p.fullmatch(name) or p.fullmatch(base) for p in series)
            # The untagged way: a labelled stat's raw name, its label value after it.
            ok = ok or any(p.fullmatch(name) or (p.match(name) and name[p.match(name).end():].startswith("_"))
                           for p in raw)
        if not ok:
            problems.append(f"{doc}: {name} is no series the plugin exports")
    return problems


def check_make_targets():
    makefile = (ROOT / "Makefile").read_text()
    targets = set()
    for line in re.findall(r"^([^\s#=:][^=:\n]*):(?!=)", makefile, re.M):
        targets.update(line.split())
    problems = []
    for doc in DOCS:
        text = (ROOT / doc).read_text()
        # A command: in backquotes, or in a shell block (at a line's start or after `&&`, `;`).
        blocks = "\n".join(re.findall(r"^```sh\n(.*?)^```", text, re.M | re.S))
        blocks = re.sub(r"#.*", "", blocks)
        commands = re.findall(r"`make((?: [a-z][a-z0-9-]*)+)`", text)
        commands += re.findall(r"(?:^\s*|&& |; )make((?: [a-z][a-z0-9-]*)+)", blocks, re.M)
        for command in commands:
            for target in command.split():
                if target not in targets:
                    problems.append(f"{doc}: `make {target}` is no target of the Makefile")
    return problems


def check():
    return check_metric_names() + check_make_targets()


if __name__ == "__main__":
    found = check()
    for problem in found:
        print(problem)
    sys.exit(1 if found else 0)
