"""A claimed job, and the shape of the function that runs one."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

import psycopg

from workers.attempt import AttemptLog


@dataclass(frozen=True)
class Job:
    org_id: UUID
    job_id: int
    project_id: UUID | None
    kind: str
    payload: dict[str, Any]
    attempts: int
    max_attempts: int
    attempt: AttemptLog = field(default_factory=AttemptLog, compare=False, repr=False)
    """What this attempt did that outlives it (model calls, rejections): the runner
    writes it with the attempt's end."""

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Job:
        return cls(
            org_id=row["org_id"],
            job_id=row["job_id"],
            project_id=row["project_id"],
            kind=row["kind"],
            payload=row["payload"] or {},
            attempts=row["attempts"],
            max_attempts=row["max_attempts"],
        )

    def log_fields(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "kind": self.kind,
            "org_id": str(self.org_id),
            "attempt": self.attempts,
        }


# Runs inside the job's transaction, after memory.use_org(job.org_id); returns the
# result stored on the job. Raises workers.errors exceptions to retry, fail or park.
Handler = Callable[[psycopg.Connection[Any], Job], dict[str, Any]]
