"""Draws bench/results/pd/pd.json (the prefill/decode dimension, issue 19) as PNG charts.

Usage: python plot_pd.py RESULTS_DIR   (reads RESULTS_DIR/pd.json, writes PNGs beside it)

- pd_latency.png: TTFT and inter-token latency (p50 solid, p99 hatched) per target, one row per
  workload (long prompts k, short-prompt check).
- pd_throughput.png: output tokens/s and the share of requests disaggregated, per target.

Needs matplotlib (`make bench` installs it into .venv).
"""

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

COLOURS = {
    "wasm-epp-pd": "#9467bd",
    "wasm-epp-pd-never-split": "#c5b0d5",
    "wasm-epp": "#d62728",
    "envoy-round-robin": "#7f7f7f",
    "envoy-least-request": "#1f77b4",
    "vllm-router-cache-aware": "#2ca02c",
    "vllm-router-power-of-two": "#98df8a",
}


SHORT_NAMES = {
    "wasm-epp-pd": "wasm-epp\nP/D",
    "wasm-epp-pd-never-split": "wasm-epp P/D\nnever split",
    "wasm-epp": "wasm-epp\naggregated",
    "envoy-round-robin": "Envoy\nround robin",
    "envoy-least-request": "Envoy\nleast request",
    "vllm-router-cache-aware": "vllm-router\ncache_aware",
    "vllm-router-power-of-two": "vllm-router\npower_of_two",
}


def short(name):
    return SHORT_NAMES.get(name, name)


def by_workload(rows):
    workloads = []
    for row in rows:
        if row["workload"] not in workloads:
            workloads.append(row["workload"])
    return [(w, [r for r in rows if r["workload"] == w]) for w in workloads]


def bars(axis, rows, p50_key, p99_key, title):
    names = [r["target"] for r in rows]
    xs = range(len(rows))
    colours = [COLOURS.get(n, "#333333") for n in names]
    axis.bar([x - 0.2 for x in xs], [r.get(p50_key) or 0 for r in rows], 0.4, color=colours, label="p50")
    axis.bar([x + 0.2 for x in xs], [r.get(p99_key) or 0 for r in rows], 0.4, color=colours, hatch="//",
             alpha=0.6, label="p99")
    axis.set_xticks(list(xs))
    axis.set_xticklabels([short(n) for n in names], fontsize=7)
    axis.set_title(title, fontsize=9)
    axis.set_ylabel("ms")
    axis.legend(fontsize=7)


def main(results_dir):
    rows = json.loads((Path(results_dir) / "pd.json").read_text())
    groups = by_workload(rows)
    figure, axes = plt.subplots(len(groups), 2, figsize=(12, 4 * len(groups)), squeeze=False)
    for (workload, group), (ttft_axis, itl_axis) in zip(groups, axes):
        bars(ttft_axis, group, "ttft_p50_ms", "ttft_p99_ms", f"{workload}: TTFT")
        bars(itl_axis, group, "itl_p50_ms", "itl_p99_ms", f"{workload}: inter-token latency")
    figure.tight_layout()
    figure.savefig(Path(results_dir) / "pd_latency.png", dpi=110)

    figure, axes = plt.subplots(len(groups), 2, figsize=(12, 4 * len(groups)), squeeze=False)
    for (workload, group), (throughput_axis, split_axis) in zip(groups, axes):
        names = [r["target"] for r in group]
        colours = [COLOURS.get(n, "#333333") for n in names]
        labels = [short(n) for n in names]
        throughput_axis.bar(labels, [r["output_tokens_per_s"] for r in group], color=colours)
        throughput_axis.set_title(f"{workload}: output tokens/s", fontsize=9)
        throughput_axis.tick_params(axis="x", labelsize=7)
        split_axis.bar(labels, [100 * r["disaggregated_share"] for r in group], color=colours)
        split_axis.set_title(f"{workload}: requests disaggregated (%)", fontsize=9)
        split_axis.set_ylim(0, 100)
        split_axis.tick_params(axis="x", labelsize=7)
    figure.tight_layout()
    figure.savefig(Path(results_dir) / "pd_throughput.png", dpi=110)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "bench/results/pd")
