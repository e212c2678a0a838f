"""Webhook endpoints over HTTP against a real `chronomem serve` process: CRUD, the secret
shown once (at creation and rotation, never in a listing), the delivery log's pages,
the event types, another org's endpoint as 404 (with a positive control), permissions,
bad input as 422 naming the field, and one audit row per mutation."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any, get_args

import httpx
import psycopg
import pytest
from api_server import Tenant, api_server, make_tenant

from thin_api.models import WebhookEventType

SECRET = re.compile(r"whsec_[A-Za-z0-9+/]{32}")
# The API's vocabulary (the request models' Literal), which the database's
# memory.webhook_event_types() must list exactly (test_event_types).
ALL_TYPES = sorted(get_args(WebhookEventType))


@pytest.fixture(scope="module")
def base(app_dsn: str) -> Iterator[str]:
    with api_server(app_dsn) as url:
        yield url


@pytest.fixture(scope="module")
def http(base: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base, timeout=30) as client:
        yield client


@pytest.fixture(scope="module")
def tenant_a(app_dsn: str) -> Tenant:
    return make_tenant(app_dsn, "webhooks a")


@pytest.fixture(scope="module")
def tenant_b(app_dsn: str) -> Tenant:
    return make_tenant(app_dsn, "webhooks b")


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def hooks(t: Tenant) -> str:
    return f"/v1/projects/{t.project}/webhooks"


def create(http: httpx.Client, t: Tenant, **body: Any) -> dict[str, Any]:
    r = http.post(hooks(t), json={"url": "https://example.com/hook", **body}, headers=auth(t.token))
    assert r.status_code == 201, r.text
    made: dict[str, Any] = r.json()
    return made


def error(r: httpx.Response, status: int) -> dict[str, Any]:
    assert r.status_code == status, r.text
    err: dict[str, Any] = r.json()["error"]
    return err


def test_crud_and_secret_shown_once(http: httpx.Client, tenant_a: Tenant) -> None:
    t = tenant_a
    made = create(http, t, event_types=["fact.retracted", "fact.superseded"])
    wid = made["endpoint_id"]
    assert SECRET.fullmatch(made["secret"])
    assert made["project_id"] == str(t.project) and made["enabled"] is True
    assert made["event_types"] == ["fact.retracted", "fact.superseded"]
    # No event_types: every type, including types added later.
    every = create(http, t, url="http://127.0.0.1:9/all")
    assert every["event_types"] == ["*"]

    listed = http.get(hooks(t), headers=auth(t.token))
    assert listed.status_code == 200, listed.text
    rows = {w["endpoint_id"]: w for w in listed.json()["webhooks"]}
    assert {wid, every["endpoint_id"]} <= set(rows)
    assert made["secret"] not in listed.text and "secret" not in listed.text
    assert rows[wid]["url"] == "https://example.com/hook"

    patched = http.patch(
        f"{hooks(t)}/{wid}",
        json={"url": "https://example.org/v2", "event_types": ["memory.wiped"], "enabled": False},
        headers=auth(t.token),
    )
    assert patched.status_code == 200, patched.text
    p = patched.json()
    assert (p["url"], p["event_types"], p["enabled"]) == (
        "https://example.org/v2",
        ["memory.wiped"],
        False,
    )
    assert "secret" not in p
    # Absent fields are kept.
    again = http.patch(f"{hooks(t)}/{wid}", json={"enabled": True}, headers=auth(t.token)).json()
    assert (again["url"], again["event_types"], again["enabled"]) == (
        "https://example.org/v2",
        ["memory.wiped"],
        True,
    )
    star = http.patch(f"{hooks(t)}/{wid}", json={"event_types": ["*"]}, headers=auth(t.token))
    assert star.status_code == 200 and star.json()["event_types"] == ["*"], star.text

    rotated = http.post(f"{hooks(t)}/{wid}/rotate", headers=auth(t.token))
    assert rotated.status_code == 200, rotated.text
    new_secret = rotated.json()["secret"]
    assert SECRET.fullmatch(new_secret) and new_secret != made["secret"]
    assert new_secret not in http.get(hooks(t), headers=auth(t.token)).text
    # The worker signs with the new secret only.
    [target] = t.rows("select secret from memory_worker.webhook_target(%s)", (uuid.UUID(wid),))
    assert target["secret"] == new_secret

    deleted = http.delete(f"{hooks(t)}/{wid}", headers=auth(t.token))
    assert deleted.status_code == 200, deleted.text
    assert deleted.json() == {"endpoint_id": wid, "deleted": True}
    ids = [w["endpoint_id"] for w in http.get(hooks(t), headers=auth(t.token)).json()["webhooks"]]
    assert wid not in ids and every["endpoint_id"] in ids
    # Gone: a second delete, an update and a rotation are 404.
    for method, path in [
        ("DELETE", f"{hooks(t)}/{wid}"),
        ("PATCH", f"{hooks(t)}/{wid}"),
        ("POST", f"{hooks(t)}/{wid}/rotate"),
    ]:
        kw: dict[str, Any] = {"json": {}} if method == "PATCH" else {}
        r = http.request(method, path, headers=auth(t.token), **kw)
        assert error(r, 404)["code"] == "not_found"


def test_mutations_are_audited_without_secrets(
    http: httpx.Client, tenant_a: Tenant, admin_dsn: str
) -> None:
    t = tenant_a
    made = create(http, t)
    wid = made["endpoint_id"]
    http.patch(f"{hooks(t)}/{wid}", json={"enabled": False}, headers=auth(t.token))
    secret = http.post(f"{hooks(t)}/{wid}/rotate", headers=auth(t.token)).json()["secret"]
    http.delete(f"{hooks(t)}/{wid}", headers=auth(t.token))
    with psycopg.connect(admin_dsn) as conn:
        rows = conn.execute(
            "select action, actor, counts::text from memory.audit_log "
            "where resource = %s order by audit_id",
            (f"webhook:{wid}",),
        ).fetchall()
    assert [r[0] for r in rows] == [
        "webhook.create",
        "webhook.update",
        "webhook.rotate_secret",
        "webhook.delete",
    ]
    assert all(r[1] == f"api_key:{t.key_id}" for r in rows)
    assert not any(s in str(rows) for s in (made["secret"], secret, "example.com"))


def test_delivery_log_pages(http: httpx.Client, tenant_a: Tenant, admin_dsn: str) -> None:
    t = tenant_a
    wid = create(http, t)["endpoint_id"]
    other = create(http, t)["endpoint_id"]
    with psycopg.connect(admin_dsn) as conn:
        for endpoint, attempt, code, outcome in [
            (wid, 1, 503, "retrying"),
            (other, 1, 200, "delivered"),
            (wid, 2, 500, "retrying"),
            (wid, 3, 200, "delivered"),
        ]:
            conn.execute(
                "insert into memory.webhook_delivery_log (org_id, project_id, job_id, event_id, "
                "event_type, endpoint_id, attempt, status_code, outcome, duration_ms) "
                "values (%s, %s, 1, 'msg_test', 'fact.retracted', %s, %s, %s, %s, 12)",
                (t.org, t.project, endpoint, attempt, code, outcome),
            )
    path = f"{hooks(t)}/{wid}/deliveries"
    first = http.get(path, params={"limit": 2}, headers=auth(t.token))
    assert first.status_code == 200, first.text
    page = first.json()
    assert [d["attempt"] for d in page["deliveries"]] == [3, 2]  # newest first
    assert page["deliveries"][0]["outcome"] == "delivered"
    assert all(d["endpoint_id"] == wid for d in page["deliveries"])
    rest = http.get(
        path, params={"limit": 2, "before": page["next_cursor"]}, headers=auth(t.token)
    ).json()
    assert [d["attempt"] for d in rest["deliveries"]] == [1] and rest["next_cursor"] is None
    assert rest["deliveries"][0]["status_code"] == 503
    # A deleted endpoint's log stays readable.
    http.delete(f"{hooks(t)}/{wid}", headers=auth(t.token))
    kept = http.get(path, headers=auth(t.token)).json()["deliveries"]
    assert len(kept) == 3
    err = error(http.get(path, params={"limit": 0}, headers=auth(t.token)), 422)
    assert err["field"] == "limit"


def test_event_types(http: httpx.Client, tenant_a: Tenant) -> None:
    t = tenant_a
    r = http.get("/v1/webhook-event-types", headers=auth(t.token))
    assert r.status_code == 200, r.text
    assert sorted(e["event_type"] for e in r.json()["event_types"]) == ALL_TYPES
    assert all(e["description"] for e in r.json()["event_types"])
    # Needs configuration:read on the key's own project; a valid key.
    assert http.get("/v1/webhook-event-types").status_code == 401
    reader = t.key(["configuration:read"])
    assert http.get("/v1/webhook-event-types", headers=auth(reader)).status_code == 200
    writer_only = t.key(["project:write"])
    r = http.get("/v1/webhook-event-types", headers=auth(writer_only))
    assert error(r, 403)["code"] == "forbidden"


def test_permissions(http: httpx.Client, tenant_a: Tenant) -> None:
    t = tenant_a
    wid = create(http, t)["endpoint_id"]
    reader = t.key(["configuration:read"])
    assert http.get(hooks(t), headers=auth(reader)).status_code == 200
    assert http.get(f"{hooks(t)}/{wid}/deliveries", headers=auth(reader)).status_code == 200
    for method, path, body in [
        ("POST", hooks(t), {"url": "https://example.com/x"}),
        ("PATCH", f"{hooks(t)}/{wid}", {"enabled": False}),
        ("POST", f"{hooks(t)}/{wid}/rotate", None),
        ("DELETE", f"{hooks(t)}/{wid}", None),
    ]:
        r = http.request(method, path, json=body, headers=auth(reader))
        assert error(r, 403)["code"] == "forbidden", (method, path)
    project_rw = t.key(["project:read", "project:write"])
    assert error(http.get(hooks(t), headers=auth(project_rw)), 403)["code"] == "forbidden"
    writer = t.key(["configuration:write"])
    assert http.patch(f"{hooks(t)}/{wid}", json={"enabled": False}, headers=auth(writer)).is_success


def test_other_orgs_endpoint_is_not_found(
    http: httpx.Client, tenant_a: Tenant, tenant_b: Tenant
) -> None:
    a, b = tenant_a, tenant_b
    wid = create(http, a)["endpoint_id"]
    b_own = create(http, b)["endpoint_id"]
    attempts: list[tuple[str, str, dict[str, Any] | None]] = [
        ("PATCH", "{hooks}/{wid}", {"enabled": False}),
        ("POST", "{hooks}/{wid}/rotate", None),
        ("GET", "{hooks}/{wid}/deliveries", None),
        ("DELETE", "{hooks}/{wid}", None),
    ]
    for method, template, body in attempts:
        # Positive control: B does this to its own endpoint.
        own = http.request(
            method, template.format(hooks=hooks(b), wid=b_own), json=body, headers=auth(b.token)
        )
        assert own.is_success, (method, template, own.text)
        # A's endpoint id under B's project, and under A's project: not found either way.
        for project_hooks in (hooks(b), hooks(a)):
            r = http.request(
                method,
                template.format(hooks=project_hooks, wid=wid),
                json=body,
                headers=auth(b.token),
            )
            assert error(r, 404)["code"] == "not_found", (method, template, project_hooks)
    # B cannot list A's endpoints either, and A's endpoint is unchanged.
    assert error(http.get(hooks(a), headers=auth(b.token)), 404)["code"] == "not_found"
    [mine] = [
        w
        for w in http.get(hooks(a), headers=auth(a.token)).json()["webhooks"]
        if w["endpoint_id"] == wid
    ]
    assert mine["enabled"] is True
    assert wid not in http.get(hooks(b), headers=auth(b.token)).text


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"url": "ftp://example.com/x"}, "url"),
        ({"url": "not a url"}, "url"),
        ({"url": "https://exa mple.com/"}, "url"),
        ({"url": ""}, "url"),
        ({"url": "https://example.com/" + "x" * 2100}, "url"),
        ({}, "url"),
        ({"url": "https://example.com/x", "event_types": ["fact.exploded"]}, "event_types[0]"),
        ({"url": "https://example.com/x", "event_types": []}, "event_types"),
        ({"url": "https://example.com/x", "event_types": ["*", "memory.wiped"]}, "event_types"),
        ({"url": "https://example.com/x", "colour": "red"}, "colour"),
    ],
)
def test_bad_input_names_the_field(
    http: httpx.Client, tenant_a: Tenant, body: dict[str, Any], field: str
) -> None:
    r = http.post(hooks(tenant_a), json=body, headers=auth(tenant_a.token))
    err = error(r, 422)
    assert err["code"] == "invalid_request" and err["field"] == field, err


def test_bad_update_names_the_field(http: httpx.Client, tenant_a: Tenant) -> None:
    t = tenant_a
    wid = create(http, t)["endpoint_id"]
    for body, field in [
        ({"url": "gopher://example.com"}, "url"),
        ({"event_types": ["nope"]}, "event_types[0]"),
        ({"enabled": "sometimes"}, "enabled"),
    ]:
        err = error(http.patch(f"{hooks(t)}/{wid}", json=body, headers=auth(t.token)), 422)
        assert err["field"] == field, (body, err)
    bad_id = http.patch(f"{hooks(t)}/not-a-uuid", json={}, headers=auth(t.token))
    assert error(bad_id, 422)["field"] == "endpoint_id"
    # A body that is not even UTF-8 (schemathesis found this a 400 outside the schema).
    not_utf8 = http.patch(
        f"{hooks(t)}/{wid}",
        content=b"\xff\xfe{",
        headers={**auth(t.token), "Content-Type": "application/json"},
    )
    assert error(not_utf8, 422)["field"] == "body"
