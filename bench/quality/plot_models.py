"""Draws models.json (workloads h and i of `make bench`, issue 15) as one PNG.

Usage: python plot_models.py RESULTS_DIR   (reads RESULTS_DIR/models.json if it exists, writes
RESULTS_DIR/models.png beside it; without the JSON it does nothing).

One row of panels per workload: requests that reached a pod not serving their model (the pods'
own 404 counters), adapter swaps (evictions to load another adapter), and TTFT p50 (solid) and
p90 (light); one bar per target, wasm-epp in red, the peers in grey. Needs matplotlib (`make
bench` installs it into .venv).
"""

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

SHORT = {
    "wasm-epp": "wasm-epp", "envoy-round-robin": "round\nrobin", "envoy-least-request": "least\nrequest",
    "vllm-router-cache-aware": "vllm-router\ncache-aware", "vllm-router-power-of-two": "vllm-router\npower-of-2",
}


def main(results_dir):
    path = Path(results_dir) / "models.json"
    if not path.exists():
        return
    rows = json.loads(path.read_text())
    workloads = sorted({row["workload"] for row in rows})
    figure, axes = plt.subplots(len(workloads), 3, figsize=(14, 3.6 * len(workloads)), squeeze=False)
    for line, workload in zip(axes, workloads):
        mine = [row for row in rows if row["workload"] == workload]
        labels = [SHORT.get(row["target"], row["target"]) for row in mine]
        colours = ["#d62728" if row["target"] == "wasm-epp" else "#7f7f7f" for row in mine]
        positions = range(len(mine))
        line[0].bar(positions, [row["wrong_pod_requests"] for row in mine], color=colours)
        line[0].set_title(f"{workload}: requests to a pod without the model")
        line[1].bar(positions, [row["adapter_swaps"] for row in mine], color=colours)
        line[1].set_title(f"{workload}: adapter swaps")
        line[2].bar(positions, [row["ttft_p90_ms"] or 0 for row in mine], color=colours, alpha=0.35, label="p90")
        line[2].bar(positions, [row["ttft_p50_ms"] or 0 for row in mine], color=colours, label="p50")
        line[2].set_title(f"{workload}: TTFT ms (p50 solid, p90 light)")
        for axis in line:
            axis.set_xticks(list(positions))
            axis.set_xticklabels(labels, fontsize=8)
    figure.tight_layout()
    out = Path(results_dir) / "models.png"
    figure.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "bench/results")
