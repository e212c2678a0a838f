"""The MCP server through the `mcp` SDK's own client: streamable HTTP at /mcp of a real
`chronomem serve` process (tools listed with their input schemas, each called for a
positive result, another org's project and a bad key refused), and stdio through
`chronomem mcp` spawned with CHRONOMEM_API_KEY."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import httpx2
import pytest
from api_server import Tenant, api_server, make_tenant
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult

TOOLS = {
    "add_memory",
    "memory_backlog",
    "memory_extraction_schema",
    "add_facts",
    "search_memory",
    "get_context",
    "list_facts",
    "fact_history",
    "subject_timeline",
    "recent_changes",
    "explore_graph",
    "retract_fact",
    "declare_predicate",
    "name_entity",
    "merge_entities",
    "split_entity",
    "list_conflicts",
    "get_conflict",
    "resolve_conflict",
    "review_fact",
}


@pytest.fixture(scope="module")
def base(app_dsn: str) -> Iterator[str]:
    with api_server(app_dsn) as url:
        yield url


@pytest.fixture(scope="module")
def tenant(app_dsn: str) -> Tenant:
    return make_tenant(app_dsn, "mcp")


@pytest.fixture(scope="module")
def other(app_dsn: str) -> Tenant:
    return make_tenant(app_dsn, "mcp other org")


@asynccontextmanager
async def http_client(
    base: str, token: str, statuses: list[int] | None = None
) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"}

    async def seen(response: httpx2.Response) -> None:
        if statuses is not None:
            statuses.append(response.status_code)

    async with (
        httpx2.AsyncClient(headers=headers, timeout=30, event_hooks={"response": [seen]}) as http,
        Client(streamable_http_client(f"{base}/mcp", http_client=http)) as client,
    ):
        yield client


def ok(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content
    data = result.structured_content
    assert isinstance(data, dict)
    # The text content is the same answer as JSON (for clients without structured output).
    assert json.loads(result.content[0].text) == data  # type: ignore[union-attr]
    return data


def error_text(result: CallToolResult) -> str:
    assert result.is_error
    text: str = result.content[0].text  # type: ignore[union-attr]
    return text


def test_tools_over_streamable_http(base: str, tenant: Tenant, other: Tenant) -> None:
    p = str(tenant.project)

    async def run() -> None:
        async with http_client(base, tenant.token) as mcp:
            tools = {t.name: t for t in (await mcp.list_tools()).tools}
            assert set(tools) == TOOLS
            for tool in tools.values():
                assert tool.description
                schema = tool.input_schema
                assert schema["type"] == "object" and "project_id" in schema["required"]
            assert {"as_of", "known_at"} <= set(tools["list_facts"].input_schema["properties"])
            assert "as_of" in tools["get_context"].input_schema["properties"]

            declared = ok(
                await mcp.call_tool(
                    "declare_predicate",
                    {"project_id": p, "predicate": "plan", "cardinality": "one"},
                )
            )
            assert (declared["predicate"], declared["cardinality"]) == ("plan", "one")

            first = ok(
                await mcp.call_tool(
                    "add_facts",
                    {
                        "project_id": p,
                        "facts": [
                            {
                                "subject": "user 42",
                                "predicate": "plan",
                                "object": "pro",
                                "valid_from": "2024-01-01T00:00:00Z",
                            }
                        ],
                    },
                )
            )
            assert first["inserted"] == 1
            pro = first["results"][0]["fact_id"]
            second = ok(
                await mcp.call_tool(
                    "add_facts",
                    {
                        "project_id": p,
                        "facts": [
                            {
                                "subject": "user 42",
                                "predicate": "plan",
                                "object": "enterprise",
                                "valid_from": "2024-03-01",
                            }
                        ],
                    },
                )
            )
            assert (second["inserted"], second["superseded_count"]) == (1, 1)
            enterprise = second["results"][0]["fact_id"]

            now = ok(await mcp.call_tool("list_facts", {"project_id": p, "subject": "user 42"}))
            assert [f["object"] for f in now["facts"]] == ["enterprise"]
            then = ok(await mcp.call_tool("list_facts", {"project_id": p, "as_of": "2024-02-01"}))
            assert [f["fact_id"] for f in then["facts"]] == [pro]

            history = ok(await mcp.call_tool("fact_history", {"project_id": p, "fact_id": pro}))
            assert any(
                e["event_type"] == "superseded" and e["new_fact_id"] == enterprise
                for e in history["events"]
            ), history
            # When did user 42's plan change? Both versions in world-time order, the
            # first ended where the second began.
            timeline = ok(
                await mcp.call_tool(
                    "subject_timeline", {"project_id": p, "subject": "User 42", "predicate": "plan"}
                )
            )
            assert [(f["object"], f["status"]) for f in timeline["facts"]] == [
                ("pro", "ended"),
                ("enterprise", "current"),
            ], timeline
            assert [(e["event"], e["new_fact_id"]) for e in timeline["facts"][0]["events"]] == [
                ("asserted", pro),
                ("superseded", enterprise),
            ], timeline
            assert timeline["facts"][0]["window_until"] == timeline["facts"][1]["window_from"]
            # What the memory learned since the first batch was written: the closure of
            # pro and the assertion of enterprise, oldest first.
            first_at = history["events"][0]["occurred_at"]
            changes = ok(
                await mcp.call_tool("recent_changes", {"project_id": p, "since": first_at})
            )
            assert [(c["event_type"], c["object"]) for c in changes["changes"]] == [
                ("superseded", "pro"),
                ("asserted", "enterprise"),
            ], changes
            # "Recent" needs an instant: without one the tool says so.
            assert "since" in error_text(await mcp.call_tool("recent_changes", {"project_id": p}))
            assert timeline["facts"][1]["window_from"].startswith("2024-03-01")
            other_predicate = ok(
                await mcp.call_tool(
                    "subject_timeline",
                    {"project_id": p, "subject": "user 42", "predicate": "likes"},
                )
            )
            assert other_predicate["facts"] == [], other_predicate

            context = ok(
                await mcp.call_tool(
                    "get_context", {"project_id": p, "query": "what plan is user 42 on?"}
                )
            )
            assert "enterprise" in context["text"]
            past = ok(
                await mcp.call_tool(
                    "get_context",
                    {"project_id": p, "query": "user 42 plan", "as_of": "2024-02-01"},
                )
            )
            assert "pro" in past["text"] and "enterprise" not in past["text"]

            found = ok(await mcp.call_tool("search_memory", {"project_id": p, "query": "plan"}))
            assert enterprise in [hit["id"] for hit in found["results"]]
            rrf = ok(
                await mcp.call_tool(
                    "search_memory", {"project_id": p, "query": "plan", "fusion": "rrf"}
                )
            )
            assert enterprise in [hit["id"] for hit in rrf["results"]]
            assert all(
                abs(hit["score"] - sum(1 / (60 + r) for r in hit["ranks"].values())) < 1e-6
                for hit in rrf["results"]
            )

            # A plain name written before its entity: naming the entity with that alias
            # makes the fact the entity's.
            ok(
                await mcp.call_tool(
                    "add_facts",
                    {"project_id": p, "facts": [
                        {"subject": "user 42", "predicate": "works at", "object": "ACME Corp"}
                    ]},
                )
            )  # fmt: skip
            named = ok(
                await mcp.call_tool(
                    "name_entity", {"project_id": p, "name": "Acme", "aliases": ["ACME Corp"]}
                )
            )
            assert (named["name"], named["aliases"]) == ("Acme", ["ACME Corp"])
            works = ok(await mcp.call_tool("list_facts", {"project_id": p, "subject": "user 42"}))
            assert {(f["object"], f["object_entity_id"]) for f in works["facts"]} >= {
                ("Acme", named["entity_id"])
            }
            # Acme Inc turns out to be Acme: user 43's employer is Acme, Acme Inc a name of it.
            ok(
                await mcp.call_tool(
                    "add_facts",
                    {"project_id": p, "facts": [
                        {"subject": "user 43", "predicate": "works at", "object": "Acme Inc",
                         "object_type": "entity"}
                    ]},
                )
            )  # fmt: skip
            merged = ok(
                await mcp.call_tool(
                    "merge_entities", {"project_id": p, "keep": "Acme", "absorb": "Acme Inc"}
                )
            )
            assert (merged["entity"]["aliases"], merged["facts_rekeyed"]) == (
                ["ACME Corp", "Acme Inc"],
                1,
            )
            works = ok(await mcp.call_tool("list_facts", {"project_id": p, "subject": "user 43"}))
            assert [f["object_entity_id"] for f in works["facts"]] == [named["entity_id"]]
            split = ok(await mcp.call_tool("split_entity", {"project_id": p, "name": "Acme Inc"}))
            assert (split["entity"]["name"], split["facts_moved"]) == ("Acme Inc", 1)
            works = ok(await mcp.call_tool("list_facts", {"project_id": p, "subject": "user 43"}))
            assert [f["object"] for f in works["facts"]] == ["Acme Inc"]

            # The graph at an instant: Ann has known Ben since May 2024.
            ok(
                await mcp.call_tool(
                    "add_facts",
                    {"project_id": p, "facts": [
                        {"subject": "Ann", "predicate": "knows", "object": "Ben",
                         "object_type": "entity", "valid_from": "2024-05-01"}
                    ]},
                )
            )  # fmt: skip
            graph = ok(await mcp.call_tool("explore_graph", {"project_id": p, "entity": "ann"}))
            assert [n["name"] for n in graph["nodes"]] == ["Ann", "Ben"]
            assert [e["relation"] for e in graph["edges"]] == ["knows"]
            before = ok(
                await mcp.call_tool(
                    "explore_graph", {"project_id": p, "entity": "Ann", "as_of": "2024-04-01"}
                )
            )
            assert [n["name"] for n in before["nodes"]] == ["Ann"] and before["edges"] == []
            text = error_text(
                await mcp.call_tool("explore_graph", {"project_id": p, "entity": "Nobody"})
            )
            assert "not_found" in text, text
            text = error_text(
                await mcp.call_tool("explore_graph", {"project_id": p, "entity": "Ann", "depth": 4})
            )
            assert "depth" in text, text

            added = ok(
                await mcp.call_tool(
                    "add_memory",
                    {
                        "project_id": p,
                        "session": "s1",
                        "messages": [{"role": "user", "content": "I moved to Berlin"}],
                    },
                )
            )
            assert len(added["episode_ids"]) == 1 and added["replayed"] is False
            # No worker runs here: the message waits for extraction.
            backlog = ok(await mcp.call_tool("memory_backlog", {"project_id": p}))
            assert backlog["caught_up"] is False and backlog["kinds"]["enrich"]["queued"] == 1

            retracted = ok(
                await mcp.call_tool(
                    "retract_fact",
                    {"project_id": p, "fact_id": enterprise, "reason": "entered by mistake"},
                )
            )
            assert retracted["status"] == "retracted" and retracted["restored"] == [pro]
            after = ok(await mcp.call_tool("list_facts", {"project_id": p}))
            assert enterprise not in [f["fact_id"] for f in after["facts"]]

            # Negatives: another org's project is not found; bad input is named; the
            # session goes on after each.
            for name, args in [
                ("list_facts", {"project_id": str(other.project)}),
                ("add_facts", {"project_id": str(other.project), "facts": []}),
                ("fact_history", {"project_id": p, "fact_id": str(uuid.uuid4())}),
                ("subject_timeline", {"project_id": str(other.project), "subject": "user 42"}),
            ]:
                text = error_text(await mcp.call_tool(name, args))
                assert "not_found" in text, (name, text)
            text = error_text(
                await mcp.call_tool(
                    "add_memory",
                    {
                        "project_id": p,
                        "session": "",
                        "messages": [{"role": "user", "content": "x"}],
                    },
                )
            )
            assert "invalid_request" in text and "session" in text
            text = error_text(await mcp.call_tool("list_facts", {"project_id": "not-a-uuid"}))
            assert "project_id" in text
            assert ok(await mcp.call_tool("list_facts", {"project_id": p}))["facts"]

        # A read-only key: reads work, writes are refused with the permission named.
        reader = tenant.key(["project:read"])
        async with http_client(base, reader) as mcp:
            assert ok(await mcp.call_tool("list_facts", {"project_id": p}))["facts"]
            text = error_text(
                await mcp.call_tool("retract_fact", {"project_id": p, "fact_id": pro})
            )
            assert "forbidden" in text and "project:write" in text

        # The other org sees its own project, and not this one.
        async with http_client(base, other.token) as mcp:
            assert ok(await mcp.call_tool("list_facts", {"project_id": str(other.project)}))
            text = error_text(await mcp.call_tool("list_facts", {"project_id": p}))
            assert "not_found" in text

    asyncio.run(run())


def test_bad_token_is_401(base: str, tenant: Tenant) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    bad = f"cmk_{uuid.uuid4().hex}_{'0' * 64}"
    for headers in [{}, {"Authorization": f"Bearer {bad}"}, {"Authorization": "Bearer x"}]:
        r = httpx.post(f"{base}/mcp", json=body, headers=headers)
        assert r.status_code == 401
        assert r.json() == {
            "error": {
                "code": "unauthorized",
                "message": "missing or invalid API key",
                "field": None,
            }
        }

    # The SDK's client cannot connect with it: the server answered 401.
    statuses: list[int] = []

    async def run() -> None:
        async with http_client(base, bad, statuses) as mcp:
            await mcp.list_tools()

    with pytest.raises(Exception):  # noqa: B017 (the SDK wraps it in exception groups)
        asyncio.run(run())
    assert statuses and set(statuses) == {401}


def test_stdio(app_dsn: str, tenant: Tenant) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "chronomem", "mcp"],
        env={
            **os.environ,
            "CHRONOMEM_API_KEY": tenant.token,
            "CHRONOMEM_API_DSN": app_dsn,
            "CHRONOMEM_API_QUERY_EMBEDDINGS": "off",
        },
    )

    async def run() -> None:
        async with Client(params) as mcp:
            assert {t.name for t in (await mcp.list_tools()).tools} == TOOLS
            added = ok(
                await mcp.call_tool(
                    "add_facts",
                    {
                        "project_id": str(tenant.project),
                        "facts": [{"subject": "stdio", "predicate": "likes", "object": "pipes"}],
                    },
                )
            )
            assert added["inserted"] == 1
            listed = ok(
                await mcp.call_tool(
                    "list_facts", {"project_id": str(tenant.project), "subject": "stdio"}
                )
            )
            assert [f["object"] for f in listed["facts"]] == ["pipes"]
            text = error_text(await mcp.call_tool("list_facts", {"project_id": str(uuid.uuid4())}))
            assert "not_found" in text

    asyncio.run(run())


def test_stdio_refuses_a_bad_key(app_dsn: str) -> None:
    import subprocess

    env = {**os.environ, "CHRONOMEM_API_KEY": "cmk_bad", "CHRONOMEM_API_DSN": app_dsn}
    done = subprocess.run(
        [sys.executable, "-m", "chronomem", "mcp"],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2 and "invalid API key" in done.stderr and done.stdout == ""


def test_mcp_and_http_refuse_the_same_call_with_the_same_key(base: str, tenant: Tenant) -> None:
    """One key, one call, over MCP and over its HTTP route: both refused the same way,
    naming the same permission, by the database's authorization (memory_http.authorize);
    with a key that grants it, both succeed (positive control)."""
    p = str(tenant.project)
    fact = {"subject": "Refusal", "predicate": "likes", "object": "tea"}
    calls = [
        # (tool, its arguments, method, route, body, the permission both need)
        ("list_facts", {"project_id": p}, "GET", f"/v1/projects/{p}/facts", None, "project:read"),
        ("add_facts", {"project_id": p, "facts": [fact]}, "POST", f"/v1/projects/{p}/facts",
         {"facts": [fact]}, "project:write"),
        ("declare_predicate", {"project_id": p, "predicate": "likes", "cardinality": "many"},
         "PUT", f"/v1/projects/{p}/predicates/likes", {"cardinality": "many"},
         "configuration:write"),
    ]  # fmt: skip
    narrow = tenant.key(["members:read"])  # grants none of them

    async def run() -> None:
        for token, refused in ((narrow, True), (tenant.token, False)):
            headers = {"Authorization": f"Bearer {token}"}
            async with http_client(base, token) as mcp:
                for tool, args, method, route, body, permission in calls:
                    result = await mcp.call_tool(tool, args)
                    answer = httpx.request(method, base + route, json=body, headers=headers)
                    if refused:
                        text = error_text(result)
                        assert "forbidden" in text and permission in text, (tool, text)
                        error = answer.json()["error"]
                        assert answer.status_code == 403, (route, answer.text)
                        assert error["code"] == "forbidden" and permission in error["message"]
                    else:
                        ok(result)
                        assert answer.status_code == 200, (route, answer.text)

    asyncio.run(run())


def test_extraction_schema_tool(base: str, app_dsn: str) -> None:
    """memory_extraction_schema reads the version PUT stored; before one, a not_found."""
    tenant = make_tenant(app_dsn, "mcp extraction schema")
    p = str(tenant.project)

    async def run() -> None:
        async with http_client(base, tenant.token) as mcp:
            text = error_text(await mcp.call_tool("memory_extraction_schema", {"project_id": p}))
            assert "not_found" in text, text
            doc = {"predicates": [{"name": "works_at", "cardinality": "one"}]}
            put = httpx.put(
                f"{base}/v1/projects/{p}/extraction-schema",
                json=doc,
                headers={"Authorization": f"Bearer {tenant.token}"},
            )
            assert put.status_code == 200, put.text
            got = ok(await mcp.call_tool("memory_extraction_schema", {"project_id": p}))
            assert got["version"] == 1
            assert got["document"]["predicates"] == [{"name": "works_at", "cardinality": "one"}]

    asyncio.run(run())
