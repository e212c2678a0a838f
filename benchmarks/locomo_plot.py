"""locomo.png: recall@10 per system, per category and overall (grouped bars)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

PRODUCT = ("fused", "vector", "fulltext")
EXPERIMENTS = (
    "fulltext_ts_rank_cd",
    "rrf_plain",
    "combsum_z_no_context",
    "context_plus_session_boost",
    "context_fused",
)
OBSERVATIONS = ("fused_episodes_and_facts",)


def _series(result: dict[str, Any]) -> list[tuple[str, list[float], bool]]:
    groups = ["overall", *result["by_category"]]

    def values(section: dict[str, Any], system: str) -> list[float]:
        rows = [section["overall"], *(section["by_category"].get(g, {}) for g in groups[1:])]
        return [row.get(system, {}).get("recall@10", 0.0) for row in rows]

    series = [(s, values(result, s), False) for s in PRODUCT]
    for key, names, label in (
        ("experiment", EXPERIMENTS, "experiment"),
        ("observations", OBSERVATIONS, "observation facts"),
    ):
        if key in result:
            series += [
                (f"{label}: {s}", values(result[key], s), True)
                for s in names
                if s in result[key]["overall"]
            ]
    return series


def plot(path: Path, result: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = ["overall", *result["by_category"]]
    series = _series(result)
    width = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(10, 5))
    for i, (name, vals, hatched) in enumerate(series):
        xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
        bars = ax.bar(
            xs,
            vals,
            width,
            label=name,
            hatch="//" if hatched else None,
            alpha=0.6 if hatched else 1.0,
        )
        ax.bar_label(bars, fmt="%.2f", padding=1, fontsize=7)
    ax.axhline(
        result["goal"]["fused_recall@10_min"],
        color="gray",
        linestyle="--",
        linewidth=0.8,
        label="goal for fused (0.80)",
    )
    counts = result["settings"]["questions"]
    per_cat = result["question_counts"]
    labels = [f"overall\n(n={counts})"] + [
        f"{g}\n(n={_n(result, g)})" if g in per_cat else g for g in groups[1:]
    ]
    ax.set_xticks(range(len(groups)), labels, fontsize=8)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("evidence recall@10 (top 10 episodes)")
    s = result["settings"]
    ax.set_title(
        f"LoCoMo evidence recall@10 — {s['conversations']} conversations, {s['episodes']} "
        f"episodes ({s['content_option']} content), {s['model']}, no LLM\n"
        "(hatched: experiments and LoCoMo's observations loaded as facts, not the product)",
        fontsize=9,
    )
    ax.legend(fontsize=7, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.14), frameon=False)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _n(result: dict[str, Any], group: str) -> int:
    return int(result["question_counts"].get(group, 0))
