"""Webhooks end to end: SQL outbox -> a real `chronomem worker` process -> a receiver.

The receiver is a small HTTP server on 127.0.0.1 that records every request (headers,
body bytes, arrival time) and answers from a script per path (status codes, or a delay
longer than the worker's timeout). Every delivery it records is checked with the `svix`
library's verifier. One worker subprocess serves the whole module (started after other
tests' pending jobs are set aside, stopped at the end of the module); its timeout is 1 s
and it may deliver to loopback (CHRONOMEM_WEBHOOK_ALLOW_PRIVATE). Retries use the
queue's real backoff (2 s, then 4 s): the test of fresh timestamps needs attempts that
lie seconds apart.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import psycopg
import pytest
import worker_support
from psycopg.rows import dict_row
from scripted_openai import ScriptedOpenAI
from svix.webhooks import Webhook, WebhookVerificationError

from workers.jobs import Job
from workers.runner import Worker, connect
from workers.webhooks import (
    WebhookSettings,
    make_deliver_handler,
    refused_destination,
    retryable_status,
)

T1 = datetime(2024, 3, 1, 10, 0, tzinfo=UTC)
T2 = datetime(2024, 6, 1, 10, 0, tzinfo=UTC)
SECRET_RE = re.compile(r"^whsec_[A-Za-z0-9+/]{32}$")  # 24 bytes, base64, no padding


# -- the receiver ----------------------------------------------------------------------


@dataclass
class Delivery:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float
    status: int = 0  # what the receiver answered (0: it let the client time out)

    @property
    def event_id(self) -> str:
        return self.headers["webhook-id"]

    @property
    def json(self) -> dict[str, Any]:
        return json.loads(self.body)


@dataclass
class Receiver:
    server: ThreadingHTTPServer
    deliveries: list[Delivery] = field(default_factory=list)
    script: dict[str, list[int | float]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/{path}"

    def answer(self, path: str, *replies: int | float) -> None:
        """Replies for `path`, in order; the last one repeats (default 200). An int is a
        status code; a float is a delay in seconds before a 200 (past the timeout)."""
        with self.lock:
            self.script[path] = list(replies)

    def _next(self, path: str) -> int | float:
        with self.lock:
            queue = self.script.get(path) or [200]
            return queue.pop(0) if len(queue) > 1 else queue[0]

    def at(self, path: str) -> list[Delivery]:
        with self.lock:
            return [d for d in self.deliveries if d.path == path]

    def wait(self, path: str, n: int, timeout: float = 20) -> list[Delivery]:
        deadline = time.monotonic() + timeout
        while len(got := self.at(path)) < n:
            assert time.monotonic() < deadline, f"{path}: {len(got)} of {n} deliveries arrived"
            time.sleep(0.05)
        return got


def _handler(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            path = self.path.lstrip("/")
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
            delivery = Delivery(
                path, {k.lower(): v for k, v in self.headers.items()}, body, time.time()
            )
            with receiver.lock:
                receiver.deliveries.append(delivery)
            reply = receiver._next(path)
            if isinstance(reply, float):
                time.sleep(reply)
                reply = 200
            else:
                delivery.status = reply
            try:
                self.send_response(reply)
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"ok")
            except OSError:  # the worker gave up waiting
                pass

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    server.daemon_threads = True
    rec = Receiver(server)
    server.RequestHandlerClass = _handler(rec)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield rec
    server.shutdown()
    server.server_close()


# -- the worker ------------------------------------------------------------------------


def _cli() -> list[str]:
    script = Path(sys.executable).with_name("chronomem")
    return [str(script)] if script.exists() else [sys.executable, "-m", "chronomem"]


@pytest.fixture(scope="module")
def worker(app_dsn: str, admin_dsn: str) -> Iterator[subprocess.Popen[str]]:
    # Other tests' pending jobs are not this worker's business.
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(
            "update memory.jobs set status = 'done', locked_by = null, locked_until = null, "
            "finished_at = now() where status in ('queued', 'running', 'waiting')"
        )
        conn.execute("update memory.job_schedules set next_run_at = now() + interval '1 day'")
    with ScriptedOpenAI(dim=384).running() as llm:  # embeddings for the facts written
        env = {k: v for k, v in os.environ.items() if not k.startswith("CHRONOMEM_")} | {
            "CHRONOMEM_EMBEDDING_BASE_URL": llm.base_url,
            "CHRONOMEM_EMBEDDING_MODEL": "scripted-embed",
            "CHRONOMEM_WORKER_POLL_INTERVAL": "0.1",
            "CHRONOMEM_WORKER_CONCURRENCY": "2",
            "CHRONOMEM_WEBHOOK_TIMEOUT": "1",
            "CHRONOMEM_WEBHOOK_ALLOW_PRIVATE": "1",
        }
        proc = subprocess.Popen(
            [*_cli(), "worker", "--dsn", app_dsn],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            yield proc
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                _, stderr = proc.communicate(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                _, stderr = proc.communicate()
            assert proc.returncode == 0, stderr[-4000:]


# -- tenants ---------------------------------------------------------------------------


class Tenant(worker_support.Tenant):
    def webhook(self, url: str, types: list[str] | None = None) -> dict[str, Any]:
        created: dict[str, Any] = self.one(
            "select memory.create_webhook(%s, %s, %s)", (self.project, url, types)
        )
        return created

    def assert_facts(self, *facts: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self.one(
            "select memory.assert_facts(%s, %s::jsonb)",
            (self.project, json.dumps(list(facts), default=str)),
        )
        return result

    def jobs(self) -> list[dict[str, Any]]:
        return self.rows(
            "select * from memory.jobs where kind = 'deliver_webhook' and project_id = %s "
            "order by job_id",
            (self.project,),
        )

    def log(self, endpoint: str | None = None) -> list[dict[str, Any]]:
        rows = self.rows(
            "select * from memory.webhook_deliveries(%s, %s)", (self.project, endpoint)
        )
        return rows[::-1]  # oldest first

    def wait_jobs(self, done: Callable[[list[dict[str, Any]]], bool], timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while not done(jobs := self.jobs()):
            assert time.monotonic() < deadline, f"jobs did not get there: {jobs}"
            time.sleep(0.05)


def new_tenant(dsn: str, name: str = "webhook test") -> Tenant:
    tenant = Tenant.create(dsn, name)
    tenant.one("select memory.declare_predicate(%s, 'plan', 'one')", (tenant.project,))
    return tenant


@pytest.fixture
def tenant(app_dsn: str) -> Tenant:
    return new_tenant(app_dsn)


def plan(subject: str, value: str, at: datetime) -> dict[str, Any]:
    return {"subject": subject, "predicate": "plan", "object": value, "valid_from": at}


def supersede(t: Tenant, subject: str = "Alice") -> tuple[str, str]:
    """Two plans in a row: the second supersedes the first. Returns (old, new) ids."""
    first = t.assert_facts(plan(subject, "pro", T1))
    second = t.assert_facts(plan(subject, "enterprise", T2))
    assert first["superseded"] == 0 and second["superseded"] == 1
    pair = second["superseded_pairs"][0]
    return pair["old_fact_id"], pair["new_fact_id"]


def close_and_restore(t: Tenant, close_reason: str | None = None) -> tuple[str, str, str]:
    """A supersession (Alice's plan), a window closed with no newer fact (Bob's liking
    tea, closed at T2) and one given back (the newer plan retracted): the window events.
    Returns the ids (old plan, retracted plan, tea)."""
    old, new = supersede(t)  # pro from T1, enterprise from T2
    (tea,) = (
        r["fact_id"]
        for r in t.assert_facts(
            {"subject": "Bob", "predicate": "likes", "object": "tea", "valid_from": T1}
        )["results"]
    )
    t.one("select memory.close_fact(%s, %s, %s, %s)", (t.project, tea, T2, close_reason))
    t.one("select memory.retract_fact(%s, %s, 'wrong plan')", (t.project, new))
    return old, new, tea


def verify(secret: str, d: Delivery) -> None:
    """The svix library's verifier accepts the delivery (raises otherwise)."""
    Webhook(secret).verify(d.body, d.headers)


