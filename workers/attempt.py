"""What one attempt at a job did that must outlive the attempt: the model calls it made
(their tokens were spent whatever became of the job) and the answer items the worker
rejected. The handler collects them on the job's AttemptLog; the runner writes them in
the transaction that ends the attempt (complete_job, fail_job or park_job), so a rolled
back attempt still counts its calls, and nothing is written twice."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Outcome = Literal["ok", "error", "timeout", "rate_limited", "parse_failure"]


@dataclass
class ModelCall:
    """One call to a model endpoint, with the usage it reported."""

    model: str
    operation: Literal["chat", "embeddings"]
    tokens_in: int
    tokens_out: int
    latency_ms: float
    outcome: Outcome


@dataclass
class UsageRecord:
    project: str | None
    episode: str | None
    call: ModelCall


@dataclass
class RejectionBatch:
    episode: str
    items: list[dict[str, Any]]
    meta: dict[str, Any]


@dataclass
class AttemptLog:
    usage: list[UsageRecord] = field(default_factory=list)
    rejections: list[RejectionBatch] = field(default_factory=list)

    def add_calls(self, project: str | None, episode: str | None, calls: list[ModelCall]) -> None:
        self.usage.extend(UsageRecord(project, episode, c) for c in calls)

    def add_rejections(
        self, episode: str, items: list[dict[str, Any]], meta: dict[str, Any]
    ) -> None:
        if items:
            self.rejections.append(RejectionBatch(episode, list(items), dict(meta)))

    def __bool__(self) -> bool:
        return bool(self.usage or self.rejections)

    def clear(self) -> None:
        self.usage.clear()
        self.rejections.clear()
