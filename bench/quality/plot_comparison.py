"""Draws bench/results/comparison/comparison.json (the gateway's own A/B test against separate
full-pool runs) as one PNG.

Usage: python plot_comparison.py RESULTS_DIR   (reads RESULTS_DIR/comparison.json, writes
RESULTS_DIR/comparison.png)

One row of panels per workload:
- client TTFT p50 / p90 / p99 of the picker arm, the baseline arm, and the full-pool wasm-epp and
  envoy-least-request runs, with the gateway's own first-byte p50 / p90 (from its histogram)
  marked on the arms;
- the prefix-cache hit rate of each row's pods;
- each arm's first-byte distribution as the gateway's cumulative buckets saw it.

Needs matplotlib (`make bench` installs it into .venv).
"""

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

from plot_pd import by_workload  # noqa: E402  (rows grouped by workload, in order)

COLOURS = {
    ("wasm-epp-compared", "picker"): "#d62728",
    ("wasm-epp-compared", "baseline"): "#1f77b4",
    ("wasm-epp", None): "#ff9896",
    ("envoy-least-request", None): "#aec7e8",
}

SHORT_NAMES = {
    ("wasm-epp-compared", "picker"): "picker arm\n(A/B, 4 pods)",
    ("wasm-epp-compared", "baseline"): "baseline arm\n(A/B, 4 pods)",
    ("wasm-epp", None): "wasm-epp\n(full pool)",
    ("envoy-least-request", None): "Envoy least request\n(full pool)",
}


def key(row):
    return (row["target"], row.get("arm"))


def ttft(axis, rows, workload):
    xs = range(len(rows))
    colours = [COLOURS.get(key(r), "#333333") for r in rows]
    for offset, field, hatch, label in [(-0.27, "ttft_p50_ms", "", "p50"), (0.0, "ttft_p90_ms", "..", "p90"),
                                        (0.27, "ttft_p99_ms", "//", "p99")]:
        axis.bar([x + offset for x in xs], [r.get(field) or 0 for r in rows], 0.27, color=colours, hatch=hatch,
                 edgecolor="white", label=f"client {label}")
    for x, row in zip(xs, rows):
        gateway = row.get("gateway")
        if not gateway:
            continue
        for offset, field, marker in [(-0.27, "first_byte_p50_ms", "o"), (0.0, "first_byte_p90_ms", "^")]:
            if gateway.get(field) is not None:
                axis.plot(x + offset, gateway[field], marker=marker, color="black", markersize=6)
    axis.plot([], [], "o", color="black", label="gateway first byte p50 (histogram)")
    axis.plot([], [], "^", color="black", label="gateway first byte p90 (histogram)")
    axis.set_xticks(list(xs))
    axis.set_xticklabels([SHORT_NAMES.get(key(r), r["target"]) for r in rows], fontsize=7)
    axis.set_ylabel("ms")
    axis.set_title(f"{workload}: time to first token", fontsize=9)
    top = max([r.get("ttft_p99_ms") or 0 for r in rows] + [1])
    axis.set_ylim(0, top * 1.45)
    axis.legend(fontsize=6, loc="upper left", ncol=2)


def hit_rate(axis, rows, workload):
    labels = [SHORT_NAMES.get(key(r), r["target"]) for r in rows]
    colours = [COLOURS.get(key(r), "#333333") for r in rows]
    values = [100 * (r.get("hit_rate") or 0) for r in rows]
    axis.bar(labels, values, color=colours)
    for x, value in enumerate(values):
        axis.text(x, value + 1, f"{value:.1f}%", ha="center", fontsize=7)
    axis.set_ylim(0, 100)
    axis.set_ylabel("%")
    axis.set_title(f"{workload}: prefix-cache hit rate of the row's pods", fontsize=9)
    axis.tick_params(axis="x", labelsize=7)


def first_byte_cdf(axis, rows, bounds, workload):
    for row in rows:
        gateway = row.get("gateway")
        if not gateway or not gateway.get("first_byte_cumulative"):
            continue
        counts = gateway["first_byte_cumulative"]
        total = counts[-1] or 1
        finite = counts[: len(bounds)]
        axis.step(bounds, [100 * c / total for c in finite], where="post", marker="o", markersize=3,
                  color=COLOURS.get(key(row), "#333333"), label=f"{row['arm']} arm ({total:.0f} streams)")
    axis.set_xscale("log")
    axis.set_xlim(8, 2500)
    axis.set_ylim(0, 102)
    axis.set_xlabel("first byte within (ms, bucket bound)")
    axis.set_ylabel("% of streams")
    axis.set_title(f"{workload}: the gateway's first-byte buckets per arm", fontsize=9)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=7)


def main(results_dir):
    document = json.loads((Path(results_dir) / "comparison.json").read_text())
    groups = by_workload(document["rows"])
    bounds = document.get("bucket_bounds_ms", [])
    figure, axes = plt.subplots(len(groups), 3, figsize=(16, 4.5 * len(groups)), squeeze=False)
    for (workload, group), (ttft_axis, hit_axis, cdf_axis) in zip(groups, axes):
        ttft(ttft_axis, group, workload)
        hit_rate(hit_axis, group, workload)
        first_byte_cdf(cdf_axis, group, bounds, workload)
    for verdict in document.get("verdicts", []):
        print(f"{verdict['workload']}: arms {verdict['arms_ttft_p90_ratio']}, "
              f"full pool {verdict['full_pool_ttft_p90_ratio']}, same verdict {verdict['same_verdict']}")
    figure.tight_layout()
    figure.savefig(Path(results_dir) / "comparison.png", dpi=110)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "bench/results/comparison")
