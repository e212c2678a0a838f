"""search.png: p50 and p95 latency per workload, for the large and a small project."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def plot(path: Path, result: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    latency: dict[str, dict[str, Any]] = result["latency_ms"]
    projects = list(latency)
    workloads = list(next(iter(latency.values())))
    series = [(p, q) for p in projects for q in ("p50", "p95")]
    width = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(12, 5))
    for i, (project, q) in enumerate(series):
        xs = [w + (i - (len(series) - 1) / 2) * width for w in range(len(workloads))]
        vals = [latency[project][w][q] for w in workloads]
        bars = ax.bar(xs, vals, width, label=f"{project} {q}", alpha=1.0 if q == "p95" else 0.6)
        ax.bar_label(bars, fmt="%.1f", padding=1, fontsize=6, rotation=90)
    ax.axhline(result["goal"]["all_legs_p95_ms_max_at_100k"], color="gray", linestyle="--",
               linewidth=0.8, label="20 ms (all-legs p95 goal at 100k facts)")  # fmt: skip
    ax.set_xticks(range(len(workloads)), [w.replace("_", "\n", 1) for w in workloads],
                  fontsize=7)  # fmt: skip
    ax.set_yscale("log")  # sub-millisecond reads and second-long searches on one chart
    ax.set_ylabel("latency, ms (client side, log scale)")
    d, s = result["data"], result["settings"]
    sizes = ", ".join(f"{p['name']} {p['fact_rows']}" for p in d["projects"][:2])
    ax.set_title(
        f"Search latency — {d['fact_rows']} fact rows in {s['projects']} projects ({sizes} "
        f"fact rows), {s['queries_per_workload']} queries per workload\n"
        f"PostgreSQL {s['postgres']['version']}, {s['machine']['cores']} cores, k={s['k']}",
        fontsize=9,
    )
    ax.legend(fontsize=7, ncol=5, loc="upper center", bbox_to_anchor=(0.5, -0.16), frameon=False)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
