"""Draws bench/results/flow-control/flow-control.json (workload j, issue 16) as PNG charts.

Usage: python plot_flow.py RESULTS_DIR   (reads RESULTS_DIR/flow-control.json, writes beside it)

- flow_ttft.png: TTFT p99 per class and target, against the idle pool's TTFT p99 (dashed) and
  1.5 x that (the goal for critical requests, dotted). Log scale: overload TTFTs differ by
  orders of magnitude.
- flow_sheddable.png: when sheddable requests got their answer (cumulative share over the
  answer time), per target, with the sheddable TTL marked: flow control answers 429 just
  after it; the peers serve them late.
- flow_fairness.png: tokens the two standard tenants completed while the overload lasted, per
  target, with Jain's index above each pair.
- flow_outcomes.png: answers per class (200, 429, 503, no answer) per target.

Needs matplotlib (`make bench` installs it into .venv).
"""

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

CLASSES = ["critical", "standard-a", "standard-b", "sheddable"]
COLOURS = {
    "wasm-epp-flow": "#1b9e77",
    "wasm-epp-flow-no-reserve": "#a6761d",
    "wasm-epp": "#7570b3",
    "envoy-round-robin": "#d95f02",
    "envoy-least-request": "#e7298a",
    "vllm-router-cache-aware": "#66a61e",
}


def colour(target):
    return COLOURS.get(target, "#666666")


def ttft_chart(doc, out):
    rows = doc["rows"]
    idle = doc["context"]["idle_ttft_p99_ms"]
    fig, ax = plt.subplots(figsize=(10, 5))
    width = 0.8 / max(len(rows), 1)
    for i, row in enumerate(rows):
        values = [next((c["ttft_p99_ms"] or 0) for c in row["classes"] if c["class"] == k) for k in CLASSES]
        xs = [x + i * width for x in range(len(CLASSES))]
        ax.bar(xs, values, width, label=row["target"], color=colour(row["target"]))
    ax.axhline(idle, color="black", linestyle="--", linewidth=1, label=f"idle TTFT p99 ({idle:.0f} ms)")
    ax.axhline(1.5 * idle, color="black", linestyle=":", linewidth=1, label="1.5 x idle (critical goal)")
    ax.set_xticks([x + 0.4 - width / 2 for x in range(len(CLASSES))])
    ax.set_xticklabels(CLASSES)
    ax.set_yscale("log")
    ax.set_ylabel("TTFT p99 of completed requests (ms, log)")
    ax.set_title("Workload j: TTFT p99 per class under 2x overload")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "flow_ttft.png", dpi=120)
    plt.close(fig)


def sheddable_chart(doc, out):
    ttl = doc["context"]["sheddable_ttl_ms"]
    fig, ax = plt.subplots(figsize=(9, 5))
    for target, requests in doc["sheddable_requests"].items():
        times = sorted(r["total_ms"] for r in requests if r["class"] == "sheddable")
        if not times:
            continue
        shares = [(i + 1) / len(times) for i in range(len(times))]
        ax.step(times, shares, where="post", label=target, color=colour(target))
    ax.axvline(ttl, color="black", linestyle="--", linewidth=1, label=f"sheddable TTL ({ttl} ms)")
    ax.set_xscale("log")
    ax.set_xlabel("time to the whole answer (ms, log): 429 with flow control, 200 otherwise")
    ax.set_ylabel("share of sheddable requests answered")
    ax.set_title("Workload j: sheddable requests, when they got an answer")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "flow_sheddable.png", dpi=120)
    plt.close(fig)


def fairness_chart(doc, out):
    rows = doc["rows"]
    fig, ax = plt.subplots(figsize=(9, 5))
    for i, row in enumerate(rows):
        a, b = row["tenant_tokens_in_window"]
        ax.bar(i - 0.2, a, 0.4, color=colour(row["target"]))
        ax.bar(i + 0.2, b, 0.4, color=colour(row["target"]), alpha=0.5, hatch="//")
        ax.text(i, max(a, b) * 1.02, f"Jain {row['tenant_jain']:.2f}", ha="center", fontsize=9)
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([r["target"] for r in rows], rotation=15, fontsize=8)
    ax.set_ylabel("tokens completed during the overload (A solid, B hatched)")
    ax.set_title("Workload j: standard tenants A and B (A sends 4x as many requests)")
    fig.tight_layout()
    fig.savefig(out / "flow_fairness.png", dpi=120)
    plt.close(fig)


def outcomes_chart(doc, out):
    rows = doc["rows"]
    fig, axes = plt.subplots(1, len(CLASSES), figsize=(14, 4.5), sharey=False)
    kinds = [("ok", "200", "#1b9e77"), ("rejected_429", "429", "#e6ab02"),
             ("unavailable_503", "503", "#7570b3"), ("failed", "no answer", "#d62728")]
    for ax, klass in zip(axes, CLASSES):
        bottoms = [0] * len(rows)
        for key, label, col in kinds:
            values = [next(c[key] for c in r["classes"] if c["class"] == klass) for r in rows]
            ax.bar(range(len(rows)), values, bottom=bottoms, color=col, label=label)
            bottoms = [b + v for b, v in zip(bottoms, values)]
        ax.set_title(klass)
        ax.set_xticks(range(len(rows)))
        ax.set_xticklabels([r["target"] for r in rows], rotation=60, fontsize=7, ha="right")
    axes[0].set_ylabel("requests")
    axes[-1].legend(fontsize=8)
    fig.suptitle("Workload j: how every request was answered")
    fig.tight_layout()
    fig.savefig(out / "flow_outcomes.png", dpi=120)
    plt.close(fig)


def main():
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "bench/results/flow-control")
    doc = json.loads((out / "flow-control.json").read_text())
    ttft_chart(doc, out)
    sheddable_chart(doc, out)
    fairness_chart(doc, out)
    outcomes_chart(doc, out)
    print(f"wrote flow_ttft.png, flow_sheddable.png, flow_fairness.png, flow_outcomes.png in {out}")


if __name__ == "__main__":
    main()
