"""The operator console in a real headless Chromium (Debian's `chromium`, driven by
Playwright; no browser is downloaded) against a real `chronomem serve`, with data
written through SQL as the app role.

Each page shows what its SQL call returns (compared with the same call made here);
moving at / known_at moves the timeline as memory.facts_at says; a retract through the
console is what psql then reads; a JWT signed by a key of a JWKS served on loopback signs
in (and works as a bearer token of the API), an expired, wrong-audience or unknown-key
one does not; a fact's <script> renders as text; forms refuse a missing CSRF token;
another tenant's ids give the not-found page random ids give. The conflict inbox and a
conflict's page show memory.list_conflicts and memory.get_conflict; resolving through
the console is what memory.facts_at then reads, and needs memory:review; a review shows
as standing on the timeline; the cardinality page undoes a change. Every refusal has its
positive control beside it.

CONSOLE_SCREENSHOTS=<dir> saves screenshots of the main pages there (docs/console/).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import jwt
import psycopg
import pytest
from api_server import Tenant, api_server, make_tenant
from cryptography.hazmat.primitives.asymmetric import rsa
from fastapi.routing import iter_route_contexts
from jwt.algorithms import RSAAlgorithm
from psycopg.types.json import Jsonb
from starlette.requests import Request
from starlette.responses import Response

from thin_api.app import app
from thin_api.console.web import SESSION_COOKIE, set_cookie
from thin_api.oidc import JwtRefused, Provider

playwright_api = pytest.importorskip("playwright.sync_api")

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# Skipped on a developer's machine without it; in CI (CI set, as .ci/run runs) a missing
# browser fails the tests instead of hiding them.
pytestmark = pytest.mark.skipif(
    CHROMIUM is None and not os.environ.get("CI"),
    reason="Debian's chromium is not installed (scripts/test installs it)",
)
AUDIENCE = "chronomem-console"
SHOTS = os.environ.get("CONSOLE_SCREENSHOTS")
XSS_OBJECT = "<script>window.__xss = 2</script>"


# -- a JWKS on loopback ----------------------------------------------------------------
class Jwks:
    """An identity provider's signing keys, its JWKS served on 127.0.0.1."""

    def __init__(self) -> None:
        self.keys: dict[str, Any] = {}
        self.published: list[str] = []
        self.hits = 0
        self.other_site = ""  # a page of another site (served at /elsewhere), for CSRF
        jwks = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/elsewhere":
                    body, kind = jwks.other_site.encode(), "text/html"
                else:
                    jwks.hits += 1
                    keys = [jwks.public(k) for k in jwks.published]
                    body, kind = json.dumps({"keys": keys}).encode(), "application/json"
                self.send_response(200)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/jwks.json"
        self.issuer = f"http://127.0.0.1:{self.server.server_address[1]}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def new_key(self, kid: str, publish: bool = True) -> None:
        self.keys[kid] = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        if publish:
            self.published.append(kid)

    def public(self, kid: str) -> dict[str, Any]:
        jwk: dict[str, Any] = RSAAlgorithm.to_jwk(self.keys[kid].public_key(), as_dict=True)
        return {**jwk, "kid": kid, "use": "sig", "alg": "RS256"}

    def token(self, kid: str, **claims: Any) -> str:
        now = int(time.time())
        body = {"iss": self.issuer, "aud": AUDIENCE, "sub": "operator-1", "iat": now,
                "exp": now + 600, "groups": ["support"], **claims}  # fmt: skip
        return jwt.encode(body, self.keys[kid], algorithm="RS256", headers={"kid": kid})


# -- the world -------------------------------------------------------------------------
@dataclass
class World:
    base: str
    a: Tenant
    b: Tenant
    jwks: Jwks
    reader: str  # a project:read key of A's project
    plan_pro: str  # A's facts (ids as text)
    plan_enterprise: str
    xss_fact: str
    sourced_fact: str
    before_enterprise: str  # a record-time instant between the two plans
    session: str
    conflict: str  # A's open conflict: user 9's favourite colour, one object HTML