def path() -> str:
    return f"hook/{uuid.uuid4().hex[:12]}"


# -- delivery --------------------------------------------------------------------------


def test_supersession_delivers_one_signed_event(
    tenant: Tenant, receiver: Receiver, worker: Any
) -> None:
    p = path()
    hook = tenant.webhook(receiver.url(p), ["fact.superseded"])
    assert SECRET_RE.match(hook["secret"])
    old, new = supersede(tenant)

    (d,) = receiver.wait(p, 1)
    tenant.wait_jobs(lambda jobs: [j["status"] for j in jobs] == ["done"])
    verify(hook["secret"], d)
    # The signature, recomputed by hand: HMAC-SHA256 keyed with the decoded secret over
    # "{id}.{timestamp}.{body}", base64, "v1," in front.
    key = base64.b64decode(hook["secret"].removeprefix("whsec_"))
    signed = f"{d.event_id}.{d.headers['webhook-timestamp']}.".encode() + d.body
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    assert d.headers["webhook-signature"] == f"v1,{expected}"
    assert re.fullmatch(r"msg_[0-9a-f-]{36}", d.event_id)
    assert abs(int(d.headers["webhook-timestamp"]) - d.at) < 5  # fresh, in seconds
    assert d.headers["content-type"] == "application/json"

    body = d.json
    assert body == {
        "type": "fact.superseded",
        "old_fact_id": old,
        "new_fact_id": new,
        "triple": {"subject": "Alice", "predicate": "plan", "object": "pro"},
        "valid_until": "2024-06-01T10:00:00+00:00",  # where the old window now ends
        "project_id": str(tenant.project),
        "org_id": str(tenant.org),
        "at": body["at"],
    }
    assert datetime.fromisoformat(body["at"]).tzinfo is not None

    (job,) = tenant.jobs()  # exactly one event, one endpoint: one job
    assert job["payload"]["event_id"] == d.event_id and job["attempts"] == 1
    (entry,) = tenant.log()
    assert {k: entry[k] for k in ("event_id", "event_type", "attempt", "status_code")} == {
        "event_id": d.event_id,
        "event_type": "fact.superseded",
        "attempt": 1,
        "status_code": 200,
    }
    assert entry["outcome"] == "delivered" and entry["error"] is None
    assert entry["endpoint_id"] == uuid.UUID(hook["endpoint_id"])


