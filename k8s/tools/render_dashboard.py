#!/usr/bin/env python3
"""Draws the dashboard's panels (k8s/dashboards/wasm-epp.json) from a real run's Prometheus
range queries, written by tests/e2e/tests/dashboard.rs with DASHBOARD_SERIES set, so a reader
sees the dashboard without Grafana. `make dashboard-png` runs both.

Usage: render_dashboard.py SERIES.json DASHBOARD.json OUT.png
"""

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


# As tests/e2e/tests/dashboard.rs fills it in (its RATE_INTERVAL).
RATE_INTERVAL = "4s"


def legend_of(metric, fmt):
    """Grafana's legendFormat: {{label}} replaced by the series' label value."""
    text = fmt
    for name, value in metric.items():
        text = text.replace("{{" + name + "}}", value)
    return text if "{{" not in text else json.dumps(metric)


def main(series_path, dashboard_path, out_path):
    runs = json.load(open(series_path))
    dashboard = json.load(open(dashboard_path))
    legends = {}
    units = {}
    for panel in dashboard["panels"]:
        units[panel["title"]] = panel["fieldConfig"]["defaults"].get("unit", "")
        for target in panel["targets"]:
            expr = target["expr"].replace("$__rate_interval", RATE_INTERVAL)
            legends[(panel["title"], expr)] = target.get("legendFormat", "")
    titles = []
    for run in runs:
        if run["title"] not in titles:
            titles.append(run["title"])
    columns = 2
    rows = (len(titles) + columns - 1) // columns
    figure, axes = plt.subplots(rows, columns, figsize=(14, 3.2 * rows), squeeze=False)
    for index, title in enumerate(titles):
        axis = axes[index // columns][index % columns]
        start = None
        for run in (r for r in runs if r["title"] == title):
            for series in run["series"]:
                points = [(float(t), float(v)) for t, v in series["values"] if v not in ("NaN", "+Inf", "-Inf")]
                if not points:
                    continue
                start = points[0][0] if start is None else min(start, points[0][0])
                label = legend_of(series["metric"], legends.get((title, run["expr"]), ""))
                axis.plot([t for t, _ in points], [v for _, v in points], label=label, linewidth=1.4)
        if start is not None:
            ticks = axis.get_xticks()
            axis.set_xticks(ticks)
            axis.set_xticklabels([f"{t - start:.0f}s" for t in ticks], fontsize=7)
        axis.set_title(f"{title}  [{units.get(title, '')}]", fontsize=9)
        axis.tick_params(axis="y", labelsize=7)
        axis.grid(alpha=0.3)
        if axis.get_legend_handles_labels()[0]:
            axis.legend(fontsize=6, loc="upper left")
    for index in range(len(titles), rows * columns):
        axes[index // columns][index % columns].axis("off")
    figure.suptitle("wasm-epp dashboard: panels drawn from a real Prometheus during tests/e2e/tests/dashboard.rs", fontsize=11)
    figure.tight_layout(rect=(0, 0, 1, 0.98))
    figure.savefig(out_path, dpi=90)
    print(f"wrote {out_path}")


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2], sys.argv[3])
