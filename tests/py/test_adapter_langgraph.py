"""The LangGraph adapter (chronomem_client.langgraph.ChronomemStore) in a light
environment holding only the client and LangGraph (the client's `langgraph` extra),
against a real `chronomem serve`: a graph compiled with the store reads and writes it
from a node; a put of a new value supersedes (the old one is gone now and there as_of
before); delete, re-put, search, list_namespaces, batch ops, async; a store opened at
an instant refuses writes; bad namespaces raise LangGraph's own error; another org's
key sees none of it (positive control: its own item)."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest
from api_server import make_tenant
from light_env import ROOT, LightEnv, run_python

FLOW = """
import asyncio
import sys
import time
from datetime import UTC, datetime
from typing import TypedDict

import chronomem_client
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from langgraph.store.base import GetOp, InvalidNamespaceError, PutOp, SearchOp
from chronomem_client.langgraph import ChronomemStore, ReadOnlyStoreError

base, token, stranger = sys.argv[1:]
store = ChronomemStore(base, token)
ns = ("users", "u-42")


class State(TypedDict):
    food: str
    before: str


def remember(state: State, runtime: Runtime) -> dict:
    old = runtime.store.get(ns, "prefs")
    runtime.store.put(ns, "prefs", {"food": state["food"], "note": "Likes " + state["food"]})
    return {"before": old.value["food"] if old else "none"}


builder = StateGraph(State)
builder.add_node("remember", remember)
builder.add_edge(START, "remember")
builder.add_edge("remember", END)
graph = builder.compile(store=store)

assert graph.invoke({"food": "pizza", "before": ""})["before"] == "none"
time.sleep(0.05)
between = datetime.now(UTC)
time.sleep(0.05)
assert graph.invoke({"food": "sushi", "before": ""})["before"] == "pizza"

# Superseded: the new value now, the old one as_of before, both in the history.
now = store.get(ns, "prefs")
assert now.value["food"] == "sushi", now
assert now.created_at < now.updated_at, now
then = store.at(as_of=between).get(ns, "prefs")
assert then.value["food"] == "pizza", then
assert store.at(known_at=between).get(ns, "prefs").value["food"] == "pizza"
assert [i.value["food"] for i in store.history(ns, "prefs")] == ["pizza", "sushi"]
print("superseded")

# Read-only at an instant; LangGraph's errors for bad namespaces and ttl.
for bad in (
    lambda: store.at(as_of=between).put(ns, "x", {"a": 1}),
    lambda: store.at(as_of=between).delete(ns, "prefs"),
):
    try:
        bad()
        raise AssertionError("a read-only store wrote")
    except ReadOnlyStoreError as err:
        assert isinstance(err, NotImplementedError)
for bad in (
    lambda: store.put(("a.b",), "k", {"a": 1}),
    lambda: store.put((), "k", {"a": 1}),
    lambda: store.put(("langgraph",), "k", {"a": 1}),
    lambda: store.batch([GetOp(("x.y",), "k")]),
):
    try:
        bad()
        raise AssertionError("a bad namespace was taken")
    except InvalidNamespaceError:
        pass
try:
    store.put(ns, "k", {"a": 1}, ttl=5)
    raise AssertionError("ttl taken")
except NotImplementedError:
    pass
print("refused")

# Keys that a name normalization would fold together stay apart.
store.put(ns, "Key", {"v": "upper"})
store.put(ns, "key", {"v": "lower"})
store.put(("users", "u 42"), "key", {"v": "space"})
assert store.get(ns, "Key").value == {"v": "upper"}
assert store.get(ns, "key").value == {"v": "lower"}
assert store.get(("users", "u 42"), "key").value == {"v": "space"}

# Delete, then the same value again.
store.delete(ns, "key")
assert store.get(ns, "key") is None
store.put(ns, "key", {"v": "lower"})
assert store.get(ns, "key").value == {"v": "lower"}
store.delete(ns, "key")
print("deleted and re-put")