def test_fails_twice_then_delivered_once_with_fresh_timestamps(
    tenant: Tenant, receiver: Receiver, worker: Any
) -> None:
    p = path()
    receiver.answer(p, 500, 503, 200)
    hook = tenant.webhook(receiver.url(p), ["fact.superseded"])
    supersede(tenant)

    attempts = receiver.wait(p, 3, timeout=30)  # backoff: 2 s, then 4 s
    tenant.wait_jobs(lambda jobs: [j["status"] for j in jobs] == ["done"])
    time.sleep(0.5)
    assert len(receiver.at(p)) == 3  # nothing after the 2xx
    assert [d.status for d in attempts] == [500, 503, 200]
    for d in attempts:
        verify(hook["secret"], d)
    # Same event id and the same bytes on every attempt; a new timestamp each time.
    assert len({d.event_id for d in attempts}) == 1
    assert len({d.body for d in attempts}) == 1
    stamps = [int(d.headers["webhook-timestamp"]) for d in attempts]
    assert stamps == sorted(stamps) and len(set(stamps)) == 3
    assert stamps[1] - stamps[0] >= 1 and stamps[2] - stamps[1] >= 3  # the backoff
    # Exactly one 2xx per webhook-id.
    ok = [d.event_id for d in receiver.at(p) if 200 <= d.status <= 299]
    assert ok == [attempts[0].event_id]

    (job,) = tenant.jobs()
    assert job["attempts"] == 3 and job["last_error"] is None
    log = tenant.log()
    assert [(e["attempt"], e["status_code"], e["outcome"]) for e in log] == [
        (1, 500, "retrying"),
        (2, 503, "retrying"),
        (3, 200, "delivered"),
    ]
    assert {e["event_id"] for e in log} == {attempts[0].event_id}


def test_4xx_is_not_retried(tenant: Tenant, receiver: Receiver, worker: Any) -> None:
    p = path()
    receiver.answer(p, 410)
    tenant.webhook(receiver.url(p), ["fact.superseded"])
    supersede(tenant)

    receiver.wait(p, 1)
    tenant.wait_jobs(lambda jobs: [j["status"] for j in jobs] == ["dead"])
    (job,) = tenant.jobs()
    assert job["attempts"] == 1 and "HTTP 410" in job["last_error"]
    (entry,) = tenant.log()
    assert (entry["status_code"], entry["outcome"], entry["error"]) == (410, "failed", "HTTP 410")
    time.sleep(2.5)  # past the first backoff: still one request
    assert len(receiver.at(p)) == 1


def test_timeouts_and_connection_errors_are_retried(
    tenant: Tenant, receiver: Receiver, worker: Any, admin_dsn: str
) -> None:
    slow = path()
    receiver.answer(slow, 1.5, 200)  # the first answer comes after the worker's 1 s
    tenant.webhook(receiver.url(slow), ["fact.superseded"])
    # A port nobody listens on: connection refused.
    with socket_closed_port() as port:
        refused = tenant.webhook(f"http://127.0.0.1:{port}/nobody", ["fact.superseded"])
        supersede(tenant)
        receiver.wait(slow, 2, timeout=20)
        tenant.wait_jobs(lambda jobs: sorted(j["status"] for j in jobs) == ["done", "queued"])

    log = tenant.log()
    by_endpoint = {
        e: [(x["attempt"], x["status_code"], x["outcome"]) for x in log if x["endpoint_id"] == e]
        for e in {x["endpoint_id"] for x in log}
    }
    refused_id = uuid.UUID(refused["endpoint_id"])
    assert by_endpoint.pop(refused_id)[0] == (1, None, "retrying")
    assert list(by_endpoint.values()) == [[(1, None, "retrying"), (2, 200, "delivered")]]
    errors = {x["endpoint_id"]: x["error"] for x in log if x["attempt"] == 1}
    assert "ConnectError" in errors[refused_id]
    assert any("timeout" in (e or "") for e in errors.values())
    # The refused delivery waits for its backoff, then reaches the URL it has now.
    fixed = path()
    tenant.one(
        "select memory.update_webhook(%s, %s, %s)",
        (tenant.project, refused["endpoint_id"], receiver.url(fixed)),
    )
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(
            "update memory.jobs set run_at = now() where org_id = %s and status = 'queued'",
            (tenant.org,),
        )
    receiver.wait(fixed, 1)


