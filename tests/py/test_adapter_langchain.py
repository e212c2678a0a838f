"""The LangChain adapter (chronomem_client.langchain, extra `langchain`) in a light
environment holding only the client and langchain-core, against a real `chronomem
serve`, through LangChain's own entry points: the chat history directly and under
RunnableWithMessageHistory, the retriever by `.invoke`/`.ainvoke` and in a chain, the
tools by `.invoke`.

Asserted: importing chronomem_client imports no LangChain; messages round-trip with
their roles; `clear` wipes the session; a superseded value is gone now and present
as_of before (retriever and tool); Documents carry fact ids, window, score, ranks;
history, retraction; another project's key and another org's key see none of it (each
with a positive control: its own identical data); bad tool arguments raise pydantic's
ValidationError and server refusals ToolException, never an httpx error. The example
of docs/integrations/langchain.md runs there too."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest
from api_server import make_tenant
from light_env import LightEnv, run_python

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import asyncio
import json
import sys

import chronomem_client
assert not [m for m in sys.modules if m.startswith("langchain")], "client imported langchain"

from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.runnables import RunnableLambda
from langchain_core.runnables.history import RunnableWithMessageHistory
from langchain_core.tools import ToolException
from pydantic import ValidationError

from chronomem_client import AsyncClient, ChronomemError, Client
from chronomem_client.langchain import (
    ChronomemChatMessageHistory,
    ChronomemRetriever,
    chronomem_tools,
)

base, token, project, stranger_token, stranger_project = sys.argv[1:]
memory = Client(base, token)

# --- chat history -------------------------------------------------------------------
history = ChronomemChatMessageHistory(memory, project, "lc chat")
assert history.messages == []  # a session not yet written
history.add_messages([
    SystemMessage("You are terse."),
    HumanMessage("I moved to Porto.", name="ana"),
    AIMessage("Noted."),
    ToolMessage("42", tool_call_id="call-1"),
])
history.add_user_message("And I switched to the pro plan.")
got = history.messages
assert [(type(m).__name__, m.content) for m in got] == [
    ("SystemMessage", "You are terse."),
    ("HumanMessage", "I moved to Porto."),
    ("AIMessage", "Noted."),
    ("ToolMessage", "42"),
    ("HumanMessage", "And I switched to the pro plan."),
], got
assert got[1].name == "ana" and got[3].tool_call_id == "call-1", got
roles = [m.role for m in memory.session_messages(project, "lc chat").messages]
assert roles == ["system", "user", "assistant", "tool", "user"], roles


async def async_history():
    async with AsyncClient(base, token) as amemory:
        h = ChronomemChatMessageHistory(memory, project, "lc async", async_client=amemory)
        await h.aadd_messages([HumanMessage("async hello")])
        assert [m.content for m in await h.aget_messages()] == ["async hello"]
        await h.aclear()
        assert await h.aget_messages() == []

asyncio.run(async_history())

seen = []


def reply(messages):
    seen.append(len(messages))
    return AIMessage(f"heard {len(messages)}")


chat = RunnableWithMessageHistory(
    RunnableLambda(reply), lambda sid: ChronomemChatMessageHistory(memory, project, sid)
)
config = {"configurable": {"session_id": "lc runnable"}}
assert chat.invoke([HumanMessage("hi")], config=config).content == "heard 1"
assert chat.invoke([HumanMessage("again")], config=config).content == "heard 3"
kept = ChronomemChatMessageHistory(memory, project, "lc runnable").messages
assert [m.content for m in kept] == ["hi", "heard 1", "again", "heard 3"], kept

history.clear()
assert history.messages == []
assert [m.content for m in ChronomemChatMessageHistory(memory, project, "lc runnable").messages]
print("history ok")

# --- retriever ------------------------------------------------------------------------
memory.declare_predicate(project, "plan", "one")
claim = {"subject": "lc user", "predicate": "plan", "valid_from": "2024-01-01"}
old = memory.assert_facts(project, [{**claim, "object": "basic"}]).results[0].fact_id
second = memory.assert_facts(project, [{**claim, "object": "pro", "valid_from": "2024-03-01"}])
assert second.superseded_count == 1, second
new = second.results[0].fact_id


def plans(docs):
    return [(d.metadata["fact_id"], d.metadata["object"]) for d in docs
            if d.metadata["kind"] == "fact" and d.metadata["predicate"] == "plan"]


now = ChronomemRetriever(client=memory, project=project, k=20)
docs = now.invoke("lc user plan basic pro")
assert plans(docs) == [(str(new), "pro")], docs
fact = next(d for d in docs if d.metadata.get("fact_id") == str(new))
assert fact.id == str(new) and "pro" in fact.page_content, fact
assert fact.metadata["valid_from"].startswith("2024-03-01") and fact.metadata["valid_until"] is None
assert isinstance(fact.metadata["score"], float) and fact.metadata["ranks"], fact.metadata

before = ChronomemRetriever(client=memory, project=project, k=20, as_of="2024-02-01")
then = [d for d in before.invoke("lc user plan basic pro") if d.metadata.get("fact_id") == str(old)]
assert len(then) == 1 and then[0].metadata["object"] == "basic", then
assert then[0].metadata["valid_until"].startswith("2024-03-01"), then[0].metadata
assert str(new) not in {d.metadata["id"] for d in before.invoke("lc user plan basic pro")}

chain = now | RunnableLambda(lambda ds: sorted(o for _, o in plans(ds)))
assert chain.invoke("lc user plan basic pro") == ["pro"]
ctx = ChronomemRetriever(client=memory, project=project, mode="context", as_of="2024-02-01")
assert ("%s" % old, "basic") in plans(ctx.invoke("lc user plan")), "context mode"


async def async_retrieve():
    async with AsyncClient(base, token) as amemory:
        r = ChronomemRetriever(async_client=amemory, project=project, k=20)
        return plans(await r.ainvoke("lc user plan basic pro"))

assert asyncio.run(async_retrieve()) == [(str(new), "pro")]
print("retriever ok")

# --- tools ----------------------------------------------------------------------------
tools = {t.name: t for t in chronomem_tools(memory, project)}
assert set(tools) == {"search_memory", "add_facts", "fact_history", "retract_fact"}, tools
added = json.loads(tools["add_facts"].invoke({"facts": [
    {"subject": "lc user", "predicate": "lives in", "object": "Gaia", "valid_from": "2024-01-01"}
]}))
assert added["inserted"] == 1, added
gaia = added["results"][0]["fact_id"]
hits = json.loads(tools["search_memory"].invoke({"query": "lc user lives in Gaia", "k": 20}))
assert gaia in {h["fact_id"] for h in hits if h["kind"] == "fact"}, hits
past = json.loads(tools["search_memory"].invoke(
    {"query": "lc user plan basic", "k": 20, "as_of": "2024-02-01"}))
assert str(old) in {h["id"] for h in past}, past
events = json.loads(tools["fact_history"].invoke({"fact_id": str(old)}))["events"]
assert len(events) >= 2 and events[-1]["new_fact_id"] == str(new), events
gone = json.loads(tools["retract_fact"].invoke({"fact_id": gaia, "reason": "wrong city"}))
assert gone["status"] == "retracted", gone
hits = json.loads(tools["search_memory"].invoke({"query": "lc user lives in Gaia", "k": 20}))
assert gaia not in {h["id"] for h in hits}, hits

bad = [
    ("search_memory", {"query": "x", "k": "lots"}),
    ("search_memory", {"k": 3}),
    ("add_facts", {"facts": []}),
    ("add_facts", {"facts": [{"subject": "s", "predicate": "p"}]}),
    ("fact_history", {"fact_id": "not-a-uuid"}),
    ("retract_fact", {"fact_id": gaia, "why": "extra"}),
]
for name, args in bad:
    try:
        tools[name].invoke(args)
    except ValidationError:
        continue
    raise AssertionError(f"{name} took {args}")
try:
    tools["retract_fact"].invoke({"fact_id": "00000000-0000-4000-8000-000000000000"})
except ToolException as err:
    assert isinstance(err.__cause__, ChronomemError) and err.__cause__.status == 404, err
else:
    raise AssertionError("retracting an unknown fact succeeded")
handled = chronomem_tools(memory, project)[2]
handled.handle_tool_error = True
assert "not_found" in handled.invoke({"fact_id": "00000000-0000-4000-8000-000000000000"})
print("tools ok")

# --- other keys -----------------------------------------------------------------------
other = memory.create_project("lc other " + project)
other_token = memory.create_api_key(
    other.project_id, "lc other", ["project:read", "project:write", "configuration:write"]
).token
mine = {str(old), str(new), gaia}
for who, key, own in (("same org, other project", other_token, str(other.project_id)),
                      ("other org", stranger_token, stranger_project)):
    with Client(base, key) as outsider:
        # Positive control: the same session name and claims, in its own project.
        h = ChronomemChatMessageHistory(outsider, own, "lc runnable")
        assert h.messages == [], who
        h.add_user_message("their own words")
        assert [m.content for m in h.messages] == ["their own words"], who
        outsider.declare_predicate(own, "plan", "one")
        outsider.assert_facts(own, [{**claim, "object": "pro"}])
        theirs = ChronomemRetriever(client=outsider, project=own, k=50).invoke("lc user plan pro")
        assert plans(theirs) and not {d.metadata["id"] for d in theirs} & mine, (who, theirs)
        # The tenant's project: refused, by the history, the retriever and the tools.
        for read in (lambda: ChronomemChatMessageHistory(outsider, project, "lc runnable").messages,
                     lambda: ChronomemRetriever(client=outsider, project=project).invoke("plan")):
            try:
                read()
            except ChronomemError as err:
                assert err.status in (403, 404), (who, err)
            else:
                raise AssertionError(who)
        foreign = {t.name: t for t in chronomem_tools(outsider, project)}
        for name, args in (("search_memory", {"query": "plan"}),
                           ("fact_history", {"fact_id": str(old)})):
            try:
                foreign[name].invoke(args)
            except ToolException:
                pass
            else:
                raise AssertionError((who, name))
        own_tools = chronomem_tools(outsider, own)
        try:
            own_tools[2].invoke({"fact_id": str(old)})
        except ToolException as err:
            assert "not_found" in str(err), err
        else:
            raise AssertionError(who)
        print(who, "sees nothing")
print("flow ok")
"""


