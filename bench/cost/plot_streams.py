"""Draws the `streams` figures of bench/results/cost.json (`make bench-cost`) as one PNG.

Usage: python plot_streams.py COST_JSON OUT_PNG   (does nothing if COST_JSON has no
`streams_concurrent32` records).

Two panels per pool size (16 pods: one stream per pod and worker; 1 pod: 16): body chunks
copied into the VM per stream by the learning variants (counted by the plugin, so exact), and
Envoy CPU per stream of every variant (measured, ±10 % between batches), streams that asked
for `usage` in red, streams without it in blue. Needs matplotlib (`make bench` installs it).
"""

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

BENCHMARK = "streams_concurrent32"
VARIANTS = ["plain", "header-buffered-read", "wasm-epp", "wasm-epp-learning", "wasm-epp-learning-read-all"]
SHORT = {
    "plain": "plain", "header-buffered-read": "body\nreading", "wasm-epp": "wasm-epp",
    "wasm-epp-learning": "learning", "wasm-epp-learning-read-all": "learning\nread all",
}
KINDS = [("stream-usage", "#d62728", "include_usage"), ("stream-no-usage", "#1f77b4", "no usage")]


def figures(records):
    """{(kind, pods, variant, metric): value} of the streams benchmark."""
    out = {}
    for r in records:
        if r.get("benchmark") != BENCHMARK:
            continue
        parts = r["case"].split("/")
        if len(parts) != 4:
            continue
        kind, pods, variant, _size = parts
        out[(kind, pods, variant, r["metric"])] = r["value"]
    return out


def bars(axis, values, labels, title, unit):
    width = 0.38
    for k, (kind, colour, name) in enumerate(KINDS):
        xs = [i + (k - 0.5) * width for i in range(len(labels))]
        axis.bar(xs, values[kind], width, color=colour, label=name)
    axis.set_xticks(range(len(labels)))
    axis.set_xticklabels(labels, fontsize=8)
    axis.set_title(title, fontsize=9)
    axis.set_ylabel(unit, fontsize=8)
    axis.legend(fontsize=7)


def main(cost_json, out_png):
    records = json.loads(Path(cost_json).read_text())
    data = figures(records)
    pools = sorted({key[1] for key in data}, key=lambda p: -int(p.removesuffix("pods")))
    if not pools:
        print(f"no {BENCHMARK} records in {cost_json}: nothing drawn")
        return
    fig, axes = plt.subplots(len(pools), 2, figsize=(11, 3.6 * len(pools)), squeeze=False)
    learning = [v for v in VARIANTS if v.startswith("wasm-epp-learning")]
    for row, pods in enumerate(pools):
        pool = pods.replace("pods", " pod" if pods == "1pods" else " pods")
        chunks = {kind: [data.get((kind, pods, v, "chunks_read_per_stream"), 0) for v in learning] for kind, _, _ in KINDS}
        bars(axes[row][0], chunks, [SHORT[v] for v in learning], f"{pool}: chunks copied into the VM per stream (of 34)", "chunks")
        cpu = {kind: [data.get((kind, pods, v, "envoy_cpu_per_request"), 0) for v in VARIANTS] for kind, _, _ in KINDS}
        bars(axes[row][1], cpu, [SHORT[v] for v in VARIANTS], f"{pool}: Envoy CPU per stream", "µs")
    fig.suptitle("Streamed answers, 32 at once, 32 token events each (make bench-cost, streams)", fontsize=10)
    fig.tight_layout()
    fig.savefig(out_png, dpi=110)
    print(f"wrote {out_png}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