def sql(t: Tenant, query: str, params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
    return t.rows(query, params)


def claim(subject: str, predicate: str, obj: str, **more: str) -> dict[str, str]:
    return {"subject": subject, "predicate": predicate, "object": obj, **more}


def assert_facts(t: Tenant, facts: list[dict[str, Any]], episode: str | None = None) -> list[str]:
    answer = sql(
        t,
        "select memory.assert_facts(%s, %s, 'api', %s) as a",
        (t.project, Jsonb(facts), episode),
    )[0]["a"]
    return [r["fact_id"] for r in answer["results"]]


@pytest.fixture(scope="module")
def world(app_dsn: str, owner_dsn: str) -> Iterator[World]:
    jwks = Jwks()
    jwks.new_key("k1")
    providers = [{"issuer": jwks.issuer, "jwks_uri": jwks.url, "audience": AUDIENCE,
                  "min_refetch_seconds": 1}]  # fmt: skip
    a = make_tenant(app_dsn, "console A")
    b = make_tenant(app_dsn, "console B")
    sql(a, "select memory.declare_predicate(%s, 'plan', 'one')", (a.project,))
    pro = assert_facts(a, [claim("user 42", "plan", "pro", valid_from="2024-01-01")])[0]
    time.sleep(0.05)
    between = sql(a, "select now() as t")[0]["t"].isoformat()
    time.sleep(0.05)
    enterprise = assert_facts(a, [claim("user 42", "plan", "enterprise", valid_from="2024-03-01")])
    xss = assert_facts(a, [claim("<b>mallory</b>", "note", "<script>window.__xss = 1</script>")])
    ingested = sql(
        a,
        "select memory.ingest(%s, 'support chat', %s) as i",
        (a.project, Jsonb([{"role": "user", "content": "I moved to Berlin last spring."}])),
    )[0]["i"]
    berlin = claim("user 42", "lives in", "Berlin", object_type="entity", valid_from="2024-04-01")
    sourced = assert_facts(a, [berlin], ingested["episode_ids"][0])[0]
    # Two open conflicts opened together (so they share opened_at): two objects at once
    # of an undeclared predicate; one object is HTML.
    colour = "favourite colour"
    assert_facts(
        a,
        [
            claim("user 9", colour, "green", valid_from="2024-01-01"),
            claim("user 9", colour, XSS_OBJECT, valid_from="2024-02-01"),
            claim("user 10", colour, "red"),
            claim("user 10", colour, "blue"),
        ],
    )
    conflict = sql(
        a,
        "select conflict_id::text as c from memory.list_conflicts(%s) where subject = 'user 9'",
        (a.project,),
    )[0]["c"]
    # B's own data, with the same names: it must never show in A's pages, nor A's in B's.
    assert_facts(b, [claim("user 42", "plan", "bravo plan")])
    assert_facts(b, [claim("user 9", colour, "bravo red"), claim("user 9", colour, "bravo blue")])
    # The mapping of the provider's "support" group to A's project: the owner's to make.
    with psycopg.connect(owner_dsn) as conn:
        conn.execute("select memory.use_org(%s)", (a.org,))
        conn.execute(
            "select memory.set_oidc_mapping(%s, %s, %s, 'groups', 'support', "
            "array['project:read'])",
            (a.project, jwks.issuer, AUDIENCE),
        )
    env = {"CHRONOMEM_OIDC_PROVIDERS": json.dumps(providers)}
    with api_server(app_dsn, **env) as base:
        reader = a.key(["project:read"])
        yield World(
            base,
            a,
            b,
            jwks,
            reader,
            pro,
            enterprise[0],
            xss[0],
            sourced,
            between,
            "support chat",
            conflict,
        )
    jwks.server.shutdown()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with playwright_api.sync_playwright() as p:
        launched = p.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            # As root (CI containers) Chromium's sandbox cannot start.
            args=["--no-sandbox"] if os.geteuid() == 0 else [],
        )
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Any, world: World) -> Iterator[Any]:
    context = browser.new_context(base_url=world.base, viewport={"width": 1280, "height": 900})
    context.set_default_timeout(10_000)
    yield context.new_page()
    context.close()


def sign_in(page: Any, credential: str) -> None:
    page.goto("/console/sign-in")
    page.fill("#credential", credential)
    page.click("main button[type=submit]")
    page.wait_for_load_state()


def shot(page: Any, name: str, full: bool = True) -> None:
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SHOTS) / f"{name}.png"), full_page=full)


def cells(page: Any, selector: str) -> list[str]:
    return [c.strip() for c in page.locator(selector).all_inner_texts()]


# -- sign-in ---------------------------------------------------------------------------
def test_sign_in_with_an_api_key_sets_a_strict_cookie_and_sign_out_ends_the_session(
    page: Any, world: World
) -> None:
    page.goto("/console/projects")
    assert page.url.endswith("/console/sign-in")  # signed out: to the sign-in page
    shot(page, "sign-in", full=False)
    sign_in(page, "cmk_" + "0" * 32 + "_" + "0" * 64)
    assert "not valid here" in page.inner_text("main")  # a wrong key does not sign in
    sign_in(page, world.a.token)
    assert page.url.endswith("/console/projects")
    cookie = next(c for c in page.context.cookies() if c["name"] == "chronomem_console")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/console"
    assert cookie["value"].startswith("cms_") and world.a.token not in cookie["value"]
    # The database holds a hash of it, with the key's permissions.
    row = sql(world.a, "select * from memory_http.authenticate(%s)", (cookie["value"],))[0]
    assert row["org_id"] == world.a.org and "project:write" in row["permissions"]
    page.click("header .sign-out button")
    assert page.url.endswith("/console/sign-in")
    assert not any(c["name"] == "chronomem_console" for c in page.context.cookies())
    gone = sql(world.a, "select * from memory_http.authenticate(%s)", (cookie["value"],))[0]
    assert gone["org_id"] is None  # the session ended in the database, not only the cookie
    page.goto("/console/projects")
    assert page.url.endswith("/console/sign-in")