class socket_closed_port:
    """A loopback port that was just free (bound, then closed)."""

    def __enter__(self) -> int:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        pass


def test_assertion_retraction_contradiction_and_wipe_events(
    tenant: Tenant, receiver: Receiver, worker: Any
) -> None:
    p = path()
    hook = tenant.webhook(receiver.url(p))  # every event type
    facts = (
        {"subject": "Bob", "predicate": "lives_in", "object": "Oslo", "valid_from": T1},
        {"subject": "Bob", "predicate": "likes", "object": "tea", "valid_from": T1},
    )
    result = tenant.assert_facts(*facts)
    oslo, tea = (r["fact_id"] for r in result["results"])
    # An exact retry is skipped: no event, so no delivery (the two above are the control).
    assert tenant.assert_facts(*facts)["skipped"] == 2
    assert [j["payload"]["event_type"] for j in tenant.jobs()] == ["fact.asserted"] * 2
    tenant.one("select memory.retract_fact(%s, %s, 'wrong person')", (tenant.project, tea))
    tenant.one(
        "select memory.close_fact(%s, %s, %s, 'moved away', 'contradicted')",
        (tenant.project, oslo, T2),
    )
    receiver.wait(p, 4)  # two lanes: in either order
    tenant.wait_jobs(lambda jobs: all(j["status"] == "done" for j in jobs) and len(jobs) == 4)
    wiped = tenant.one("select memory.wipe(%s)", (tenant.project,))
    deliveries = receiver.wait(p, 5)
    for d in deliveries:
        verify(hook["secret"], d)
    assert deliveries[4].json["type"] == "memory.wiped"
    asserted = {d.json["fact_id"]: d.json for d in deliveries if d.json["type"] == "fact.asserted"}
    bodies = {d.json["type"]: d.json for d in deliveries}
    retracted, contradicted, wipe = (
        bodies[t] for t in ("fact.retracted", "fact.contradicted", "memory.wiped")
    )

    common = {"project_id": str(tenant.project), "org_id": str(tenant.org)}
    assert sorted(asserted) == sorted([oslo, tea])
    assert asserted[tea] == {
        "type": "fact.asserted",
        "fact_id": tea,
        "triple": {"subject": "Bob", "predicate": "likes", "object": "tea"},
        "content": "Bob likes tea",
        "valid_from": "2024-03-01T10:00:00+00:00",
        "valid_until": None,
        "at": asserted[tea]["at"],
        **common,
    }
    assert retracted == {
        "type": "fact.retracted",
        "fact_id": tea,
        "triple": {"subject": "Bob", "predicate": "likes", "object": "tea"},
        "reason": "wrong person",
        "at": retracted["at"],
        **common,
    }
    assert contradicted == {
        "type": "fact.contradicted",
        "fact_id": oslo,
        "triple": {"subject": "Bob", "predicate": "lives_in", "object": "Oslo"},
        "reason": "moved away",
        "valid_until": "2024-06-01T10:00:00+00:00",
        "at": contradicted["at"],
        **common,
    }
    assert wipe == {
        "type": "memory.wiped",
        "scope": "project",
        "counts": {k: v for k, v in wiped.items() if k != "scope"},
        "at": wipe["at"],
        **common,
    }
    assert "Bob" not in json.dumps(wipe)  # counts only
    assert len({d.event_id for d in deliveries}) == 5


def test_expiry_and_restoration_events(tenant: Tenant, receiver: Receiver, worker: Any) -> None:
    """A window closed without a newer fact (close_fact's default kind) and a window given
    back (the fact that had closed it retracted) reach a receiver that mirrors what holds.
    Control: the supersession and the retraction in between go only to their own types,
    which this endpoint does not take."""
    p = path()
    hook = tenant.webhook(receiver.url(p), ["fact.expired", "fact.restored"])
    old, new, tea = close_and_restore(tenant, "gave it up")
    deliveries = receiver.wait(p, 2)
    tenant.wait_jobs(lambda jobs: len(jobs) == 2 and all(j["status"] == "done" for j in jobs))
    for d in deliveries:
        verify(hook["secret"], d)
    bodies = {d.json["type"]: d.json for d in deliveries}
    common = {"project_id": str(tenant.project), "org_id": str(tenant.org)}
    assert bodies["fact.expired"] == {
        "type": "fact.expired",
        "fact_id": tea,
        "triple": {"subject": "Bob", "predicate": "likes", "object": "tea"},
        "reason": "gave it up",
        "valid_until": "2024-06-01T10:00:00+00:00",
        "at": bodies["fact.expired"]["at"],
        **common,
    }
    assert bodies["fact.restored"] == {
        "type": "fact.restored",
        "fact_id": old,
        "triple": {"subject": "Alice", "predicate": "plan", "object": "pro"},
        "reason": f"retraction of {new}",
        "valid_until": None,  # open again
        "at": bodies["fact.restored"]["at"],
        **common,
    }
    assert len(tenant.jobs()) == 2  # nothing queued for the types it does not take


