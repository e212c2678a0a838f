"""Webhook delivery that one tenant cannot turn against the others.

- every attempt has one total deadline (connect, TLS, request, the answer's headers): a
  receiver that trickles its answer one byte a second is cut at the deadline;
- the claim (memory_worker.claim_jobs) caps the deliveries in flight per org and per endpoint,
  under a per-org lock, and the rest wait in the queue;
- with two lanes or more, one lane never takes deliveries, so an org's slow endpoints
  cannot hold every lane while another org's extraction or embedding waits;
- the destination is resolved once, every address checked, and the connection goes to
  the checked address (the resolver is injected: no network, no /etc/hosts);
- disabling an endpoint drops its queued deliveries (re-enabling does not send them).

Workers run in-process (workers.runner.Worker, real threads and connections, as the app
role) against real loopback receivers. Other tests' pending jobs are set aside first.
"""

from __future__ import annotations

import json
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import openai
import org_scope
import psycopg
import pytest
from psycopg.rows import dict_row
from scripted_openai import ScriptedOpenAI

from chronomem.settings import SettingsError
from workers.embedding import OpenAIEmbedder
from workers.handlers import build_handlers
from workers.jobs import Job
from workers.runner import Worker, connect
from workers.webhooks import (
    Undeliverable,
    WebhookSettings,
    make_deliver_handler,
    post_within_deadline,
)

T1 = datetime(2024, 3, 1, 10, 0, tzinfo=UTC)
T2 = datetime(2024, 6, 1, 10, 0, tzinfo=UTC)


# -- the receiver ----------------------------------------------------------------------


