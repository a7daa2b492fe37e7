"""Draws bench/results/faults/faults.json (pods that fail every request) as one PNG.

Usage: python plot_faults.py RESULTS_DIR   (reads RESULTS_DIR/faults.json, writes
RESULTS_DIR/faults.png)

One row of panels per scenario (workload and failing pods):
- the share of requests the client saw fail, per target;
- TTFT p90 of the successes, per target (with p50 as a thin bar inside).

Needs matplotlib (`make bench` installs it into .venv).
"""

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

COLOURS = {
    "wasm-epp": "#d62728",
    "wasm-epp-no-outliers": "#ff9896",
    "envoy-least-request": "#1f77b4",
    "envoy-round-robin": "#aec7e8",
    "vllm-router-power-of-two": "#2ca02c",
    "vllm-router-cache-aware": "#98df8a",
}

SHORT_NAMES = {
    "wasm-epp": "wasm-epp",
    "wasm-epp-no-outliers": "wasm-epp\nno outliers",
    "envoy-least-request": "Envoy\nleast request",
    "envoy-round-robin": "Envoy\nround robin",
    "vllm-router-power-of-two": "vllm-router\npower of two",
    "vllm-router-cache-aware": "vllm-router\ncache aware",
}


def by_scenario(rows):
    keys = []
    for row in rows:
        key = (row["workload"], row["scenario"])
        if key not in keys:
            keys.append(key)
    return [(key, [r for r in rows if (r["workload"], r["scenario"]) == key]) for key in keys]


def labels_and_colours(rows):
    return ([SHORT_NAMES.get(r["target"], r["target"]) for r in rows],
            [COLOURS.get(r["target"], "#333333") for r in rows])


def failed_share(axis, rows, title):
    labels, colours = labels_and_colours(rows)
    values = [100 * r["failed_share"] for r in rows]
    axis.bar(labels, values, color=colours)
    for x, (value, row) in enumerate(zip(values, rows)):
        axis.text(x, value + 1.5, f"{value:.1f}%\n({row['failed']}/{row['requests']})", ha="center", fontsize=7)
    axis.set_ylim(0, 115)
    axis.set_ylabel("% of requests")
    axis.set_title(f"{title}: requests the client saw fail", fontsize=9)
    axis.tick_params(axis="x", labelsize=7)


def ttft(axis, rows, title):
    labels, colours = labels_and_colours(rows)
    p90 = [r.get("ttft_p90_ms") or 0 for r in rows]
    p50 = [r.get("ttft_p50_ms") or 0 for r in rows]
    axis.bar(labels, p90, color=colours, label="p90")
    axis.bar(labels, p50, 0.25, color="black", alpha=0.6, label="p50")
    for x, (value, row) in enumerate(zip(p90, rows)):
        text = f"{value:.0f}" if row.get("ttft_p90_ms") is not None else "no success"
        axis.text(x, value * 1.02 + 1, text, ha="center", fontsize=7)
    axis.set_ylim(0, max(p90 + [1]) * 1.2)
    axis.set_ylabel("ms")
    axis.set_title(f"{title}: TTFT of the successes", fontsize=9)
    axis.tick_params(axis="x", labelsize=7)
    axis.legend(fontsize=7, loc="upper left")


def main(results_dir):
    document = json.loads((Path(results_dir) / "faults.json").read_text())
    groups = by_scenario(document["rows"])
    figure, axes = plt.subplots(len(groups), 2, figsize=(14, 4.2 * len(groups)), squeeze=False)
    for ((workload, scenario), group), (share_axis, ttft_axis) in zip(groups, axes):
        title = f"{workload}, {scenario}"
        failed_share(share_axis, group, title)
        ttft(ttft_axis, group, title)
    figure.suptitle(f"Pods answering {document.get('fail_status', 500)} to every request while their metrics look idle",
                    fontsize=10)
    figure.tight_layout()
    figure.savefig(Path(results_dir) / "faults.png", dpi=110)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "bench/results/faults")