def test_overview_counts_are_project_overview(page: Any, world: World) -> None:
    sign_in(page, world.a.token)
    expected = sql(world.a, "select memory.project_overview(%s) as o", (world.a.project,))[0]["o"]
    card = page.locator(f"section[data-project='{world.a.project}']")
    for name in ("facts_current", "facts_historical", "episodes", "sessions", "entities"):
        assert card.locator(f"dd[data-count={name}]").inner_text() == str(expected[name]), name
    assert expected["facts_current"] >= 3 and expected["facts_historical"] >= 1  # control
    dead = {k: str(v["dead"]) for k, v in expected["backlog"]["kinds"].items()}
    assert {k: card.locator(f"tr[data-kind={k}] td[data-dead]").inner_text() for k in dead} == dead
    assert "bravo" not in page.inner_text("main") and "console B" not in page.inner_text("main")
    shot(page, "projects")


# -- the timeline ----------------------------------------------------------------------
def held_ids(t: Tenant, at: str, known_at: str | None) -> set[str]:
    rows = sql(
        t,
        "select f.fact_id::text as id from memory.facts_at(%s, %s, %s) f "
        "join memory.entities s on s.entity_id = f.subject_id where s.name = 'user 42'",
        (t.project, at, known_at),
    )
    return {r["id"] for r in rows}


def page_held(page: Any) -> set[str]:
    return set(
        page.locator(".bar[data-holds=yes]").evaluate_all("bs => bs.map(b => b.dataset.fact)")
    )


def test_timeline_moves_with_at_and_known_at_as_facts_at_says(page: Any, world: World) -> None:
    sign_in(page, world.reader)
    base = f"/console/p/{world.a.project}/timeline?subject=user+42"
    page.goto(base + "&at=2024-06-01T00:00:00Z")
    versions = page.locator(".bar").evaluate_all("bs => bs.map(b => b.dataset.fact)")
    assert {world.plan_pro, world.plan_enterprise, world.sourced_fact} <= set(versions)
    now_held = held_ids(world.a, "2024-06-01T00:00:00Z", None)
    assert page_held(page) == now_held and world.plan_enterprise in now_held
    shot(page, "timeline")
    # Record time before the enterprise plan was written: the store believed pro held.
    field = page.locator("input[name=known_at]")
    field.fill(world.before_enterprise)
    field.press("Enter")
    page.wait_for_load_state()
    then_held = held_ids(world.a, "2024-06-01T00:00:00Z", world.before_enterprise)
    assert page_held(page) == then_held and world.plan_pro in then_held
    assert world.plan_enterprise not in then_held
    # World time in February, known now: pro again (its window closed in March).
    page.goto(base + "&at=2024-02-01T00:00:00Z")
    assert page_held(page) == held_ids(world.a, "2024-02-01T00:00:00Z", None)
    assert world.plan_pro in page_held(page)
    # The at slider (the keyboard or a drag) moves world time and shows that page.
    slider = page.locator("input[data-slider=at]")
    top = slider.get_attribute("max")
    with page.expect_navigation():
        slider.fill(str(top))
    at_now = page.locator("input[name=at]").input_value()
    assert page_held(page) == held_ids(world.a, at_now, None)
    assert world.plan_enterprise in page_held(page)


def test_fact_page_shows_detail_history_and_source(page: Any, world: World) -> None:
    sign_in(page, world.reader)
    page.goto(f"/console/p/{world.a.project}/facts/{world.sourced_fact}")
    detail = sql(
        world.a, "select memory.fact_detail(%s, %s) as d", (world.a.project, world.sourced_fact)
    )[0]["d"]
    assert page.inner_text("dd.content") == detail["content"]
    assert page.inner_text("blockquote.excerpt") == detail["source_episode"]["excerpt"]
    history = sql(
        world.a,
        "select memory_http.fact_history(%s, %s) as h",
        (world.a.project, world.plan_pro),
    )[0]["h"]
    page.goto(f"/console/p/{world.a.project}/facts/{world.plan_pro}")
    events = page.locator("table.history tbody tr").evaluate_all(
        "rs => rs.map(r => r.dataset.event)"
    )
    assert events == [e["event_type"] for e in history["events"]]
    assert "superseded" in events  # control: the history has more than one event
    shot(page, "fact")


