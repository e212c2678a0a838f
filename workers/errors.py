"""How a job body tells the runner what became of a job.

No database driver is imported here: the job bodies raise these under PL/Python too.
Any other exception counts as retryable (the queue's max_attempts bounds it).
"""

from __future__ import annotations

from typing import Any


class JobError(Exception):
    retryable = True


class RetryableError(JobError):
    """Try again later (with the queue's backoff); dead after max_attempts."""


class PermanentError(JobError):
    """Retrying cannot help: the job goes dead at once, keeping this message."""

    retryable = False


class PartialFailure(RetryableError):
    """Part of the work failed and is worth retrying; the rest stands.

    The runner commits what was done together with the failed attempt (re-applying is
    idempotent), instead of rolling the whole attempt back. retryable=False: what was
    done stands, and the job goes dead at once (a webhook delivery refused with a 4xx,
    whose attempt is logged)."""

    def __init__(self, message: str, result: dict[str, Any], *, retryable: bool = True) -> None:
        super().__init__(message)
        self.result = result
        self.retryable = retryable


class ParkJob(Exception):
    """The job cannot run until the configuration changes (status 'waiting')."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