@dataclass
class Receiver:
    """Records each POST (path, headers, arrival) and counts requests in flight per path
    and per group (the path up to its first '-'). A path starting with 'trickle' answers
    one byte a second (for 20 s at most); 'slow' sleeps `slow` seconds before its 200."""

    server: ThreadingHTTPServer
    slow: float = 0.6
    requests: list[tuple[str, dict[str, str], float]] = field(default_factory=list)
    in_flight: Counter[str] = field(default_factory=Counter)
    peak: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}/{path}"

    def at(self, path: str) -> list[tuple[str, dict[str, str], float]]:
        with self.lock:
            return [r for r in self.requests if r[0] == path]

    def wait(self, ok: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not ok():
            assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
            time.sleep(0.02)


def _handler(rec: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            path = self.path.lstrip("/")
            self.rfile.read(int(self.headers.get("content-length", 0)))
            keys = (path, "group:" + path.split("-")[0])
            with rec.lock:
                rec.requests.append((path, {k.lower(): v for k, v in self.headers.items()}, 0))
                for k in keys:
                    rec.in_flight[k] += 1
                    rec.peak[k] = max(rec.peak[k], rec.in_flight[k])
            try:
                if path.startswith("trickle"):
                    for byte in b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"[:20]:
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                        time.sleep(1.0)
                    self.close_connection = True
                    return
                if path.startswith("slow"):
                    time.sleep(rec.slow)
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()
            except OSError:  # the worker gave up
                pass
            finally:
                with rec.lock:
                    for k in keys:
                        rec.in_flight[k] -= 1

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@pytest.fixture
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


# -- tenants and workers ---------------------------------------------------------------


class Tenant(org_scope.Tenant):
    def webhook(self, url: str) -> str:
        created = self.one(
            "select memory.create_webhook(%s, %s, array['fact.superseded'])", (self.project, url)
        )
        return str(created["endpoint_id"])

    def supersede(self, subject: str) -> None:
        for value, at in (("pro", T1), ("enterprise", T2)):
            fact = {"subject": subject, "predicate": "plan", "object": value, "valid_from": at}
            self.one(
                "select memory.assert_facts(%s, %s::jsonb)",
                (self.project, json.dumps([fact], default=str)),
            )

    def jobs(self, kind: str = "deliver_webhook") -> list[dict[str, Any]]:
        return self.rows(
            "select * from memory.jobs where org_id = %s and kind = %s order by job_id",
            (self.org, kind),
        )

    def log(self) -> list[dict[str, Any]]:
        return self.rows("select * from memory.webhook_deliveries(%s)", (self.project,))[::-1]


def new_tenant(dsn: str) -> Tenant:
    with psycopg.connect(dsn) as conn:
        org = conn.execute("select memory.create_org('fairness test')").fetchone()[0]  # type: ignore[index]
        conn.execute("select memory.use_org(%s)", (org,))
        project = conn.execute(  # type: ignore[index]
            "select memory.create_project(%s, 'p')", (org,)
        ).fetchone()[0]
        conn.execute("select memory.declare_predicate(%s, 'plan', 'one')", (project,))
    return Tenant(dsn, org, project)


@pytest.fixture
def quiet(admin_dsn: str) -> None:
    """Other tests' pending jobs set aside (done), their schedules postponed."""
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(
            "update memory.jobs set status = 'done', locked_by = null, locked_until = null, "
            "finished_at = now() where status in ('queued', 'running', 'waiting')"
        )
        conn.execute("update memory.job_schedules set next_run_at = now() + interval '1 day'")


@pytest.fixture
def llm() -> Iterator[ScriptedOpenAI]:
    with ScriptedOpenAI(dim=384).running() as server:
        yield server


def every_kind_worker(
    dsn: str, llm: ScriptedOpenAI, settings: WebhookSettings, concurrency: int
) -> Worker:
    """A worker for every kind (no LLM: enrich jobs wait), embeddings from `llm`."""
    client = openai.OpenAI(base_url=llm.base_url, api_key="test", max_retries=0, timeout=20)
    embedder = OpenAIEmbedder(client, "scripted-embed", llm.dim)
    handlers = build_handlers(None, embedder, 0.5, webhooks=settings)
    return Worker(dsn, handlers, concurrency=concurrency, lease=30, poll_interval=0.1)


@pytest.fixture
def running() -> Iterator[Callable[[Worker], Worker]]:
    """Start a worker; stopped (without waiting for a stuck lane) at the end."""
    started: list[Worker] = []

    def start(worker: Worker) -> Worker:
        worker.start()
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()
    for worker in started:
        worker.wait(timeout=25)


LOOPBACK = WebhookSettings(timeout=2.0, allow_private=True)


# -- the attempt's deadline ------------------------------------------------------------


def test_a_trickling_receiver_is_cut_at_the_attempt_deadline(
    app_dsn: str, receiver: Receiver, quiet: None, running: Callable[[Worker], Worker]
) -> None:
    """One byte a second never trips a per-read timeout; the attempt's deadline (2 s)
    ends it in about 2 s, logged as a failed attempt that is retried."""
    t = new_tenant(app_dsn)
    t.webhook(receiver.url("trickle"))
    t.supersede("Alice")
    handlers = {"deliver_webhook": make_deliver_handler(LOOPBACK)}
    started = time.monotonic()
    running(Worker(app_dsn, handlers, concurrency=1, lease=30, poll_interval=0.1))
    receiver.wait(lambda: bool(t.log()), 8, "the attempt to end")
    elapsed = time.monotonic() - started
    (entry,) = t.log()[:1]
    assert entry["status_code"] is None and entry["outcome"] == "retrying"
    assert "deadline of 2 s" in entry["error"]
    assert 1800 <= entry["duration_ms"] <= 3500, entry
    assert elapsed < 6
    assert len(receiver.at("trickle")) >= 1  # it did reach the receiver


def test_slow_endpoints_of_one_org_leave_a_lane_for_other_orgs(
    app_dsn: str,
    receiver: Receiver,
    llm: ScriptedOpenAI,
    quiet: None,
    running: Callable[[Worker], Worker],
) -> None:
    """Org A's three trickling endpoints hold what lanes they may (not the reserved one);
    org B's embedding job, queued while they are in flight, runs at once."""
    a, b = new_tenant(app_dsn), new_tenant(app_dsn)
    for i in range(3):
        a.webhook(receiver.url(f"trickleA-{i}"))
    a.supersede("Alice")
    worker = every_kind_worker(
        app_dsn, llm, WebhookSettings(timeout=6.0, allow_private=True), concurrency=3
    )
    running(worker)
    receiver.wait(lambda: receiver.in_flight["group:trickleA"] >= 2, 5, "A's deliveries in flight")
    queued = time.monotonic()
    b.supersede("Bob")  # queues B's embed jobs (B has no endpoint)
    receiver.wait(
        lambda: len(b.jobs("embed")) >= 2 and all(j["status"] == "done" for j in b.jobs("embed")),
        2.5,
        "B's embeddings while A's deliveries are in flight",
    )
    assert time.monotonic() - queued < 2.5
    assert receiver.in_flight["group:trickleA"] == 2  # still in flight
    assert receiver.peak["group:trickleA"] == 2  # two lanes took them; the third never does


# -- caps per org and per endpoint -----------------------------------------------------


def test_in_flight_caps_per_org_and_per_endpoint(
    app_dsn: str, receiver: Receiver, quiet: None, running: Callable[[Worker], Worker]
) -> None:
    """Caps: 3 per org, 1 per endpoint, on 5 lanes. Org A's four endpoints get two events
    each, org B's one endpoint two: at most one request per endpoint and three of A's at
    once, as the receiver counts them, and every delivery arrives (waiting, not dropped).
    Control: A does reach three at once and B runs beside it."""
    a, b = new_tenant(app_dsn), new_tenant(app_dsn)
    for i in range(4):
        a.webhook(receiver.url(f"slowa-{i}"))
    b.webhook(receiver.url("slowb-0"))
    for t in (a, b):
        t.supersede("Alice")
        t.supersede("Carol")
    settings = WebhookSettings(
        timeout=5.0, allow_private=True, max_in_flight_per_org=3, max_in_flight_per_endpoint=1
    )
    handlers = {"deliver_webhook": make_deliver_handler(settings)}
    running(
        Worker(
            app_dsn,
            handlers,
            concurrency=5,
            lease=30,
            poll_interval=0.05,
            webhook_settings=settings,
        )
    )
    receiver.wait(lambda: len(receiver.requests) >= 10, 15, "every delivery")
    receiver.wait(
        lambda: all(j["status"] == "done" for t in (a, b) for j in t.jobs()), 5, "jobs done"
    )
    paths = [f"slowa-{i}" for i in range(4)] + ["slowb-0"]
    assert {p: len(receiver.at(p)) for p in paths} == dict.fromkeys(paths, 2)
    assert {p: receiver.peak[p] for p in paths} == dict.fromkeys(paths, 1)
    assert receiver.peak["group:slowa"] == 3
    assert receiver.peak["group:slowb"] == 1


def test_caps_are_checked_in_the_claim(
    app_dsn: str, admin_dsn: str, receiver: Receiver, quiet: None
) -> None:
    """claim_jobs itself refuses a delivery past a cap (the worker's settings reach it as
    the session's chronomem.webhook_* settings); the job stays queued and is claimed once
    the in-flight one is done."""
    t = new_tenant(app_dsn)
    endpoint = t.webhook(receiver.url("claim"))
    t.supersede("Alice")
    t.supersede("Carol")
    with psycopg.connect(app_dsn, autocommit=True) as conn:
        conn.execute("set chronomem.webhook_max_in_flight_per_endpoint = 1")

        def claim() -> list[int]:
            rows = conn.execute(
                "select job_id from memory_worker.claim_jobs('cap', array['deliver_webhook'], 10)"
            ).fetchall()
            return [r[0] for r in rows]

        first = claim()
        assert len(first) == 1
        assert claim() == []  # the endpoint's one delivery is in flight
        (queued,) = [j for j in t.jobs() if j["status"] == "queued"]
        conn.execute("select memory_worker.complete_job(%s, %s, 'cap')", (t.org, first[0]))
        assert claim() == [queued["job_id"]]
        conn.execute("reset chronomem.webhook_max_in_flight_per_endpoint")
    assert {j["payload"]["endpoint_id"] for j in t.jobs()} == {endpoint}


# -- one resolution, checked, and the connection to it ------------------------------------


class FakeDNS:
    """getaddrinfo for names the test owns: each answer list is used in turn (the last
    repeats); a name without answers does not resolve."""

    def __init__(self, answers: dict[str, list[list[str]]]) -> None:
        self.answers = answers
        self.calls: list[str] = []

    def __call__(self, host: str, port: Any, *args: Any, **kwargs: Any) -> list[Any]:
        self.calls.append(host)
        turns = self.answers.get(host)
        if not turns:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        addresses = turns.pop(0) if len(turns) > 1 else turns[0]
        return [
            (
                socket.AF_INET6 if ":" in a else socket.AF_INET,
                socket.SOCK_STREAM,
                socket.IPPROTO_TCP,
                "",
                (a, int(port or 0)),
            )
            for a in addresses
        ]


def deliver_once(
    t: Tenant, admin_dsn: str, app_dsn: str, settings: WebhookSettings, dns: FakeDNS
) -> dict[str, Any]:
    """Run the tenant's one queued delivery in-process with the fake resolver; the job."""
    with psycopg.connect(admin_dsn, row_factory=dict_row) as conn:
        row = conn.execute(
            "update memory.jobs set status = 'running', attempts = 1, locked_by = 'dns', "
            "locked_until = now() + interval '1 minute' "
            "where org_id = %s and kind = 'deliver_webhook' and status = 'queued' returning *",
            (t.org,),
        ).fetchone()
    assert row is not None
    handler = make_deliver_handler(settings, resolve=dns)
    with connect(app_dsn, "dns") as conn:
        Worker(app_dsn, {"deliver_webhook": handler}).run_job(conn, "dns", Job.from_row(row))
    (job,) = t.jobs()
    return job


@pytest.mark.parametrize(
    ("answers", "named"),
    [
        ([["10.0.0.7"]], "10.0.0.7"),
        ([["93.184.215.14", "127.0.0.1"]], "127.0.0.1"),  # every address is checked
        ([["169.254.169.254"]], "169.254.169.254"),
    ],
)
def test_a_name_resolving_to_a_refused_address_is_not_delivered(
    app_dsn: str,
    admin_dsn: str,
    receiver: Receiver,
    quiet: None,
    answers: list[list[str]],
    named: str,
) -> None:
    t = new_tenant(app_dsn)
    t.webhook(receiver.url("refused", host="hooks.tenant.test"))
    t.supersede("Alice")
    job = deliver_once(
        t, admin_dsn, app_dsn, WebhookSettings(), FakeDNS({"hooks.tenant.test": answers})
    )
    assert job["status"] == "dead"
    (entry,) = t.log()
    assert entry["outcome"] == "failed" and entry["status_code"] is None
    assert "hooks.tenant.test" in entry["error"] and named in entry["error"]
    assert "not a public address" in entry["error"]
    assert receiver.requests == []


def test_a_name_that_does_not_resolve_is_not_delivered(
    app_dsn: str, admin_dsn: str, receiver: Receiver, quiet: None
) -> None:
    t = new_tenant(app_dsn)
    t.webhook(receiver.url("nowhere", host="nowhere.tenant.test"))
    t.supersede("Alice")
    dns = FakeDNS({})
    job = deliver_once(t, admin_dsn, app_dsn, LOOPBACK, dns)
    assert job["status"] == "queued"  # retried later: DNS may come back
    (entry,) = t.log()
    assert entry["outcome"] == "retrying" and entry["status_code"] is None
    assert entry["error"].startswith("nowhere.tenant.test does not resolve")
    assert dns.calls == ["nowhere.tenant.test"]
    assert receiver.requests == []


def test_the_connection_goes_to_the_address_resolved_once(
    app_dsn: str, admin_dsn: str, receiver: Receiver, quiet: None
) -> None:
    """The name answers 127.0.0.1 (the receiver) first and 127.0.0.2 (nobody listens)
    afterwards, as a rebinding name would: the POST reaches the receiver, the resolver is
    asked once, and the request names the host it was sent for."""
    t = new_tenant(app_dsn)
    t.webhook(receiver.url("pinned", host="rebind.tenant.test"))
    t.supersede("Alice")
    dns = FakeDNS({"rebind.tenant.test": [["127.0.0.1"], ["127.0.0.2"]]})
    job = deliver_once(t, admin_dsn, app_dsn, LOOPBACK, dns)
    assert job["status"] == "done"
    ((_, headers, _),) = receiver.at("pinned")
    assert headers["host"] == f"rebind.tenant.test:{receiver.port}"
    assert dns.calls == ["rebind.tenant.test"]
    (entry,) = t.log()
    assert (entry["status_code"], entry["outcome"]) == (200, "delivered")


def test_an_address_that_refuses_gives_way_to_the_next_checked_one(
    app_dsn: str, admin_dsn: str, receiver: Receiver, quiet: None
) -> None:
    """The name resolves (once) to 127.0.0.2, where nobody listens, and 127.0.0.1."""
    t = new_tenant(app_dsn)
    t.webhook(receiver.url("second", host="two.tenant.test"))
    t.supersede("Alice")
    dns = FakeDNS({"two.tenant.test": [["127.0.0.2", "127.0.0.1"]]})
    job = deliver_once(t, admin_dsn, app_dsn, LOOPBACK, dns)
    assert job["status"] == "done"
    assert len(receiver.at("second")) == 1 and dns.calls == ["two.tenant.test"]


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_tls_goes_to_the_checked_address_with_the_host_name_for_sni_and_the_certificate(
    tmp_path: Path,
) -> None:
    """An https endpoint whose certificate names hooks.tenant.test only: the request
    connects to the resolved 127.0.0.1, sends SNI hooks.tenant.test, and the
    certificate is checked against that name (it would not match the address). The
    control: a name resolving to the same address that the certificate does not carry
    fails verification."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-keyout", str(key), "-out", str(cert), "-subj", "/CN=hooks.tenant.test"),
            *("-addext", "subjectAltName=DNS:hooks.tenant.test"),
        ],
        check=True,
        capture_output=True,
    )
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    server.daemon_threads = True
    rec = Receiver(server)
    server.RequestHandlerClass = _handler(rec)
    names: list[str | None] = []
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    context.sni_callback = lambda sock, name, ctx: names.append(name)  # type: ignore[assignment,misc]
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        trust = ssl.create_default_context(cafile=str(cert))
        dns = FakeDNS({"hooks.tenant.test": [["127.0.0.1"]], "other.tenant.test": [["127.0.0.1"]]})
        port = rec.port
        status = post_within_deadline(
            f"https://hooks.tenant.test:{port}/tls", LOOPBACK, dns, trust, b"{}", {}
        )
        assert status == 200
        ((_, headers, _),) = rec.at("tls")
        assert headers["host"] == f"hooks.tenant.test:{port}"
        assert names == ["hooks.tenant.test"]
        with pytest.raises(Exception, match=r"CERTIFICATE_VERIFY_FAILED|certificate"):
            post_within_deadline(
                f"https://other.tenant.test:{port}/tls", LOOPBACK, dns, trust, b"{}", {}
            )
        assert len(rec.at("tls")) == 1
        assert dns.calls == ["hooks.tenant.test", "other.tenant.test"]
    finally:
        server.shutdown()
        server.server_close()


def test_webhook_settings_and_their_limits(app_dsn: str) -> None:
    env = {
        "CHRONOMEM_WEBHOOK_TIMEOUT": "2.5",
        "CHRONOMEM_WEBHOOK_ALLOW_PRIVATE": "on",
        "CHRONOMEM_WEBHOOK_MAX_IN_FLIGHT_PER_ORG": "7",
        "CHRONOMEM_WEBHOOK_MAX_IN_FLIGHT_PER_ENDPOINT": "3",
    }
    assert WebhookSettings.from_env(env) == WebhookSettings(2.5, True, 7, 3)
    assert WebhookSettings.from_env({}) == WebhookSettings(10.0, False, 4, 2)
    for name, bad in (
        ("CHRONOMEM_WEBHOOK_TIMEOUT", "0"),
        ("CHRONOMEM_WEBHOOK_MAX_IN_FLIGHT_PER_ORG", "0"),
        ("CHRONOMEM_WEBHOOK_MAX_IN_FLIGHT_PER_ENDPOINT", "many"),
    ):
        with pytest.raises(SettingsError, match=name):
            WebhookSettings.from_env({name: bad})
    # The claim refuses a cap it cannot use, naming the setting.
    with psycopg.connect(app_dsn, autocommit=True) as conn:
        conn.execute("set chronomem.webhook_max_in_flight_per_org = '0'")
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="per_org"):
            conn.execute("select * from memory_worker.claim_jobs('w', array['deliver_webhook'])")
    with pytest.raises(Undeliverable, match="invalid URL"):
        post_within_deadline(
            "ftp://x.test/", LOOPBACK, FakeDNS({}), ssl.create_default_context(), b"", {}
        )


# -- disabled endpoints ----------------------------------------------------------------


def test_disabling_an_endpoint_drops_its_queued_deliveries(
    app_dsn: str, receiver: Receiver, quiet: None, running: Callable[[Worker], Worker]
) -> None:
    """Deliveries queued for an endpoint are dropped when it is disabled (done, with the
    reason), so re-enabling it does not send them; the project's other endpoint (the
    control) gets the same events, and the re-enabled endpoint gets the next one."""
    t = new_tenant(app_dsn)
    off, on = t.webhook(receiver.url("toggled")), t.webhook(receiver.url("control"))
    for subject in ("Alice", "Bob", "Carol", "Dan"):
        t.supersede(subject)
    assert Counter(j["payload"]["endpoint_id"] for j in t.jobs()) == {off: 4, on: 4}
    for enabled in (False, True):
        t.one("select memory.update_webhook(%s, %s, p_enabled => %s)", (t.project, off, enabled))
    dropped = [j for j in t.jobs() if j["payload"]["endpoint_id"] == off]
    assert [(j["status"], j["result"]) for j in dropped] == [
        ("done", {"skipped": "endpoint disabled"})
    ] * 4
    handlers = {"deliver_webhook": make_deliver_handler(LOOPBACK)}
    running(Worker(app_dsn, handlers, concurrency=2, lease=30, poll_interval=0.1))
    receiver.wait(lambda: len(receiver.at("control")) == 4, 10, "the control's deliveries")
    t.supersede("Erin")  # after re-enabling: delivered to both
    receiver.wait(lambda: len(receiver.at("toggled")) == 1, 10, "the re-enabled endpoint")
    receiver.wait(lambda: len(receiver.at("control")) == 5, 10, "the control's fifth")
    time.sleep(0.5)
    assert len(receiver.at("toggled")) == 1
