"""Draws bench/results/quality.json as PNG charts a person can read at a glance.

Usage: python plot.py RESULTS_DIR   (reads RESULTS_DIR/quality.json, writes five PNGs beside it)

One chart per table column group of quality.md:
- quality_hit_rate.png: prefix-cache hit rate per workload, one bar per target.
- quality_ttft.png, quality_e2e.png, quality_itl.png: TTFT, end-to-end and inter-token latency,
  p50 (solid) and p99 (hatched) per target, one panel per workload, because the workloads'
  latencies differ by orders of magnitude.
- quality_throughput.png: output tokens/s per workload, one bar per target.

Needs matplotlib (`make bench` installs it into .venv). Same colour per target in every chart.
Rows written before ITL was measured have no itl_* keys; their bars are simply missing.
"""

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

TARGET_ORDER = [
    "wasm-epp",
    "wasm-epp-learning",
    "envoy-round-robin",
    "envoy-least-request",
    "vllm-router-cache-aware",
    "vllm-router-power-of-two",
]
SHORT_NAMES = {
    "wasm-epp": "wasm-epp",
    "wasm-epp-learning": "wasm-epp\nlearning",
    "envoy-round-robin": "Envoy\nround robin",
    "envoy-least-request": "Envoy\nleast request",
    "vllm-router-cache-aware": "vllm-router\ncache_aware",
    "vllm-router-power-of-two": "vllm-router\npower_of_two",
}
COLOURS = {
    "wasm-epp": "#d62728",
    "wasm-epp-learning": "#ff7f0e",
    "envoy-round-robin": "#7f7f7f",
    "envoy-least-request": "#1f77b4",
    "vllm-router-cache-aware": "#2ca02c",
    "vllm-router-power-of-two": "#9467bd",
}
WORKLOAD_TITLES = {
    "a-shared-prefix": "(a) shared prefixes, 2 pods",
    "b-multi-turn": "(b) multi-turn chats, 8 pods, KV pressure",
    "c-no-prefix": "(c) no shared prefix, 4 pods",
    "d-burst": "(d) burst, 4 pods",
}


def ordered(values, order):
    known = [v for v in order if v in values]
    return known + sorted(v for v in values if v not in order)


def colour(target):
    return COLOURS.get(target, "#bcbd22")


def plot_hit_rate(rows, workloads, targets, path):
    fig, ax = plt.subplots(figsize=(11, 5.5))
    width = 0.8 / max(len(targets), 1)
    for index, target in enumerate(targets):
        xs, heights = [], []
        for position, workload in enumerate(workloads):
            row = rows.get((workload, target))
            if row is not None and row["hit_rate"] is not None:
                xs.append(position + (index - (len(targets) - 1) / 2) * width)
                heights.append(row["hit_rate"] * 100)
        bars = ax.bar(xs, heights, width, label=SHORT_NAMES.get(target, target).replace("\n", " "), color=colour(target))
        ax.bar_label(bars, fmt="%.0f", fontsize=8, padding=2)
    ax.set_xticks(range(len(workloads)))
    ax.set_xticklabels([WORKLOAD_TITLES.get(w, w) for w in workloads], fontsize=9)
    ax.set_ylabel("prefix-cache hit rate (% of prompt tokens)")
    ax.set_ylim(0, 105)
    ax.set_title("Prefix-cache hit rate (pods' own counters; higher is better)")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, ncol=len(targets), loc="upper center", bbox_to_anchor=(0.5, -0.1), frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_percentiles(rows, workloads, targets, path, metric, label, title):
    """One panel per workload: `metric`_p50 solid, `metric`_p99 hatched, one pair per target."""
    columns = 2 if len(workloads) > 1 else 1
    lines = (len(workloads) + columns - 1) // columns
    fig, axes = plt.subplots(lines, columns, figsize=(6.5 * columns, 4.2 * lines), squeeze=False)
    for panel, workload in enumerate(workloads):
        ax = axes[panel // columns][panel % columns]
        present = [t for t in targets if (workload, t) in rows]
        for position, target in enumerate(present):
            row = rows[(workload, target)]
            p50, p99 = row.get(f"{metric}_p50_ms"), row.get(f"{metric}_p99_ms")
            if p99 is not None:
                bar = ax.bar(position + 0.2, p99, 0.4, color=colour(target), alpha=0.35, hatch="//", edgecolor=colour(target))
                ax.bar_label(bar, fmt="%.0f", fontsize=7, padding=1)
            if p50 is not None:
                bar = ax.bar(position - 0.2, p50, 0.4, color=colour(target))
                ax.bar_label(bar, fmt="%.0f", fontsize=7, padding=1)
        ax.set_xticks(range(len(present)))
        ax.set_xticklabels([SHORT_NAMES.get(t, t) for t in present], fontsize=7)
        ax.set_title(WORKLOAD_TITLES.get(workload, workload), fontsize=10)
        ax.set_ylabel(label)
        ax.margins(y=0.15)
        ax.grid(axis="y", alpha=0.3)
    for panel in range(len(workloads), lines * columns):
        axes[panel // columns][panel % columns].axis("off")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_throughput(rows, workloads, targets, path):
    fig, ax = plt.subplots(figsize=(11, 5.5))
    width = 0.8 / max(len(targets), 1)
    for index, target in enumerate(targets):
        xs, heights = [], []
        for position, workload in enumerate(workloads):
            row = rows.get((workload, target))
            if row is not None:
                xs.append(position + (index - (len(targets) - 1) / 2) * width)
                heights.append(row["output_tokens_per_s"])
        bars = ax.bar(xs, heights, width, label=SHORT_NAMES.get(target, target).replace("\n", " "), color=colour(target))
        ax.bar_label(bars, fmt="%.0f", fontsize=7, padding=2)
    ax.set_xticks(range(len(workloads)))
    ax.set_xticklabels([WORKLOAD_TITLES.get(w, w) for w in workloads], fontsize=9)
    ax.set_ylabel("output tokens/s (whole run)")
    ax.set_title("Output throughput (higher is better; d-burst is the saturated pool)")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, ncol=len(targets), loc="upper center", bbox_to_anchor=(0.5, -0.1), frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main():
    results = Path(sys.argv[1] if len(sys.argv) > 1 else "bench/results")
    data = json.loads((results / "quality.json").read_text())
    if not data:
        print(f"{results / 'quality.json'} has no rows; nothing to plot")
        return
    rows = {(row["workload"], row["target"]): row for row in data}
    workloads = ordered({row["workload"] for row in data}, list(WORKLOAD_TITLES))
    targets = ordered({row["target"] for row in data}, TARGET_ORDER)
    plot_hit_rate(rows, workloads, targets, results / "quality_hit_rate.png")
    plot_percentiles(rows, workloads, targets, results / "quality_ttft.png", "ttft", "TTFT (ms)",
                     "Time to first token: p50 solid, p99 hatched (lower is better)")
    plot_percentiles(rows, workloads, targets, results / "quality_e2e.png", "e2e", "E2E latency (ms)",
                     "End-to-end latency: p50 solid, p99 hatched (lower is better)")
    plot_percentiles(rows, workloads, targets, results / "quality_itl.png", "itl", "inter-token latency (ms)",
                     "Inter-token latency seen by the client: p50 solid, p99 hatched (lower is better)")
    plot_throughput(rows, workloads, targets, results / "quality_throughput.png")
    written = ["quality_hit_rate.png", "quality_ttft.png", "quality_e2e.png", "quality_itl.png", "quality_throughput.png"]
    print("wrote " + ", ".join(str(results / name) for name in written))


if __name__ == "__main__":
    main()
