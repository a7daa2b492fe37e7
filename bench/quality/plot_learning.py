"""Draws the learning benchmark (issue 14) from RESULTS_DIR/quality.json.

Usage: python plot_learning.py RESULTS_DIR   (e.g. bench/results/learning). Each workload is
drawn from one run: RESULTS_DIR's own quality.json first, then the current runs' subfolders
(CURRENT_RUNS: a-d/, and g/ and o/, which `make bench-ladders` writes). The dated and session
folders beside them keep earlier runs; draw one by giving its path as RESULTS_DIR.

Writes learning_ttft.png (TTFT p50, p90, p99 per target, one panel per workload: the workloads'
latencies differ by orders of magnitude) and learning_throughput.png (output tokens/s and
prefix-cache hit rate per workload and target), and, when a rate ladder ran (stages.json),
learning_ladder.png for g and learning_ladder_<workload>.png for any other ladder (output
tokens/s and TTFT p90 per stage against the stage's rate). Same colour per target in every chart;
wasm-epp-learning is the same build as wasm-epp with `learning.enabled`.
"""

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

TARGETS = [
    "wasm-epp-learning",
    "wasm-epp",
    "envoy-round-robin",
    "envoy-least-request",
    "vllm-router-cache-aware",
]
COLOURS = {
    "wasm-epp-learning": "#ff7f0e",
    "wasm-epp": "#d62728",
    "envoy-round-robin": "#7f7f7f",
    "envoy-least-request": "#1f77b4",
    "vllm-router-cache-aware": "#2ca02c",
}
# Where the current run of each workload group lives, in order of precedence. Reading every
# quality.json below RESULTS_DIR instead let an older run of the same workload overwrite the one
# the tables quote.
CURRENT_RUNS = [".", "a-d", "g", "o"]
PERCENTILES = [("ttft_p50_ms", "p50", ""), ("ttft_p90_ms", "p90", "//"), ("ttft_p99_ms", "p99", "..")]


def main(results_dir):
    by_key = {}
    drawn = set()  # workloads some earlier (higher-precedence) run already supplied
    for path in current_runs(results_dir, "quality.json"):
        data = json.loads(path.read_text())
        rows = data["rows"] if isinstance(data, dict) else data
        mine = {row["workload"] for row in rows} - drawn
        by_key.update({(row["workload"], row["target"]): row for row in rows if row["workload"] in mine})
        drawn |= mine
    workloads = sorted(drawn)
    targets = [t for t in TARGETS if any((w, t) in by_key for w in workloads)]

    columns = min(4, len(workloads))
    lines = (len(workloads) + columns - 1) // columns
    figure, axes = plt.subplots(lines, columns, figsize=(4.5 * columns, 4.2 * lines), squeeze=False)
    width = 0.8 / len(PERCENTILES)
    for index, workload in enumerate(workloads):
        axis = axes[index // columns][index % columns]
        present = [t for t in targets if (workload, t) in by_key]
        for p_index, (key, label, hatch) in enumerate(PERCENTILES):
            values = [by_key[(workload, t)].get(key) or 0.0 for t in present]
            positions = [i + (p_index - 1) * width for i in range(len(present))]
            axis.bar(positions, [v / 1000 for v in values], width, color=[COLOURS[t] for t in present],
                     hatch=hatch, edgecolor="black", linewidth=0.4, label=label)
        axis.set_title(workload)
        axis.set_xticks(range(len(present)))
        axis.set_xticklabels([t.replace("-", "\n", 1) for t in present], fontsize=7)
        axis.set_ylabel("TTFT (s): p50 plain, p90 //, p99 ..")
    for index in range(len(workloads), lines * columns):
        axes[index // columns][index % columns].axis("off")
    figure.tight_layout()
    figure.savefig(results_dir / "learning_ttft.png", dpi=120)

    figure, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    width = 0.8 / max(len(targets), 1)
    for t_index, target in enumerate(targets):
        positions = [w + (t_index - len(targets) / 2 + 0.5) * width for w in range(len(workloads))]
        throughput = [(by_key.get((w, target)) or {}).get("output_tokens_per_s") or 0.0 for w in workloads]
        hit_rate = [100 * ((by_key.get((w, target)) or {}).get("hit_rate") or 0.0) for w in workloads]
        axes[0].bar(positions, throughput, width, color=COLOURS[target], label=target)
        axes[1].bar(positions, hit_rate, width, color=COLOURS[target], label=target)
    for axis, title in zip(axes, ["output tokens/s", "prefix-cache hit rate (%)"]):
        axis.set_xticks(range(len(workloads)))
        axis.set_xticklabels(workloads, fontsize=8)
        axis.set_title(title)
    axes[0].legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(results_dir / "learning_throughput.png", dpi=120)
    plot_ladder(results_dir)


def current_runs(results_dir, name):
    """The files called `name` of the current runs, in CURRENT_RUNS order (see the module doc)."""
    paths = [results_dir / folder / name for folder in CURRENT_RUNS]
    return [path for path in paths if path.is_file()]


def plot_ladder(results_dir):
    """Per-stage figures of each rate ladder (workloads g and o): where the routers part.

    g's chart is learning_ladder.png, any other ladder's learning_ladder_<workload>.png. A
    ladder whose rates do not only climb (o opens with a warm-up) is drawn by stage, each
    stage labelled with its rate."""
    runs = [json.loads(path.read_text()) for path in current_runs(results_dir, "stages.json")]
    for workload in sorted({s["workload"] for run in runs for s in run}):
        # One run per ladder, the current one: two runs' lines for one target would read as two.
        rows = next(mine for mine in ([s for s in run if s["workload"] == workload] for run in runs) if mine)
        name = "learning_ladder.png" if workload == "g-ladder" else f"learning_ladder_{workload}.png"
        plot_one_ladder(workload, rows, results_dir / name)


def plot_one_ladder(workload, stages, path):
    figure, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    by_stage = {s["stage"]: s["rate_per_s"] for s in stages}
    rates = [by_stage[k] for k in sorted(by_stage)]
    climbing = all(a < b for a, b in zip(rates, rates[1:]))
    for target in [t for t in TARGETS if any(s["target"] == t for s in stages)]:
        mine = sorted((s for s in stages if s["target"] == target), key=lambda s: s["stage"])
        xs = [s["rate_per_s"] if climbing else s["stage"] for s in mine]
        axes[0].plot(xs, [s["output_tokens_per_s"] for s in mine], "o-", color=COLOURS[target], label=target)
        axes[1].plot(xs, [(s.get("ttft_p90_ms") or 0.0) / 1000 for s in mine], "o-", color=COLOURS[target],
                     label=target)
    axes[0].set_title(f"{workload}: output tokens/s per stage")
    axes[1].set_title(f"{workload}: TTFT p90 per stage (s, log)")
    axes[1].set_yscale("log")
    for axis in axes:
        if climbing:
            axis.set_xlabel("arrival rate (requests/s)")
        else:
            axis.set_xticks(sorted(by_stage))
            axis.set_xticklabels([f"{by_stage[k]:g}" for k in sorted(by_stage)], rotation=60, fontsize=7)
            axis.set_xlabel("stage, labelled with its arrival rate (requests/s), in order")
    axes[0].legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=120)


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "bench/results/learning"))