# -- retracting, permissions and CSRF ----------------------------------------------------
def test_retract_through_the_console_is_what_psql_reads(page: Any, world: World) -> None:
    fact_id = assert_facts(world.a, [claim("user 7", "likes", "tea")])[0]
    url = f"/console/p/{world.a.project}/facts/{fact_id}"
    # A read-only sign-in cannot: the database refuses the call (project:write).
    sign_in(page, world.reader)
    page.goto(url)
    page.fill("#reason", "entered by mistake")
    page.click("form.retract button")
    assert "does not grant project:write" in page.inner_text("main")
    assert sql(world.a, "select count(*) as n from memory.facts_at(%s) where fact_id = %s",
               (world.a.project, fact_id))[0]["n"] == 1  # fmt: skip
    # A form without this session's CSRF token is refused, and changes nothing: posted
    # by a script of the console's own origin (the cookie goes with it) ...
    sign_in(page, world.a.token)
    page.goto(url)
    for token in ("", "0" * 64):
        status = page.evaluate(
            """([url, token]) => fetch(url, {method: "POST", redirect: "manual",
                 body: new URLSearchParams({csrf: token, reason: "x"})}).then(r => r.status)""",
            [url + "/retract", token],
        )
        assert status == 403, token
    # ... or by a page of another site (localhost is another site than 127.0.0.1): the
    # SameSite=Strict cookie stays behind, so the post has no session at all.
    world.jwks.other_site = (
        f'<form method="post" action="{world.base}{url}/retract">'
        '<input name="reason" value="forged"><button>go</button></form>'
    )
    other = page.context.new_page()
    other.goto(world.jwks.url.replace("127.0.0.1", "localhost").replace("/jwks.json", "/elsewhere"))
    other.click("button")
    other.wait_for_load_state()
    assert other.url.endswith("/console/sign-in")
    other.close()
    assert sql(world.a, "select count(*) as n from memory.facts_at(%s) where fact_id = %s",
               (world.a.project, fact_id))[0]["n"] == 1  # fmt: skip
    # Positive control: the console's own form, with its token.
    page.goto(url)
    page.fill("#reason", "entered by mistake")
    page.click("form.retract button")
    assert "Retraction: retracted" in page.inner_text("main")
    assert sql(world.a, "select count(*) as n from memory.facts_at(%s) where fact_id = %s",
               (world.a.project, fact_id))[0]["n"] == 0  # fmt: skip
    event = sql(
        world.a,
        "select event_type, reason, actor from memory.fact_history(%s, %s) "
        "order by occurred_at desc, event_id desc limit 1",
        (world.a.project, fact_id),
    )[0]
    assert event == {"event_type": "retracted", "reason": "entered by mistake",
                     "actor": f"api_key:{world.a.key_id}"}  # fmt: skip
    assert page.locator("dd[data-status]").get_attribute("data-status") == "retracted"


def test_sign_out_and_sign_in_refuse_forms_without_their_token(page: Any, world: World) -> None:
    sign_in(page, world.a.token)
    refused = page.request.post("/console/sign-out", form={"csrf": ""})
    assert refused.status == 403
    page.goto("/console/projects")
    assert page.url.endswith("/console/projects")  # still signed in
    # The sign-in form's token comes with the form's own cookie.
    fresh = httpx.post(f"{world.base}/console/sign-in", data={"credential": world.a.token})
    assert fresh.status_code == 403 and "chronomem_console" not in fresh.headers.get(
        "set-cookie", ""
    )


def test_the_session_cookie_is_secure_over_tls() -> None:
    """A request that came over TLS (an ASGI server terminating it sets the scheme;
    `chronomem serve` itself speaks plain HTTP and trusts no proxy header) gets a Secure
    cookie; plain HTTP does not (a browser would drop a Secure cookie there)."""
    for scheme, secure in (("https", True), ("http", False)):
        request = Request({"type": "http", "scheme": scheme, "method": "POST", "path": "/",
                           "headers": [], "query_string": b"", "server": ("h", 1)})  # fmt: skip
        response = Response()
        set_cookie(request, response, SESSION_COOKIE, "cms_x")
        cookie = response.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/console" in cookie
        assert ("Secure" in cookie) == secure, cookie


# -- escaping --------------------------------------------------------------------------
def test_html_in_facts_and_subjects_renders_as_text(page: Any, world: World) -> None:
    sign_in(page, world.reader)
    page.goto(f"/console/p/{world.a.project}/facts/{world.xss_fact}")
    assert page.inner_text("h1 .object") == "<script>window.__xss = 1</script>"
    assert page.inner_text("h1 .subject") == "<b>mallory</b>"
    assert page.locator("h1 b").count() == 0 and page.locator("main script").count() == 0
    assert page.evaluate("() => window.__xss") is None
    page.goto(f"/console/p/{world.a.project}/facts?subject=%3Cb%3Emallory%3C%2Fb%3E")
    assert "<script>window.__xss = 1</script>" in page.inner_text("table.facts")
    assert page.evaluate("() => window.__xss") is None
    page.goto(f"/console/p/{world.a.project}/timeline?subject=%3Cb%3Emallory%3C%2Fb%3E")
    assert page.locator(".bar").count() == 1 and page.locator("main b").count() == 0


# -- the other pages -------------------------------------------------------------------
def test_facts_entities_sessions_changes_show_their_sql(page: Any, world: World) -> None:
    a, pid = world.a, world.a.project
    sign_in(page, world.reader)
    page.goto(f"/console/p/{pid}/facts?at=2024-02-01T00:00:00Z")
    listed = sql(a, "select memory.list_facts(%s, '2024-02-01T00:00:00Z') as l", (pid,))[0]["l"]
    rows = page.locator("table.facts tbody tr").evaluate_all("rs => rs.map(r => r.dataset.fact)")
    assert rows == [f["fact_id"] for f in listed["facts"]] and world.plan_pro in rows
    shot(page, "facts")
    page.goto(f"/console/p/{pid}/facts?subject=user+42&predicate=plan")
    listed = sql(a, "select memory.list_facts(%s, null, null, 'user 42', 'plan') as l", (pid,))
    rows = page.locator("table.facts tbody tr").evaluate_all("rs => rs.map(r => r.dataset.fact)")
    assert rows == [f["fact_id"] for f in listed[0]["l"]["facts"]] == [world.plan_enterprise]
    page.goto(f"/console/p/{pid}/entities")
    entities = sql(a, "select memory.list_entities(%s) as e", (pid,))[0]["e"]["entities"]
    shown = page.locator("tr[data-entity]").evaluate_all("rs => rs.map(r => r.dataset.entity)")
    assert shown == [e["entity_id"] for e in entities] and len(shown) >= 3
    page.goto(f"/console/p/{pid}/graph?entity=user+42")
    graph = sql(a, "select memory.graph_neighbors(%s, 'user 42') as g", (pid,))[0]["g"]
    nodes = page.locator("li[data-entity]").evaluate_all("ns => ns.map(n => n.dataset.entity)")
    assert nodes == [n["entity_id"] for n in graph["nodes"]] and nodes
    shot(page, "graph")
    page.goto(f"/console/p/{pid}/sessions")
    assert cells(page, "tr[data-session] td:first-child") == ["support chat"]
    page.click("text=support chat")
    assert page.inner_text(".msg .content") == "I moved to Berlin last spring."
    page.goto(f"/console/p/{pid}/changes")
    feed = sql(a, "select memory.fact_changes(%s) as c", (pid,))[0]["c"]["changes"]
    shown = page.locator("tbody tr[data-event]").evaluate_all(
        "rs => rs.map(r => [r.dataset.event, r.dataset.fact])"
    )
    assert shown == [[c["event_type"], c["fact_id"]] for c in feed][: len(shown)] and shown
    shot(page, "changes")


