"""Draws bench/results/replicas.json (the replicas dimension of `make bench`) as one PNG.

Usage: python plot_replicas.py RESULTS_DIR   (reads RESULTS_DIR/replicas.json if it exists,
writes RESULTS_DIR/replicas.png beside it; without the JSON it does nothing).

One row of panels per workload: prefix-cache hit rate, TTFT p50 (solid) and p90 (light), and
output tokens/s, one bar per target, peering targets in red, without peering in blue, the
references in grey. Needs matplotlib (`make bench` installs it into .venv).
"""

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

ORDER = [
    "wasm-epp-x1", "wasm-epp-x2", "wasm-epp-x4", "wasm-epp-x2-no-peering", "wasm-epp-x4-no-peering",
    "wasm-epp-x4-no-peering-prior", "wasm-epp-x4-least-recent", "envoy-round-robin",
]
SHORT = {
    "wasm-epp-x1": "x1", "wasm-epp-x2": "x2\npeers", "wasm-epp-x4": "x4\npeers",
    "wasm-epp-x2-no-peering": "x2\nalone", "wasm-epp-x4-no-peering": "x4\nalone", "wasm-epp-x4-no-peering-prior": "x4 alone\nprior=1",
    "wasm-epp-x4-least-recent": "x4 alone\nleast-rec.", "envoy-round-robin": "round\nrobin",
}


def colour(row):
    if row["target"] in ("envoy-round-robin", "wasm-epp-x4-least-recent"):
        return "#7f7f7f"
    if row["replicas"] == 1:
        return "#d62728"
    return "#d62728" if row["peering"] else "#1f77b4"


def main(results_dir):
    path = Path(results_dir) / "replicas.json"
    if not path.exists():
        print(f"{path} not found: no replicas plot")
        return
    rows = json.loads(path.read_text())
    workloads = list(dict.fromkeys(row["workload"] for row in rows))
    if not workloads:
        return
    figure, axes = plt.subplots(len(workloads), 3, figsize=(18, 3.6 * len(workloads)), squeeze=False)
    for line, workload in zip(axes, workloads):
        mine = sorted((r for r in rows if r["workload"] == workload),
                      key=lambda r: ORDER.index(r["target"]) if r["target"] in ORDER else len(ORDER))
        names = [SHORT.get(r["target"], r["target"]) for r in mine]
        colours = [colour(r) for r in mine]
        places = range(len(mine))
        line[0].bar(places, [100 * (r["hit_rate"] or 0) for r in mine], color=colours)
        line[0].set_ylabel(f"{workload}\nhit rate %")
        line[1].bar(places, [r["ttft_p90_ms"] or 0 for r in mine], color=colours, alpha=0.35, label="p90")
        line[1].bar(places, [r["ttft_p50_ms"] or 0 for r in mine], color=colours, label="p50")
        line[1].set_ylabel("TTFT ms (p50 solid, p90 light)")
        line[2].bar(places, [r["output_tokens_per_s"] for r in mine], color=colours)
        line[2].set_ylabel("output tokens/s")
        for axis in line:
            axis.set_xticks(list(places))
            axis.set_xticklabels(names, fontsize=8)
            axis.grid(axis="y", alpha=0.3)
    figure.suptitle("wasm-epp gateway replicas behind a round-robin front Envoy (red: peering, blue: without)")
    figure.tight_layout()
    out = Path(results_dir) / "replicas.png"
    figure.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "bench/results")