def test_wipe_takes_undelivered_content_out_of_the_queue(
    tenant: Tenant, receiver: Receiver, worker: Any
) -> None:
    down, up = path(), path()
    receiver.answer(down, 500)
    tenant.webhook(receiver.url(down), ["fact.superseded"])
    hook = tenant.webhook(receiver.url(up), ["memory.wiped"])
    supersede(tenant, subject="Carol")
    receiver.wait(down, 1)
    # Failed once, now in its backoff.
    tenant.wait_jobs(lambda jobs: [(j["status"], j["attempts"]) for j in jobs] == [("queued", 1)])

    tenant.one("select memory.wipe(%s)", (tenant.project,))
    (wiped,) = receiver.wait(up, 1)
    verify(hook["secret"], wiped)
    jobs = tenant.jobs()
    superseded = [j for j in jobs if j["payload"]["event_type"] == "fact.superseded"]
    assert [j["status"] for j in superseded] == ["done"]
    assert superseded[0]["result"] == {"skipped": "wiped before delivery"}
    assert "body" not in superseded[0]["payload"]
    assert "Carol" not in json.dumps([j["payload"] for j in jobs], default=str)
    time.sleep(2.5)  # past the backoff: the wiped event is never sent again
    assert len(receiver.at(down)) == 1


def test_episode_enriched_through_enqueue_webhook_event(
    tenant: Tenant, receiver: Receiver, worker: Any, owner_dsn: str
) -> None:
    p = path()
    hook = tenant.webhook(receiver.url(p), ["episode.enriched"])
    episode = str(uuid.uuid4())
    with psycopg.connect(owner_dsn) as conn:  # as apply_extraction (security definer) would
        conn.execute("select memory.use_org(%s)", (tenant.org,))
        queued = conn.execute(
            "select memory_internal.enqueue_webhook_event(%s, %s, 'episode.enriched', %s::jsonb)",
            (tenant.org, tenant.project, json.dumps({"episode_id": episode})),
        ).fetchone()[0]  # type: ignore[index]
        nobody = conn.execute(  # no endpoint wants this type
            "select memory_internal.enqueue_webhook_event(%s, %s, 'memory.wiped')",
            (tenant.org, tenant.project),
        ).fetchone()[0]  # type: ignore[index]
        conn.commit()
        conn.execute("select memory.use_org(%s)", (tenant.org,))
        with pytest.raises(psycopg.errors.InvalidParameterValue):
            conn.execute(
                "select memory_internal.enqueue_webhook_event(%s, %s, 'fact.deleted')",
                (tenant.org, tenant.project),
            )
    assert (queued, nobody) == (1, 0)
    (d,) = receiver.wait(p, 1)
    verify(hook["secret"], d)
    assert d.json == {
        "type": "episode.enriched",
        "episode_id": episode,
        "project_id": str(tenant.project),
        "org_id": str(tenant.org),
        "at": d.json["at"],
    }


# -- outbox: who gets a job ------------------------------------------------------------


def test_no_endpoint_no_job(app_dsn: str, receiver: Receiver, worker: Any) -> None:
    # An org without any endpoint.
    lonely = new_tenant(app_dsn)
    supersede(lonely)
    assert lonely.jobs() == []
    # An org with an endpoint on another project, and one on this project that wants
    # other event types, and a disabled one: still no job for this project's supersession.
    t = new_tenant(app_dsn)
    other = Tenant(app_dsn, t.org, t.one("select memory.create_project(%s, 'other')", (t.org,)))
    other.webhook(receiver.url(path()), ["fact.superseded"])
    t.webhook(receiver.url(path()), ["memory.wiped", "fact.retracted"])
    off = t.webhook(receiver.url(path()), ["fact.superseded"])
    t.one(
        "select memory.update_webhook(%s, %s, p_enabled => false)", (t.project, off["endpoint_id"])
    )
    supersede(t)
    assert t.jobs() == []
    # Positive control: an enabled subscriber gets exactly one job per event.
    p = path()
    t.webhook(receiver.url(p), ["fact.superseded"])
    supersede(t, subject="Dan")
    assert [j["payload"]["event_type"] for j in t.jobs()] == ["fact.superseded"]
    receiver.wait(p, 1)