def test_search_playground_shows_each_legs_rank_and_the_context(page: Any, world: World) -> None:
    sign_in(page, world.reader)
    page.goto(f"/console/p/{world.a.project}/search?query=which+plan+is+user+42+on&k=5")
    found = sql(
        world.a,
        "select memory.search(%s, 'which plan is user 42 on', null, null, null, 5) as s",
        (world.a.project,),
    )[0]["s"]
    rows = page.locator("table.results tbody tr").evaluate_all("rs => rs.map(r => r.dataset.id)")
    assert rows == [h["id"] for h in found["results"]] and rows
    legs = cells(page, "table.results thead th")[3:-1]
    first = found["results"][0]
    ranks = cells(page, "table.results tbody tr:first-child td.rank")
    assert dict(zip(legs, ranks, strict=True)) == {
        leg: str(first["ranks"].get(leg, "")) for leg in legs
    }
    context = sql(
        world.a,
        "select memory.context(%s, 'which plan is user 42 on', null, null, null, 1500, 5) as c",
        (world.a.project,),
    )[0]["c"]
    assert page.inner_text("pre.context").strip() == context["text"].strip()
    assert "enterprise" in context["text"]  # control: the context holds the plan
    shot(page, "search")


# -- the conflict inbox, review and cardinality -----------------------------------------
def conflict_of(t: Tenant, conflict: str) -> dict[str, Any]:
    found: dict[str, Any] = sql(
        t, "select memory.get_conflict(%s, %s) as g", (t.project, conflict)
    )[0]["g"]
    return found


def data(page: Any, selector: str, key: str) -> list[str]:
    return list(page.locator(selector).evaluate_all(f"es => es.map(e => e.dataset.{key})"))


def test_the_inbox_and_a_conflict_show_list_conflicts_and_get_conflict(
    page: Any, world: World
) -> None:
    a, pid = world.a, world.a.project
    sign_in(page, world.reader)
    listing = "select conflict_id::text as id from memory.list_conflicts(%s, %s, null, %s, %s, %s)"
    for status in ("open", "resolved", "all"):
        page.goto(f"/console/p/{pid}/conflicts?status={status}")
        listed = [r["id"] for r in sql(a, listing, (pid, status, 50, None, None))]
        assert data(page, "tr[data-conflict]", "conflict") == listed, status
    page.goto(f"/console/p/{pid}/conflicts")
    assert world.conflict in data(page, "tr[data-conflict]", "conflict")  # control
    assert "bravo" not in page.inner_text("main")  # B's conflicts of the same names
    shot(page, "inbox")
    # A page of one, then the next from its next_before / next_before_id (the two
    # conflicts opened together share opened_at: the id breaks the tie).
    page.goto(f"/console/p/{pid}/conflicts?status=all&limit=1")
    first = sql(
        a,
        "select conflict_id::text as id, opened_at from memory.list_conflicts(%s, 'all', null, 1)",
        (pid,),
    )[0]
    assert data(page, "tr[data-conflict]", "conflict") == [first["id"]]
    page.click("a.next")
    second = [r["id"] for r in sql(a, listing, (pid, "all", 1, first["opened_at"], first["id"]))]
    assert data(page, "tr[data-conflict]", "conflict") == second and second != [first["id"]]
    # The conflict: its members and events as memory.get_conflict gives them.
    page.goto(f"/console/p/{pid}/conflicts")
    page.click(f"tr[data-conflict='{world.conflict}'] a")
    found = conflict_of(a, world.conflict)
    assert data(page, "tr[data-member]", "member") == [m["member_id"] for m in found["members"]]
    assert cells(page, "table.members td.object") == [m["object"] for m in found["members"]]
    assert cells(page, "table.members td.standing") == [m["standing"] for m in found["members"]]
    assert data(page, "table.events tr[data-event]", "event") == [
        e["event_type"] for e in found["events"]
    ]
    assert page.inner_text("dd[data-status]") == "open"
    # The HTML object is text (a control: it is a member), and no script of it ran.
    assert XSS_OBJECT in cells(page, "table.members td.object")
    assert page.locator("main script").count() == 0 and page.evaluate("() => window.__xss") is None
    shot(page, "conflict")