# Search: by prefix, filter, and a query through memory.search; namespaces.
store.put(("users", "u-7"), "prefs", {"food": "ramen", "note": "Likes ramen noodles"})
users = store.search(("users",))
assert {(i.namespace, i.key) for i in users} == {
    (ns, "prefs"), (ns, "Key"), (("users", "u 42"), "key"), (("users", "u-7"), "prefs")
}, users
assert [i.key for i in store.search(("users",), filter={"food": "ramen"})] == ["prefs"]
assert [i.namespace for i in store.search(("users",), filter={"food": "ramen"})] == [
    ("users", "u-7")
]
hits = store.search(("users",), query="ramen noodles")
assert hits and hits[0].value["food"] == "ramen" and hits[0].score is not None, hits
assert not store.search(("users", "u-42"), query="ramen noodles")
assert store.list_namespaces() == [("users", "u 42"), ("users", "u-42"), ("users", "u-7")]
assert store.list_namespaces(max_depth=1) == [("users",)]
assert store.list_namespaces(suffix=("u-7",)) == [("users", "u-7")]
assert store.at(as_of=between).list_namespaces() == [("users", "u-42")]
print("searched")

# Batch ops, in order.
got = store.batch([PutOp(("b",), "one", {"n": 1}), GetOp(("b",), "one"), SearchOp(("b",))])
assert got[0] is None and got[1].value == {"n": 1} and [i.key for i in got[2]] == ["one"]


async def main() -> None:
    await store.aput(("b",), "one", {"n": 2})
    assert (await store.aget(("b",), "one")).value == {"n": 2}
    assert [i.value for i in await store.asearch(("b",))] == [{"n": 2}]
    assert await store.alist_namespaces(prefix=("b",)) == [("b",)]
    await store.adelete(("b",), "one")
    assert await store.aget(("b",), "one") is None
    assert len(await store.ahistory(("b",), "one")) == 2
    out = await graph.ainvoke({"food": "tacos", "before": ""})
    assert out["before"] == "sushi", out
    await store.aclose()


asyncio.run(main())
print("async")

# Another org's key: its own item (positive control), none of ours.
other = ChronomemStore(base, stranger)
other.put(ns, "prefs", {"food": "kale"})
assert other.get(ns, "prefs").value == {"food": "kale"}
assert other.list_namespaces() == [ns]
assert not other.search(("users",), query="ramen noodles")
assert store.get(ns, "prefs").value["food"] == "tacos"
print("isolated")
"""


# Built while the session's other tests run (tests/py/conftest.py).
LIGHT_ENV = LightEnv(extras=("langgraph",))


@pytest.fixture(scope="module")
def light_python() -> Path:
    return LIGHT_ENV.python()


def test_importing_the_client_does_not_import_langgraph(light_python: Path) -> None:
    script = (
        "import sys, chronomem_client, chronomem_client.models\n"
        "assert 'langgraph' not in sys.modules and 'langchain_core' not in sys.modules\n"
        "import chronomem_client.langgraph\n"
        "assert 'langgraph' in sys.modules\n"  # positive control
        "print('ok')\n"
    )
    result = run_python(light_python, script)
    assert result.returncode == 0 and result.stdout == "ok\n", result.stdout + result.stderr


def test_a_graph_compiled_with_the_store_keeps_items_as_facts(
    light_python: Path, light_api: str, app_dsn: str
) -> None:
    tag = uuid.uuid4().hex[:8]
    tenant = make_tenant(app_dsn, f"langgraph {tag}")
    stranger = make_tenant(app_dsn, f"langgraph stranger {tag}")
    result = run_python(light_python, FLOW, light_api, tenant.token, stranger.token)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.split() == [
        "superseded",
        "refused",
        "deleted",
        "and",
        "re-put",
        "searched",
        "async",
        "isolated",
    ], result.stdout


def test_the_docs_example_runs_in_the_light_environment(
    light_python: Path, light_api: str, app_dsn: str
) -> None:
    page = (ROOT / "docs" / "integrations" / "langgraph.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", page, flags=re.DOTALL)
    assert len(blocks) == 1, blocks  # positive control: the example was found
    tenant = make_tenant(app_dsn, f"langgraph docs {uuid.uuid4().hex[:8]}")
    checks = """
prefs = ("users", "42"), "prefs"
assert store.get(*prefs).value == {"food": "sushi"}
assert store.at(as_of=before).get(*prefs).value == {"food": "pizza"}
assert [i.value["food"] for i in store.history(*prefs)] == ["pizza", "sushi"]
assert [i.value for i in store.search(("users",), query="sushi")] == [{"food": "sushi"}]
assert store.list_namespaces(prefix=("users",)) == [("users", "42")]
print("example ok")
"""
    script = f"TOKEN = {tenant.token!r}\n" + blocks[0].replace("http://127.0.0.1:8765", light_api)
    script += checks
    result = run_python(light_python, script)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == "example ok\n", result.stdout
