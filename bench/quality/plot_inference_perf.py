"""Draws bench/results/inference-perf/inference-perf.json (issue 14's ladder, driven by
inference-perf) as one PNG chart.

Usage: python plot_inference_perf.py RESULTS_DIR   (writes RESULTS_DIR/inference_perf_ladder.png)

One line per target across the rate ladder: TTFT p90 (log scale, where saturation shows),
output tokens/s, and the cached share of prompt tokens the pods reported in `usage`.

Needs matplotlib (`make bench` installs it into .venv).
"""

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

COLOURS = {
    "wasm-epp-learning": "#9467bd",
    "wasm-epp": "#d62728",
    "envoy-round-robin": "#7f7f7f",
    "envoy-least-request": "#1f77b4",
    "vllm-router-cache-aware": "#2ca02c",
    "vllm-router-power-of-two": "#98df8a",
}

PANELS = [
    ("ttft_p90_ms", "TTFT p90 (ms, log)", True, 1.0),
    ("output_tokens_per_s", "output tokens/s", False, 1.0),
    ("usage_hit_rate", "cached share of prompt tokens (%)", False, 100.0),
]


def series(row, key, scale):
    """(rate, value) pairs of the stages that have the figure."""
    points = [(s["rate_per_s"], s.get(key)) for s in row["stages"]]
    return [(rate, value * scale) for rate, value in points if value is not None]


def main(results_dir):
    rows = json.loads((Path(results_dir) / "inference-perf.json").read_text())
    figure, axes = plt.subplots(1, len(PANELS), figsize=(15, 4.2))
    for axis, (key, title, log, scale) in zip(axes, PANELS):
        for row in rows:
            points = series(row, key, scale)
            if not points:
                continue
            axis.plot([p[0] for p in points], [p[1] for p in points], marker="o",
                      color=COLOURS.get(row["target"], "#333333"), label=row["target"])
        axis.set_xscale("log", base=2)
        rates = [s["rate_per_s"] for s in rows[0]["stages"]] if rows else []
        axis.set_xticks(rates)
        axis.set_xticklabels([f"{r:g}" for r in rates])
        if log:
            axis.set_yscale("log")
        axis.set_xlabel("offered rate (requests/s, Poisson)")
        axis.set_title(title, fontsize=10)
        axis.grid(True, alpha=0.3)
    axes[0].legend(fontsize=7)
    figure.suptitle("Issue 14's ladder through inference-perf: 50 shared prefixes, 4 pods", fontsize=11)
    figure.tight_layout()
    figure.savefig(Path(results_dir) / "inference_perf_ladder.png", dpi=110)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