def test_resolving_through_the_console_is_what_sql_reads(page: Any, world: World) -> None:
    a, pid = world.a, world.a.project
    sencha, oolong = assert_facts(
        a,
        [
            claim("user 11", "tea", "sencha", valid_from="2024-01-01"),
            claim("user 11", "tea", "oolong", valid_from="2024-03-01"),
        ],
    )
    cid = sql(
        a,
        "select conflict_id::text as c from memory.list_conflicts(%s) where subject = 'user 11'",
        (pid,),
    )[0]["c"]
    members = conflict_of(a, cid)["members"]
    winner = next(m["member_id"] for m in members if m["fact_id"] == oolong)

    def teas(at: str) -> set[str]:
        rows = sql(
            a,
            "select f.fact_id::text as id from memory.facts_at(%s, %s) f "
            "join memory.entities s on s.entity_id = f.subject_id "
            "where s.name = 'user 11'",
            (pid, at),
        )
        return {r["id"] for r in rows}

    url = f"/console/p/{pid}/conflicts/{cid}"

    def supersede() -> None:
        page.goto(url)
        page.select_option("form.resolve-supersede select", winner)
        page.fill("form.resolve-supersede input[name=at]", "2024-06-01T00:00:00Z")
        page.fill("form.resolve-supersede input[name=reason]", "switched teas")
        page.click("form.resolve-supersede button")

    # A key that writes memory but holds no memory:review: the database refuses.
    sign_in(page, a.key(["project:read", "project:write"]))
    supersede()
    assert "does not grant memory:review" in page.inner_text("p.error[data-status='403']")
    assert conflict_of(a, cid)["status"] == "open" and teas("2024-07-01") == {sencha, oolong}
    # Every action refuses a form without this session's CSRF token, and changes nothing.
    sign_in(page, a.token)
    change = sql(
        a, "select change_id from memory.predicate_changes(%s) where predicate = 'plan'", (pid,)
    )[0]["change_id"]
    for action, form in (
        (f"conflicts/{cid}/resolve", {"resolution": "supersede", "member_id": winner}),
        (f"facts/{sencha}/review", {"standing": "rejected"}),
        (f"cardinality/{change}/undo", {}),
    ):
        answer = page.request.post(f"/console/p/{pid}/{action}", form={"csrf": "", **form})
        assert answer.status == 403, action
    assert conflict_of(a, cid)["status"] == "open" and teas("2024-07-01") == {sencha, oolong}
    assert (
        sql(
            a,
            "select count(*) as n from memory.predicate_changes(%s) where undoes = %s",
            (pid, change),
        )[0]["n"]
        == 0
    )
    # Positive control: the reviewer's own form. Oolong wins from June: sencha holds until
    # then (both in April), oolong alone after.
    supersede()
    assert "Resolution: superseded" in page.inner_text("main")
    assert teas("2024-07-01") == {oolong} and teas("2024-04-01") == {sencha, oolong}
    found = conflict_of(a, cid)
    assert (found["status"], found["resolution"], found["reason"]) == (
        "resolved",
        "superseded",
        "switched teas",
    )
    assert page.inner_text("dd[data-status]") == "resolved (superseded)"
    assert data(page, "tr[data-member]", "outcome") == [m["outcome"] for m in found["members"]]
    assert sorted(data(page, "tr[data-member]", "outcome")) == ["lost", "won"]
    assert data(page, "table.events tr[data-event]", "event") == ["opened", "resolved"]
    assert page.locator("form.resolve-supersede").count() == 0  # resolved once


def test_a_review_on_the_fact_page_shows_as_standing_on_the_timeline(
    page: Any, world: World
) -> None:
    a, pid = world.a, world.a.project
    chess, poetry = assert_facts(
        a, [claim("user 12", "plays", "chess"), claim("user 12", "reads", "poetry")]
    )
    sign_in(page, a.token)
    page.goto(f"/console/p/{pid}/facts/{chess}")
    assert page.inner_text("dd.standing") == "unreviewed"
    page.fill("#review-reason", "asked the user")
    page.click("form.review button[value=confirmed]")
    assert "Review: confirmed" in page.inner_text("main")
    assert page.inner_text("dd.standing") == "confirmed"
    standing = "select memory_internal.fact_standing(%s, %s) as s"
    assert sql(a, standing, (a.org, chess))[0]["s"] == "confirmed"
    page.goto(f"/console/p/{pid}/timeline?subject=user+12")
    bars = {f: page.locator(f".bar[data-fact='{f}']") for f in (chess, poetry)}
    for fact, bar in bars.items():
        assert bar.get_attribute("data-standing") == sql(a, standing, (a.org, fact))[0]["s"]
    assert "standing-confirmed" in (bars[chess].get_attribute("class") or "")
    assert bars[chess].locator(".standing-mark").inner_text() == "✓"
    assert "standing confirmed" in bars[chess].locator(".sr-only").text_content()
    # Control: the unreviewed one carries no mark and says so.
    assert bars[poetry].get_attribute("data-standing") == "unreviewed"
    assert bars[poetry].locator(".standing-mark").count() == 0
    assert "standing unreviewed" in bars[poetry].locator(".sr-only").text_content()
    shot(page, "timeline-standing", full=False)