def test_every_type_subscription_gets_each_type(tenant: Tenant) -> None:
    """An endpoint subscribed to every type (no filter, or ["*"]) is queued every event,
    whichever type; one that names a type only that type's (the control), until it is
    updated to ["*"]."""
    url = "http://127.0.0.1:9/"
    default, star = tenant.webhook(url + "default"), tenant.webhook(url + "star", ["*"])
    narrow = tenant.webhook(url + "narrow", ["fact.expired"])
    close_and_restore(tenant)

    def queued(hook: dict[str, Any]) -> list[str]:
        return sorted(
            j["payload"]["event_type"]
            for j in tenant.jobs()
            if j["payload"]["endpoint_id"] == hook["endpoint_id"]
        )

    # Three new facts (two plans and the tea), then the window events.
    every = [*["fact.asserted"] * 3, "fact.expired", "fact.restored", "fact.retracted"]
    every.append("fact.superseded")
    assert queued(default) == queued(star) == every
    assert queued(narrow) == ["fact.expired"]
    updated = tenant.one(
        "select memory.update_webhook(%s, %s, p_event_types => %s)",
        (tenant.project, narrow["endpoint_id"], ["*"]),
    )
    assert updated["event_types"] == ["*"]
    tenant.one("select memory.wipe(%s)", (tenant.project,))
    assert [queued(h).count("memory.wiped") for h in (default, star, narrow)] == [1, 1, 1]


def test_one_event_two_endpoints_share_the_event_id(
    tenant: Tenant, receiver: Receiver, worker: Any
) -> None:
    a, b = path(), path()
    ha = tenant.webhook(receiver.url(a), ["fact.superseded"])
    hb = tenant.webhook(receiver.url(b), ["fact.superseded"])
    supersede(tenant)
    (da,), (db,) = receiver.wait(a, 1), receiver.wait(b, 1)
    verify(ha["secret"], da)
    verify(hb["secret"], db)
    assert da.event_id == db.event_id and da.body == db.body
    with pytest.raises(WebhookVerificationError):  # each endpoint signs with its own secret
        verify(hb["secret"], da)


def test_other_orgs_never_receive_or_see(app_dsn: str, receiver: Receiver, worker: Any) -> None:
    a, b = new_tenant(app_dsn, "org a"), new_tenant(app_dsn, "org b")
    pa, pb = path(), path()
    hook_a = a.webhook(receiver.url(pa), ["fact.superseded"])
    hook_b = b.webhook(receiver.url(pb), ["fact.superseded"])
    supersede(a)
    supersede(b)
    (da,), (db,) = receiver.wait(pa, 1), receiver.wait(pb, 1)
    time.sleep(0.3)
    assert len(receiver.at(pa)) == 1 and len(receiver.at(pb)) == 1
    assert da.json["org_id"] == str(a.org) and db.json["org_id"] == str(b.org)
    verify(hook_a["secret"], da)
    verify(hook_b["secret"], db)

    # Org B cannot reach org A's endpoint, project or log (not found, as if absent).
    endpoint_a = hook_a["endpoint_id"]
    for query, params in [
        ("select memory.rotate_webhook_secret(%s, %s)", (b.project, endpoint_a)),
        ("select memory.update_webhook(%s, %s, 'http://127.0.0.1/x')", (b.project, endpoint_a)),
        ("select memory.delete_webhook(%s, %s)", (b.project, endpoint_a)),
        ("select memory.rotate_webhook_secret(%s, %s)", (a.project, endpoint_a)),
        ("select * from memory.list_webhooks(%s)", (a.project,)),
        ("select * from memory.webhook_deliveries(%s)", (a.project,)),
        ("select memory.create_webhook(%s, 'http://127.0.0.1/x')", (a.project,)),
    ]:
        with pytest.raises(psycopg.errors.NoDataFound):
            b.rows(query, params)
    assert b.rows("select * from memory_worker.webhook_target(%s)", (endpoint_a,)) == []
    assert (
        b.rows("select * from memory.webhook_endpoints where endpoint_id = %s", (endpoint_a,)) == []
    )
    assert {r["org_id"] for r in b.rows("select org_id from memory.webhook_delivery_log")} == {
        b.org
    }
    # Positive controls: org A sees its own.
    assert [
        str(w["endpoint_id"])
        for w in a.rows("select * from memory.list_webhooks(%s)", (a.project,))
    ] == [endpoint_a]
    assert len(a.log()) == 1
    assert a.rows("select secret from memory_worker.webhook_target(%s)", (endpoint_a,)) == [
        {"secret": hook_a["secret"]}
    ]