# Built while the session's other tests run (tests/py/conftest.py).
LIGHT_ENV = LightEnv(extras=("langchain",))


@pytest.fixture(scope="module")
def langchain_python() -> Path:
    return LIGHT_ENV.python()


def test_the_light_environment_holds_langchain_core_and_not_the_server(
    langchain_python: Path,
) -> None:
    script = (
        "import importlib.util as u\n"
        "assert u.find_spec('langchain_core') is not None\n"
        "assert u.find_spec('chronomem_client.langchain') is not None\n"
        "present = [m for m in ('chronomem', 'thin_api', 'psycopg', 'fastapi', 'langchain')"
        " if u.find_spec(m) is not None]\n"
        "assert not present, present\n"
        "print('ok')\n"
    )
    result = run_python(langchain_python, script)
    assert result.returncode == 0 and result.stdout == "ok\n", result.stdout + result.stderr


def test_langchain_history_retriever_and_tools_against_a_real_server(
    langchain_python: Path, light_api: str, app_dsn: str
) -> None:
    tag = uuid.uuid4().hex[:8]
    tenant = make_tenant(app_dsn, f"lc {tag}")
    stranger = make_tenant(app_dsn, f"lc stranger {tag}")
    result = run_python(
        langchain_python,
        SCRIPT,
        light_api,
        tenant.token,
        str(tenant.project),
        stranger.token,
        str(stranger.project),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines() == [
        "history ok",
        "retriever ok",
        "tools ok",
        "same org, other project sees nothing",
        "other org sees nothing",
        "flow ok",
    ], result.stdout


def test_the_docs_example_runs(langchain_python: Path, light_api: str, app_dsn: str) -> None:
    page = (ROOT / "docs" / "integrations" / "langchain.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", page, flags=re.DOTALL)
    assert len(blocks) == 1, blocks  # positive control: the example was found
    tenant = make_tenant(app_dsn, f"lc docs {uuid.uuid4().hex[:8]}")
    script = f"TOKEN = {tenant.token!r}\n" + blocks[0].replace("http://127.0.0.1:8765", light_api)
    result = run_python(langchain_python, script)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == "3 messages so far\n['pro']\n['basic']\n", result.stdout