def test_the_cardinality_page_shows_suggestions_and_changes_and_undoes(
    page: Any, world: World
) -> None:
    a, pid = world.a, world.a.project
    sql(a, "select memory.declare_predicate(%s, 'mood', 'many')", (pid,))
    sign_in(page, a.token)
    page.goto(f"/console/p/{pid}/cardinality")
    suggested = sql(a, "select predicate, suggestion from memory.suggest_cardinality(%s)", (pid,))
    assert data(page, "table.suggestions tr[data-predicate]", "predicate") == [
        s["predicate"] for s in suggested
    ]
    assert cells(page, "table.suggestions td.suggestion") == [
        s["suggestion"] or "—" for s in suggested
    ]
    changes = sql(
        a, "select change_id::text as id, predicate from memory.predicate_changes(%s)", (pid,)
    )
    assert data(page, "tr[data-change]", "change") == [c["id"] for c in changes]
    assert changes[0]["predicate"] == "mood"  # newest first
    shot(page, "cardinality")
    page.click(f"tr[data-change='{changes[0]['id']}'] form.undo button")
    assert "Undone: mood: unknown" in page.inner_text("main")
    latest = sql(
        a,
        "select predicate, new_cardinality, cause, undoes::text as undoes "
        "from memory.predicate_changes(%s, 1)",
        (pid,),
    )[0]
    assert latest == {
        "predicate": "mood",
        "new_cardinality": "unknown",
        "cause": "undone",
        "undoes": changes[0]["id"],
    }
    # A read-only key sees the inbox but not the configuration.
    sign_in(page, world.reader)
    page.goto(f"/console/p/{pid}/cardinality")
    assert "does not grant configuration:read" in page.inner_text("p.error[data-status='403']")


# -- tenancy ---------------------------------------------------------------------------
def masked(text: str, ids: dict[str, str]) -> str:
    for name, value in ids.items():
        text = text.replace(value, f"<{name}>")
    return re.sub(r'name="csrf" value="[0-9a-f]+"', "", text)


def test_other_tenants_ids_give_the_not_found_page_of_random_ids(page: Any, world: World) -> None:
    a_ids = {
        "p": str(world.a.project),
        "f": world.plan_pro,
        "s": world.session,
        "c": world.conflict,
    }
    random_ids = {
        "p": str(uuid.uuid4()),
        "f": str(uuid.uuid4()),
        "s": f"no {uuid.uuid4().hex}",
        "c": str(uuid.uuid4()),
    }
    own = [
        "/console/p/{p}",
        "/console/p/{p}/timeline?subject=user+42",
        "/console/p/{p}/facts",
        "/console/p/{p}/facts/{f}",
        "/console/p/{p}/entities",
        "/console/p/{p}/graph?entity=user+42",
        "/console/p/{p}/sessions",
        "/console/p/{p}/sessions/{s}",
        "/console/p/{p}/changes",
        "/console/p/{p}/search?query=plan",
        "/console/p/{p}/conflicts",
        "/console/p/{p}/conflicts/{c}",
        "/console/p/{p}/cardinality",
    ]
    paths = [
        *own,
        f"/console/p/{world.b.project}/facts/{{f}}",  # A's fact under B's own project
        f"/console/p/{world.b.project}/sessions/{{s}}",
        f"/console/p/{world.b.project}/conflicts/{{c}}",
    ]
    # Every console page with an id in its path is among them (the forms below).
    shape = re.compile(r"\{[^}]+\}")
    served = {
        shape.sub("{}", c.path)
        for c in iter_route_contexts(app.routes)
        if c.path.startswith("/console") and "{" in c.path
    }
    covered = {shape.sub("{}", p.split("?")[0]) for p in paths}
    covered |= {
        "/console/p/{}/facts/{}/retract",
        "/console/p/{}/facts/{}/review",
        "/console/p/{}/conflicts/{}/resolve",
        "/console/p/{}/cardinality/{}/undo",
    }
    assert served <= covered and len(served) >= 16, sorted(served - covered)
    sign_in(page, world.b.token)
    for path in paths:
        real = page.goto(path.format(**a_ids))
        assert real is not None and real.status == 404, path
        real_text = masked(page.content(), a_ids)
        fake = page.goto(path.format(**random_ids))
        assert fake is not None and fake.status == 404, path
        assert real_text == masked(page.content(), random_ids), path
        assert "Not found" in real_text
    # Retracting A's fact from B's session: not found, and A's fact stays.
    csrf = page.locator("input[name=csrf]").first.get_attribute("value")
    refused = page.request.post(
        f"/console/p/{world.a.project}/facts/{world.plan_enterprise}/retract",
        form={"csrf": csrf or "", "reason": "x"},
    )
    assert refused.status == 404
    # Resolving A's conflict, reviewing A's fact, undoing A's predicate change: under A's
    # project id or B's own, not found, and nothing changes.
    change = sql(
        world.a,
        "select change_id from memory.predicate_changes(%s) where predicate = 'plan'",
        (world.a.project,),
    )[0]["change_id"]
    for project in (world.a.project, world.b.project):
        for action, form in (
            (f"conflicts/{world.conflict}/resolve", {"resolution": "keep_both"}),
            (f"facts/{world.plan_enterprise}/review", {"standing": "rejected"}),
            (f"cardinality/{change}/undo", {}),
        ):
            answer = page.request.post(
                f"/console/p/{project}/{action}", form={"csrf": csrf or "", **form}
            )
            assert answer.status == 404, (project, action)
    assert conflict_of(world.a, world.conflict)["status"] == "open"
    assert (
        sql(
            world.a,
            "select count(*) as n from memory.predicate_changes(%s) where undoes = %s",
            (world.a.project, change),
        )[0]["n"]
        == 0
    )
    # Positive control: A's session opens every one of them.
    sign_in(page, world.a.token)
    for path in own:
        ok = page.goto(path.format(**a_ids))
        assert ok is not None and ok.status == 200, path
    assert world.plan_enterprise in held_ids(world.a, datetime.now(UTC).isoformat(), None)