# -- secrets ---------------------------------------------------------------------------


def test_rotation_signs_every_later_attempt_with_the_new_secret_only(
    tenant: Tenant, receiver: Receiver, worker: Any
) -> None:
    p = path()
    hook = tenant.webhook(receiver.url(p), ["fact.superseded"])
    old_secret = hook["secret"]
    supersede(tenant, subject="Eve")
    (first,) = receiver.wait(p, 1)
    verify(old_secret, first)

    # An event whose first attempt fails before the rotation and is retried after it.
    receiver.answer(p, 500, 200)
    supersede(tenant, subject="Frank")
    receiver.wait(p, 2)
    rotated = tenant.one(
        "select memory.rotate_webhook_secret(%s, %s)", (tenant.project, hook["endpoint_id"])
    )
    new_secret = rotated["secret"]
    assert SECRET_RE.match(new_secret) and new_secret != old_secret
    assert rotated["endpoint_id"] == hook["endpoint_id"]
    before, after = receiver.wait(p, 3, timeout=20)[1:]
    assert before.event_id == after.event_id and before.body == after.body
    verify(old_secret, before)
    verify(new_secret, after)
    with pytest.raises(WebhookVerificationError):
        verify(old_secret, after)
    with pytest.raises(WebhookVerificationError):
        verify(new_secret, first)


def test_secrets_are_shown_once_and_never_to_the_analyst(
    tenant: Tenant, receiver: Receiver, analyst_dsn: str
) -> None:
    hook = tenant.webhook(receiver.url(path()), ["fact.retracted", "fact.retracted"])
    assert hook["event_types"] == ["fact.retracted"]  # de-duplicated
    listed = tenant.rows("select * from memory.list_webhooks(%s)", (tenant.project,))
    assert [str(r["endpoint_id"]) for r in listed] == [hook["endpoint_id"]]
    assert "secret" not in listed[0]
    updated = tenant.one(
        "select memory.update_webhook(%s, %s, p_event_types => %s)",
        (tenant.project, hook["endpoint_id"], None),
    )
    assert "secret" not in updated and updated["event_types"] == ["fact.retracted"]
    assert hook["secret"] not in json.dumps(
        tenant.rows("select * from memory.webhook_endpoints"), default=str
    )
    with psycopg.connect(analyst_dsn) as conn:
        conn.execute("select memory.use_org(%s)", (tenant.org,))
        rows = conn.execute("select endpoint_id from memory.webhook_endpoints").fetchall()
        assert [str(r[0]) for r in rows] == [hook["endpoint_id"]]  # positive control
        conn.commit()
        for query in (
            "select * from memory_internal.webhook_secrets",
            f"select * from memory_worker.webhook_target('{hook['endpoint_id']}')",
            f"select memory.rotate_webhook_secret('{tenant.project}', '{hook['endpoint_id']}')",
            f"select memory.create_webhook('{tenant.project}', 'http://127.0.0.1/x')",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(query)
            conn.rollback()
        conn.execute("select memory.use_org(%s)", (tenant.org,))
        assert conn.execute(  # readers are granted
            "select count(*) from memory.list_webhooks(%s)", (tenant.project,)
        ).fetchone() == (1,)
    # The app role cannot read the secrets table directly either.
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        tenant.rows("select * from memory_internal.webhook_secrets")


def test_delete_stops_deliveries_and_hides_the_endpoint(tenant: Tenant, receiver: Receiver) -> None:
    hook = tenant.webhook(receiver.url(path()))
    deleted = tenant.one(
        "select memory.delete_webhook(%s, %s)", (tenant.project, hook["endpoint_id"])
    )
    assert deleted == {"endpoint_id": hook["endpoint_id"], "deleted": True}
    assert tenant.rows("select * from memory.list_webhooks(%s)", (tenant.project,)) == []
    assert tenant.rows(
        "select url, secret, enabled from memory_worker.webhook_target(%s)", (hook["endpoint_id"],)
    ) == [{"url": hook["url"], "secret": None, "enabled": False}]
    for query in (
        "select memory.delete_webhook(%s, %s)",
        "select memory.rotate_webhook_secret(%s, %s)",
        "select memory.update_webhook(%s, %s, p_enabled => true)",
    ):
        with pytest.raises(psycopg.errors.NoDataFound):
            tenant.one(query, (tenant.project, hook["endpoint_id"]))
    supersede(tenant)
    assert tenant.jobs() == []


# -- input -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "types", "column"),
    [
        ("ftp://example.com/hook", None, "url"),
        ("example.com/hook", None, "url"),
        ("https://", None, "url"),
        ("https://exa mple.com/", None, "url"),
        ("", None, "url"),
        (None, None, "url"),
        ("https://example.com/" + "x" * 2100, None, "url"),
        ("https://example.com/hook", [], "event_types"),
        ("https://example.com/hook", ["fact.deleted"], "event_types"),
        ("https://example.com/hook", ["fact.superseded", None], "event_types"),
        ("https://example.com/hook", ["*", "memory.wiped"], "event_types"),
    ],
)
def test_bad_input_names_the_field(
    tenant: Tenant, url: str | None, types: list[str | None] | None, column: str
) -> None:
    with pytest.raises(psycopg.errors.InvalidParameterValue) as err:
        tenant.one("select memory.create_webhook(%s, %s, %s)", (tenant.project, url, types))
    assert err.value.diag.column_name == column


