"""The worker: claims jobs from memory.jobs and runs them, as the app role.

Threads, each with its own connection:
- N lanes: claim one job (memory_worker.claim_jobs, under a lease), run its handler in one
  transaction that starts with memory.use_org(job's org) and ends with
  memory_worker.complete_job, so the work and "done" commit together (a crash rolls both
  back; the lease then expires and another lane reclaims the job). With two lanes or
  more, lane 0 claims every kind but deliver_webhook: a delivery waits on a tenant's
  server for up to its deadline, and however many of them are slow, one lane is left
  for extraction, embeddings and the periodic jobs. How many deliveries of one org (and
  to one endpoint) run at once, across lanes and workers, memory_worker.claim_jobs decides,
  from the caps each lane's session carries (chronomem.webhook_max_in_flight_*);
- one control thread: LISTEN chronomem_jobs to wake the lanes (polling is only the
  fallback), and memory_worker.enqueue_due_jobs() for the periodic jobs;
- one heartbeat thread: renews the lease of every job a lane holds
  (memory_worker.extend_lease) every third of the lease, so a job that outlasts its lease (a
  slow model) is not reclaimed and run twice while a live lane still works on it.

Nothing here decides a rule about memory: it moves jobs between SQL functions.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import psycopg
from pgvector.psycopg import register_vector
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from chronomem.settings import WebhookSettings
from workers.errors import JobError, ParkJob, PartialFailure
from workers.jobs import Handler, Job

log = logging.getLogger("chronomem.worker")

CHANNEL = "chronomem_jobs"
DELIVERY = "deliver_webhook"
SCHEDULE_INTERVAL = 30.0  # seconds between memory_worker.enqueue_due_jobs() calls


class _LeaseLost(Exception):
    """complete/fail found the job no longer ours (its lease expired and another lane
    reclaimed it): this attempt's work is rolled back; the other lane's counts."""


def default_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def connect(dsn: str, name: str) -> psycopg.Connection[Any]:
    conn = psycopg.connect(dsn, autocommit=True, application_name=f"chronomem-worker {name}")
    register_vector(conn)
    return conn


class Worker:
    def __init__(
        self,
        dsn: str,
        handlers: Mapping[str, Handler],
        *,
        name: str | None = None,
        concurrency: int = 1,
        lease: float = 300.0,
        poll_interval: float = 5.0,
        schedule_interval: float = SCHEDULE_INTERVAL,
        webhook_settings: WebhookSettings | None = None,
    ) -> None:
        """webhook_settings: the in-flight caps the lanes' claims apply; None leaves
        memory_worker.claim_jobs' defaults (or the database's chronomem.webhook_* settings)."""
        self.dsn = dsn
        self.handlers = dict(handlers)
        self.kinds = sorted(self.handlers)
        self.name = name or default_name()
        self.concurrency = concurrency
        self.lease = timedelta(seconds=lease)
        self.poll_interval = poll_interval
        self.schedule_interval = schedule_interval
        self.webhook_settings = webhook_settings
        self._stop = threading.Event()
        self._wakes = [threading.Event() for _ in range(concurrency)]
        self._threads: list[threading.Thread] = []
        self._lanes: list[threading.Thread] = []
        self._held: dict[str, Job] = {}  # lane name -> the job it runs
        self._held_lock = threading.Lock()
        self.heartbeat = True
        # What the worker's readiness reports besides its name and kinds (workers/main.py:
        # the embedding model, loaded at start, and how long that took).
        self.readiness: dict[str, Any] = {}

    # -- lifecycle ---------------------------------------------------------------

    def start(self, *, until_idle: bool = False) -> None:
        """Start the lanes and the control thread. until_idle: a drain; each lane
        stops when it finds nothing to claim, and there is no control thread (periodic
        jobs are queued once, before the lanes start)."""
        self._stop.clear()  # a drained Worker can drain again
        self._lanes = [
            threading.Thread(target=self._lane, args=(i, until_idle), name=f"lane-{i}", daemon=True)
            for i in range(self.concurrency)
        ]
        self._threads = list(self._lanes)
        if self.heartbeat:
            beat = threading.Thread(target=self._heartbeat, name="heartbeat", daemon=True)
            self._threads.append(beat)
        if until_idle:
            with connect(self.dsn, f"{self.name}/control") as conn:
                conn.execute("select memory_worker.enqueue_due_jobs()")
        else:
            control = threading.Thread(target=self._control, name="control", daemon=True)
            self._threads.append(control)
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        """Stop claiming; lanes finish the job they are running, then exit."""
        self._stop.set()
        self._wake_all()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the lanes to exit; True if they all did."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for t in self._lanes:
            t.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        done = not any(t.is_alive() for t in self._lanes)
        if done:
            self._stop.set()
        return done

    def drain(self, timeout: float | None = None) -> bool:
        """Run until no job of our kinds is ready; True if that happened in time."""
        self.start(until_idle=True)
        done = self.wait(timeout)
        self.stop()
        return done

    def _wake_all(self) -> None:
        for wake in self._wakes:
            wake.set()

    # -- lanes -------------------------------------------------------------------

    def _lane(self, idx: int, until_idle: bool) -> None:
        worker = f"{self.name}/{idx}"  # locked_by: each lane holds its own leases
        wake = self._wakes[idx]
        conn: psycopg.Connection[Any] | None = None
        while not self._stop.is_set():
            try:
                if conn is None or conn.closed or conn.broken:
                    if conn is not None:
                        conn.close()
                    conn = connect(self.dsn, worker)
                    self._claim_settings(conn)
                wake.clear()  # before claiming: a NOTIFY from now on is not lost
                job = self._claim(conn, worker, self.lane_kinds(idx))
                if job is None:
                    if until_idle:
                        break
                    wake.wait(self.poll_interval)
                    continue
                with self._held_lock:
                    self._held[worker] = job
                try:
                    self.run_job(conn, worker, job)
                finally:
                    with self._held_lock:
                        self._held.pop(worker, None)
            except psycopg.OperationalError as err:
                # The connection is gone; a job it held is reclaimed after its lease.
                log.warning("database connection lost", extra={"lane": worker, "error": str(err)})
                if conn is not None:
                    conn.close()
                conn = None
                self._stop.wait(min(self.poll_interval, 5.0))
            except Exception:
                log.exception("lane failed; continuing", extra={"lane": worker})
                self._stop.wait(1.0)
        if conn is not None:
            conn.close()

    def lane_kinds(self, idx: int) -> list[str]:
        """The kinds lane idx claims: lane 0 of two or more takes no deliveries (unless
        this worker runs nothing else)."""
        others = [k for k in self.kinds if k != DELIVERY]
        if idx == 0 and self.concurrency >= 2 and others:
            return others
        return self.kinds

    def _claim_settings(self, conn: psycopg.Connection[Any]) -> None:
        ws = self.webhook_settings
        if ws is None:
            return
        conn.execute(
            "select set_config('chronomem.webhook_max_in_flight_per_org', %s, false), "
            "set_config('chronomem.webhook_max_in_flight_per_endpoint', %s, false)",
            (str(ws.max_in_flight_per_org), str(ws.max_in_flight_per_endpoint)),
        )

    def _claim(self, conn: psycopg.Connection[Any], worker: str, kinds: list[str]) -> Job | None:
        with conn.cursor(row_factory=dict_row) as cur:
            cur.execute(
                "select * from memory_worker.claim_jobs(%s, %s, 1, %s)", (worker, kinds, self.lease)
            )
            row = cur.fetchone()
        return None if row is None else Job.from_row(row)

    def run_job(self, conn: psycopg.Connection[Any], worker: str, job: Job) -> None:
        fields = {**job.log_fields(), "lane": worker}
        started = time.monotonic()
        handler = self.handlers[job.kind]
        try:
            with conn.transaction():
                conn.execute("select memory.use_org(%s)", (job.org_id,))
                try:
                    result = handler(conn, job)
                except PartialFailure as err:
                    # What applied stands, committed with the failed attempt (retried
                    # unless the error says it cannot help, e.g. a webhook's 4xx).
                    self._write_attempt(conn, job)
                    status = self._fail(conn, worker, job, str(err), retryable=err.retryable)
                    if status is None:
                        raise _LeaseLost from err
                    log.warning(
                        "job partly failed", extra={**fields, "status": status, "error": str(err)}
                    )
                    job.attempt.clear()
                    return
                self._write_attempt(conn, job)
                if not self._complete(conn, worker, job, result):
                    raise _LeaseLost
            job.attempt.clear()
            done = {**fields, "seconds": _since(started)}
            if len(json.dumps(result, default=str)) <= 500:  # the job row keeps it all anyway
                done["result"] = result
            log.info("job done", extra=done)
        except _LeaseLost:
            log.warning("lease lost; this attempt was rolled back", extra=fields)
            # Its model calls were made all the same: their usage counts (its
            # rejections do not: the lane that holds the job now records its own).
            job.attempt.rejections.clear()
            if job.attempt and not (conn.broken or conn.closed):
                with conn.transaction():
                    conn.execute("select memory.use_org(%s)", (job.org_id,))
                    self._write_attempt(conn, job)
            job.attempt.clear()
        except ParkJob as err:
            with conn.transaction():
                conn.execute("select memory.use_org(%s)", (job.org_id,))
                self._write_attempt(conn, job)
                row = conn.execute(
                    "select memory_worker.park_job(%s, %s, %s, %s)",
                    (job.org_id, job.job_id, worker, err.reason),
                ).fetchone()
            job.attempt.clear()
            if row and row[0]:
                log.warning("job waiting", extra={**fields, "reason": err.reason})
            else:
                log.warning("lease lost before the job could wait", extra=fields)
        except Exception as err:
            if conn.broken or conn.closed:
                raise  # connection gone: the lane reconnects, the lease returns the job
            retryable = _retryable(err)
            with conn.transaction():
                if job.attempt:
                    conn.execute("select memory.use_org(%s)", (job.org_id,))
                    self._write_attempt(conn, job)
                status = self._fail(conn, worker, job, f"{type(err).__name__}: {err}", retryable)
            job.attempt.clear()
            log.warning(
                "job failed",
                extra={**fields, "status": status, "retryable": retryable, "error": str(err)},
                # A traceback only for the unexpected: not for SQL or job errors.
                exc_info=not isinstance(err, (psycopg.Error, JobError)),
            )

    def _write_attempt(self, conn: psycopg.Connection[Any], job: Job) -> None:
        """The attempt's model calls and rejections, in the transaction that ends it
        (each in a savepoint: accounting that fails is logged, and the job's outcome
        still commits)."""
        for u in job.attempt.usage:
            c = u.call
            try:
                with conn.transaction():
                    conn.execute(
                        "select memory_worker.record_model_call("
                        "%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                        (
                            u.project or job.project_id,
                            job.kind,
                            job.job_id,
                            u.episode,
                            c.model,
                            c.operation,
                            c.tokens_in,
                            c.tokens_out,
                            c.latency_ms,
                            c.outcome,
                        ),
                    )
            except psycopg.Error as err:
                if conn.broken or conn.closed:
                    raise
                log.warning(
                    "model call not recorded", extra={**job.log_fields(), "error": str(err)}
                )
        for r in job.attempt.rejections:
            try:
                with conn.transaction():
                    conn.execute(
                        "select memory_worker.record_extraction_rejections(%s, %s, %s)",
                        (r.episode, Jsonb(r.items), Jsonb(r.meta)),
                    )
            except psycopg.Error as err:
                if conn.broken or conn.closed:
                    raise
                log.warning(
                    "rejections not recorded", extra={**job.log_fields(), "error": str(err)}
                )

    def _complete(
        self, conn: psycopg.Connection[Any], worker: str, job: Job, result: dict[str, Any]
    ) -> bool:
        row = conn.execute(
            "select memory_worker.complete_job(%s, %s, %s, %s)",
            (job.org_id, job.job_id, worker, Jsonb(result)),
        ).fetchone()
        return bool(row and row[0])

    def _fail(
        self, conn: psycopg.Connection[Any], worker: str, job: Job, error: str, retryable: bool
    ) -> str | None:
        row = conn.execute(
            "select memory_worker.fail_job(%s, %s, %s, %s, %s)",
            (job.org_id, job.job_id, worker, error, retryable),
        ).fetchone()
        return None if row is None else row[0]

    # -- heartbeat: lease renewal -------------------------------------------------

    def _heartbeat(self) -> None:
        """Renew held leases until every lane has exited (after stop(), lanes still
        finish the job in hand, and that job keeps its lease)."""
        interval = self.lease.total_seconds() / 3
        conn: psycopg.Connection[Any] | None = None
        next_beat = time.monotonic() + interval
        while any(t.is_alive() for t in self._lanes):
            time.sleep(min(0.2, interval))
            if time.monotonic() < next_beat:
                continue
            next_beat = time.monotonic() + interval
            with self._held_lock:
                held = list(self._held.items())
            if not held:
                continue
            try:
                if conn is None or conn.closed or conn.broken:
                    conn = connect(self.dsn, f"{self.name}/heartbeat")
                    # A lane that is committing holds the job's row: skip a beat, not wait.
                    conn.execute("set lock_timeout = '1s'")
                for worker, job in held:
                    row = conn.execute(
                        "select memory_worker.extend_lease(%s, %s, %s, %s)",
                        (job.org_id, job.job_id, worker, self.lease),
                    ).fetchone()
                    if not (row and row[0]):
                        log.debug("lease not renewed", extra={**job.log_fields(), "lane": worker})
            except psycopg.Error as err:
                log.warning("heartbeat failed", extra={"error": str(err)})
                if conn is not None and (conn.closed or conn.broken):
                    conn = None
        if conn is not None:
            conn.close()

    # -- control: wake-ups and periodic jobs -------------------------------------------

    def _control(self) -> None:
        next_schedule = 0.0
        while not self._stop.is_set():
            try:
                with connect(self.dsn, f"{self.name}/control") as conn:
                    conn.execute(f"listen {CHANNEL}")
                    self._wake_all()  # jobs may have come while we were not listening
                    while not self._stop.is_set():
                        if time.monotonic() >= next_schedule:
                            queued = conn.execute(
                                "select memory_worker.enqueue_due_jobs()"
                            ).fetchone()
                            if queued and queued[0]:
                                log.info("periodic jobs queued", extra={"count": queued[0]})
                            next_schedule = time.monotonic() + self.schedule_interval
                        for _ in conn.notifies(timeout=1.0, stop_after=1):
                            self._wake_all()
            except psycopg.OperationalError as err:
                log.warning("listener connection lost", extra={"error": str(err)})
                self._stop.wait(min(self.poll_interval, 5.0))
            except Exception:
                log.exception("control thread failed; restarting it")
                self._stop.wait(1.0)


def _since(started: float) -> float:
    return round(time.monotonic() - started, 3)


def _retryable(err: BaseException) -> bool:
    if isinstance(err, psycopg.errors.DataError):
        return False  # SQLSTATE class 22: the job's data is wrong, a retry repeats it
    return bool(getattr(err, "retryable", True))