# -- OIDC / JWT ------------------------------------------------------------------------
def test_a_jwt_signs_in_and_bad_ones_do_not(page: Any, world: World) -> None:
    jwks = world.jwks
    now = int(time.time())
    refused = {
        "expired": jwks.token("k1", exp=now - 120, iat=now - 900),
        "wrong audience": jwks.token("k1", aud="someone-else"),
        "unmapped group": jwks.token("k1", groups=["sales"]),
        "wrong issuer": jwks.token("k1", iss="http://127.0.0.1:1/"),
    }
    jwks.new_key("stranger", publish=False)
    refused["unknown key"] = jwks.token("stranger")
    for why, token in refused.items():
        sign_in(page, token)
        assert page.url.endswith("/console/sign-in"), why
        assert "not valid here" in page.inner_text("main"), why
    sign_in(page, jwks.token("k1"))  # positive control
    assert page.url.endswith("/console/projects")
    assert page.locator(f"section[data-project='{world.a.project}']").count() == 1
    # Its permissions are the mapping's: read, not write.
    page.goto(f"/console/p/{world.a.project}/facts/{world.plan_enterprise}")
    page.fill("#reason", "no")
    page.click("form.retract button")
    assert "does not grant project:write" in page.inner_text("main")
    # Key rotation: a token signed by a key published since is accepted (the JWKS is
    # fetched again for a key id it lacks).
    time.sleep(1.1)  # the provider's min_refetch_seconds
    jwks.new_key("k2")
    sign_in(page, jwks.token("k2", sub="operator-2"))
    assert page.url.endswith("/console/projects")


def test_the_same_jwt_is_a_bearer_token_of_the_api(world: World) -> None:
    token = world.jwks.token("k1", sub="api-user")
    with httpx.Client(base_url=world.base, timeout=30) as http:
        headers = {"Authorization": f"Bearer {token}"}
        projects = http.get("/v1/projects", headers=headers)
        assert projects.status_code == 200, projects.text
        assert [p["project_id"] for p in projects.json()["projects"]] == [str(world.a.project)]
        facts = http.get(f"/v1/projects/{world.a.project}/facts", headers=headers)
        assert facts.status_code == 200 and facts.json()["facts"]
        assert http.get(f"/v1/projects/{world.b.project}/facts", headers=headers).status_code == 404
        write = http.post(
            f"/v1/projects/{world.a.project}/facts", headers=headers, json={"facts": []}
        )
        assert write.status_code == 403  # the mapping grants project:read only
        expired = world.jwks.token("k1", exp=int(time.time()) - 120)
        for bad in (expired, world.jwks.token("k1", aud="other"), token[:-4] + "AAAA"):
            answer = http.get("/v1/projects", headers={"Authorization": f"Bearer {bad}"})
            assert answer.status_code == 401 and answer.json()["error"]["code"] == "unauthorized"
        # The API key path is unchanged.
        keyed = http.get("/v1/projects", headers={"Authorization": f"Bearer {world.a.token}"})
        assert keyed.status_code == 200


def test_unknown_key_ids_refetch_the_jwks_at_most_once_per_interval() -> None:
    jwks = Jwks()
    jwks.new_key("k1")
    provider = Provider(jwks.issuer, jwks.url, AUDIENCE, refetch_seconds=60)
    assert provider.key("k1").key_id == "k1" and jwks.hits == 1
    for kid in ("made-up-1", "made-up-2", "made-up-3"):
        with pytest.raises(JwtRefused):
            provider.key(kid)
    assert jwks.hits == 1  # no fetch within the interval, however many unknown ids
    assert provider.key("k1").key_id == "k1"  # positive control: known keys still work
    jwks.server.shutdown()


def test_pages_read_at_phone_width(browser: Any, world: World) -> None:
    context = browser.new_context(base_url=world.base, viewport={"width": 390, "height": 844})
    page = context.new_page()
    sign_in(page, world.reader)
    for path, name in (
        (f"/console/p/{world.a.project}", "phone-overview"),
        (f"/console/p/{world.a.project}/timeline?subject=user+42", "phone-timeline"),
    ):
        page.goto(path)
        # Nothing wider than the screen but the tables' own scrolling boxes.
        width = page.evaluate("() => document.documentElement.scrollWidth")
        assert width <= 390, (path, width)
        shot(page, name)
    context.close()