def test_good_urls_and_event_types(tenant: Tenant) -> None:
    for url in (
        "https://example.com",
        "HTTPS://Example.com:8443/hooks/x?y=1#z",
        "http://user:pw@[::1]:8080/h",
        "http://127.0.0.1:9/h",
    ):
        assert tenant.webhook(url)["url"] == url
    types = tenant.rows("select event_type from memory.webhook_event_types()")
    assert [t["event_type"] for t in types] == [
        "fact.asserted",
        "fact.superseded",
        "fact.retracted",
        "fact.contradicted",
        "fact.expired",
        "fact.restored",
        "fact.reviewed",
        "conflict.detected",
        "conflict.resolved",
        "predicate.declared",
        "episode.enriched",
        "memory.wiped",
    ]
    # No filter is every type, now and later: stored as the wildcard, as is ["*"].
    assert tenant.webhook("https://example.com")["event_types"] == ["*"]
    assert tenant.webhook("https://example.com", ["*", "*"])["event_types"] == ["*"]


# -- the worker's own rules -----------------------------------------------------------


def test_non_public_destination_is_refused_by_default(
    tenant: Tenant, receiver: Receiver, admin_dsn: str, app_dsn: str
) -> None:
    """A worker with default settings does not POST to loopback: the attempt is logged
    as failed and the job is dead. (Run in-process on a job held back from the module's
    worker, which may deliver to loopback.)"""
    p = path()
    with psycopg.connect(admin_dsn) as conn:
        conn.execute("select memory.use_org(%s)", (tenant.org,))
        conn.execute(
            "select memory.create_webhook(%s, %s, array['fact.superseded'])",
            (tenant.project, receiver.url(p)),
        )
        for value, at in (("pro", T1), ("enterprise", T2)):
            conn.execute(
                "select memory.assert_facts(%s, %s::jsonb)",
                (tenant.project, json.dumps([plan("Gina", value, at)], default=str)),
            )
        conn.execute(  # not for the module's worker
            "update memory.jobs set run_at = now() + interval '1 hour' "
            "where org_id = %s and kind = 'deliver_webhook'",
            (tenant.org,),
        )
    with psycopg.connect(admin_dsn, row_factory=dict_row) as conn:
        row = conn.execute(
            "update memory.jobs set status = 'running', attempts = 1, locked_by = 'test', "
            "locked_until = now() + interval '1 minute' "
            "where org_id = %s and kind = 'deliver_webhook' returning *",
            (tenant.org,),
        ).fetchone()
    assert row is not None
    worker = Worker(app_dsn, {"deliver_webhook": make_deliver_handler(WebhookSettings())})
    with connect(app_dsn, "test") as conn:
        worker.run_job(conn, "test", Job.from_row(row))

    (job,) = tenant.jobs()
    assert job["status"] == "dead" and "not a public address" in job["last_error"]
    (entry,) = tenant.log()
    assert (entry["status_code"], entry["outcome"]) == (None, "failed")
    assert "127.0.0.1" in entry["error"] and "CHRONOMEM_WEBHOOK_ALLOW_PRIVATE" in entry["error"]
    assert receiver.at(p) == []


def test_destination_and_status_rules() -> None:
    assert refused_destination("http://127.0.0.1:8080/h")
    assert refused_destination("http://[::1]/h")
    assert refused_destination("http://169.254.169.254/latest/meta-data")
    assert refused_destination("http://10.0.0.7/h")
    assert refused_destination("http://localhost/h")
    assert refused_destination("https://93.184.215.14/h") is None  # a public address
    assert [retryable_status(s) for s in (500, 502, 503, 408, 429, 400, 401, 404, 410, 301)] == [
        *[True] * 5,
        *[False] * 5,
    ]
    assert WebhookSettings.from_env({}) == WebhookSettings(timeout=10.0, allow_private=False)
    assert WebhookSettings.from_env(
        {"CHRONOMEM_WEBHOOK_TIMEOUT": "2.5", "CHRONOMEM_WEBHOOK_ALLOW_PRIVATE": "yes"}
    ) == WebhookSettings(timeout=2.5, allow_private=True)
