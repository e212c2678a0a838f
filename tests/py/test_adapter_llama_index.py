"""The LlamaIndex adapter (chronomem_client.llama_index, extra `llama-index`) in a light
environment holding only the client, llama-index-core and LlamaIndex's OpenAI-like LLM,
against a real `chronomem serve`, through LlamaIndex's own entry points: the retriever
by `retrieve`/`aretrieve` and under a `RetrieverQueryEngine`, the memory block inside
`Memory.from_defaults(memory_blocks=[...])` by `put_messages`/`get` (and their async
forms) and under a `SimpleChatEngine`. The LLM is a scripted OpenAI-compatible server
started in this process (EchoModel below, over tests/py/scripted_openai.py): it answers
every message it was sent, so an answer shows what the model read.

Asserted: importing chronomem_client imports no LlamaIndex; a superseded value is gone
now and present as_of before (and at a known_at before its successor was written);
nodes carry the fact's ids, triple, validity and record windows, score and ranks, and
the LLM reads the windows but not the ids; a retracted fact is gone now and its record
window closed at a known_at before; the memory block ingests the messages the Memory
flushes (exactly those it archived) into a Chronomem session, and answers the project's
context for the latest message; another project's key and another org's key see none
of it (each with a positive control: its own identical data); bad arguments raise
ValueError, never an httpx error. The example of docs/integrations/llama_index.md runs
there too."""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

import pytest
from api_server import make_tenant
from light_env import ROOT, LightEnv, run_python, run_with_tenants
from scripted_openai import ScriptedOpenAI

EXTRA = "llama-index"
# The LLM of the query and chat engines, pointed at the scripted server; not part of
# the extra (the adapter needs no LLM).
OPENAI_LIKE = "llama-index-llms-openai-like>=0.8,<0.9"


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


class EchoModel(ScriptedOpenAI):
    """Answers a chat completion with "seen:" and the text of every message it holds."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[dict[str, Any]] = []

    def _chat(self, body: dict[str, Any]) -> tuple[int, dict[str, str], dict[str, Any]]:
        with self._lock:
            self.requests.append(body)
        seen = "\n".join(f"[{m['role']}] {_text(m.get('content'))}" for m in body["messages"])
        return (
            200,
            {},
            {
                "id": "chatcmpl-echo",
                "object": "chat.completion",
                "created": 0,
                "model": body.get("model", "scripted"),
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "seen:\n" + seen},
                        "finish_reason": "stop",
                        "logprobs": None,
                    }
                ],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            },
        )


SCRIPT = r"""
import asyncio
import sys
import time
from datetime import UTC, datetime

import chronomem_client
assert not [m for m in sys.modules if m.startswith("llama_index")], "client imported llama_index"

import httpx
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.chat_engine import SimpleChatEngine
from llama_index.core.memory import Memory
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import MetadataMode
from llama_index.core.storage.chat_store.sql import MessageStatus
from llama_index.llms.openai_like import OpenAILike

from chronomem_client import AsyncClient, ChronomemError, Client
from chronomem_client.llama_index import ChronomemMemoryBlock, ChronomemRetriever

model_url, base, token, project, stranger_token, stranger_project = sys.argv[1:]
memory = Client(base, token)
llm = OpenAILike(model="scripted", api_base=model_url, api_key="unused", is_chat_model=True)
QUERY = "li user plan basic pro"


def plans(nodes):
    return [(n.node.metadata["fact_id"], n.node.metadata["object"]) for n in nodes
            if n.node.metadata["kind"] == "fact" and n.node.metadata["predicate"] == "plan"]


# --- retriever: supersession, as_of, known_at, metadata ------------------------------
memory.declare_predicate(project, "plan", "one")
claim = {"subject": "li user", "predicate": "plan"}
old = str(memory.assert_facts(
    project, [{**claim, "object": "basic", "valid_from": "2024-01-01"}]).results[0].fact_id)
time.sleep(0.05)
between = datetime.now(UTC)
time.sleep(0.05)
second = memory.assert_facts(project, [{**claim, "object": "pro", "valid_from": "2024-03-01"}])
assert second.superseded_count == 1, second
new = str(second.results[0].fact_id)

now = ChronomemRetriever(client=memory, project=project, k=20)
nodes = now.retrieve(QUERY)
assert plans(nodes) == [(new, "pro")], nodes
hit = next(n for n in nodes if n.node.node_id == new)
meta = hit.node.metadata
assert meta["id"] == meta["fact_id"] == new and meta["subject"] == "li user", meta
assert meta["valid_from"].startswith("2024-03-01") and meta["valid_until"] is None, meta
recorded = datetime.fromisoformat(meta["recorded_at"])
assert between < recorded <= datetime.now(UTC) and meta["retracted_at"] is None, meta
assert isinstance(hit.score, float) and meta["score"] == hit.score, (hit.score, meta)
assert any(k.startswith("rank_") for k in meta) and meta["known_at"] and meta["as_of"], meta
assert all(isinstance(v, (str, int, float, type(None))) for v in meta.values()), meta
llm_view = hit.node.get_content(MetadataMode.LLM)
assert "pro" in llm_view and "valid_from: 2024-03-01" in llm_view, llm_view
assert new not in llm_view and "rank_" not in llm_view, llm_view

before = ChronomemRetriever(client=memory, project=project, k=20, as_of="2024-02-01")
then = before.retrieve(QUERY)
assert plans(then) == [(old, "basic")], then
old_meta = next(n.node.metadata for n in then if n.node.node_id == old)
assert old_meta["valid_until"].startswith("2024-03-01"), old_meta
assert old_meta["as_of"].startswith("2024-02-01"), old_meta
believed = ChronomemRetriever(client=memory, project=project, k=20, known_at=between)
was = next(n.node.metadata for n in believed.retrieve(QUERY) if n.node.node_id == old)
assert was["valid_until"] is None, was  # before "pro" was written, "basic" had no end
events = memory.fact_history(project, old).events
assert str(events[-1].new_fact_id) == new, events

ctx = ChronomemRetriever(client=memory, project=project, mode="context", as_of="2024-02-01")
assert (old, "basic") in plans(ctx.retrieve("li user plan")), "context mode"
print("retriever ok")

# --- retraction: gone now, its record window closed as seen from before ---------------
gaia = str(memory.assert_facts(project, [
    {"subject": "li user", "predicate": "lives in", "object": "Gaia", "valid_from": "2024-01-01"}
]).results[0].fact_id)
time.sleep(0.05)
written = datetime.now(UTC)
time.sleep(0.05)
assert memory.retract_fact(project, gaia, "wrong city").status == "retracted"
assert gaia not in {n.node.node_id for n in now.retrieve("li user lives in Gaia")}
past = ChronomemRetriever(client=memory, project=project, k=20, known_at=written)
kept = next(n.node.metadata for n in past.retrieve("li user Gaia") if n.node.node_id == gaia)
assert kept["retracted_at"] is not None and kept["recorded_at"] < kept["retracted_at"], kept
print("retraction ok")

# --- under a query engine: the model reads what the retriever found -------------------
answer = RetrieverQueryEngine.from_args(now, llm=llm).query("Which plan is li user on?")
assert "li user plan pro" in str(answer), str(answer)
assert "li user plan basic" not in str(answer), str(answer)
assert new in {n.node.node_id for n in answer.source_nodes}, answer.source_nodes
answer = RetrieverQueryEngine.from_args(before, llm=llm).query("Which plan is li user on?")
assert "li user plan basic" in str(answer), str(answer)
assert "li user plan pro" not in str(answer), str(answer)
print("query engine ok")

# --- memory block: flushed messages become a session; get answers the context ---------
block = ChronomemMemoryBlock(client=memory, project=project)
chat = Memory.from_defaults(
    session_id="li chat", token_limit=120, chat_history_token_ratio=0.5, token_flush_size=20,
    memory_blocks=[block],
)
turns = [
    ChatMessage(role="user", content="Hello there, I am the li user and I live in Porto."),
    ChatMessage(role="assistant", content="Nice to meet you, li user from Porto, welcome."),
    ChatMessage(role="user", content="I switched my plan from basic to the pro plan."),
    ChatMessage(role="assistant", content="Noted: the pro plan is now your current plan."),
    ChatMessage(role="user", content="Please remember that I prefer short answers."),
    ChatMessage(role="assistant", content="Understood, I will keep my answers short."),
]
chat.put_messages(turns)


# The session's messages, and the ones the Memory archived (both as (role, text)).
def flushed(client, project_id, session, chat_memory):
    stored = client.session_messages(project_id, session).messages
    gone = chat_memory.get_all(status=MessageStatus.ARCHIVED)
    return [(m.role, m.content) for m in stored], [(m.role.value, m.content) for m in gone]


stored, archived = flushed(memory, project, "li chat", chat)
assert len(archived) >= 2, archived  # positive control: the Memory did flush
assert stored == archived, (stored, archived)
page = memory.session_messages(project, "li chat").messages
assert [m.metadata["llama_index_role"] for m in page] == [r for r, _ in archived], page
enrich = memory.backlog(project).kinds["enrich"]
assert enrich.queued + enrich.waiting + enrich.running >= 1, enrich  # for the worker

got = chat.get(input="Which plan is li user on?")
system = got[0]
assert system.role == "system" and "<chronomem>" in system.content, got
assert "li user plan pro (valid 2024-03-01" in system.content, system.content
assert "li user plan basic" not in system.content, system.content
assert got[-1].content == turns[-1].content, got  # the short-term queue follows
then_block = ChronomemMemoryBlock(name="then", client=memory, project=project, as_of="2024-02-01")
then_chat = Memory.from_defaults(session_id="li then", memory_blocks=[then_block])
assert "li user plan basic" in then_chat.get(input="Which plan is li user on?")[0].content

fixed = ChronomemMemoryBlock(client=memory, project=project, session="li fixed")
fixed_chat = Memory.from_defaults(
    session_id="ignored", token_limit=120, chat_history_token_ratio=0.5, token_flush_size=20,
    memory_blocks=[fixed],
)
fixed_chat.put_messages(turns)
stored, archived = flushed(memory, project, "li fixed", fixed_chat)
assert archived and stored == archived, (stored, archived)

engine = SimpleChatEngine.from_defaults(llm=llm, memory=chat)
reply = engine.chat("Which plan is li user on?").response
assert "<chronomem>" in reply and "li user plan pro" in reply, reply
print("memory block ok")

# --- bad arguments: ValueError, before any request or from the server's refusal ------
P = {"client": memory, "project": project}
for kwargs in ({"k": 0}, {"k": 201}, {"k": "5"}, {"as_of": "yesterday"},
               {"known_at": "2024-13-01"}, {"legs": ["nope"]}, {"mode": "graph"},
               {"mode": "context", "max_tokens": 10}, {"mode": "context", "legs": ["entity"]},
               {"project": "not-a-uuid"}, {"client": None}, {"client": "http://x"}):
    try:
        ChronomemRetriever(**{**P, **kwargs})
    except ValueError as err:
        assert not isinstance(err, httpx.HTTPError), err
    else:
        raise AssertionError(f"ChronomemRetriever took {kwargs}")
for kwargs in ({"k": 0}, {"as_of": "yesterday"}, {"max_tokens": 10}, {"session": ""},
               {"session": "x" * 201}, {"project": "not-a-uuid"}, {"client": None},
               {"retrieval_context_window": 0}):
    try:
        ChronomemMemoryBlock(**{**P, **kwargs})
    except ValueError:
        pass
    else:
        raise AssertionError(f"ChronomemMemoryBlock took {kwargs}")
try:
    now.retrieve("x" * 10_001)  # the server's refusal (422)
except ValueError as err:
    assert isinstance(err.__cause__, ChronomemError) and err.__cause__.status == 422, err
else:
    raise AssertionError("a query over 10000 characters was taken")
try:
    ChronomemRetriever(async_client=AsyncClient(base, token), project=project).retrieve("x")
except ValueError:
    pass
else:
    raise AssertionError("a sync retrieve without a sync client")
print("bad arguments ok")

# --- other keys -----------------------------------------------------------------------
other = memory.create_project("li other " + project)
other_token = memory.create_api_key(
    other.project_id, "li other", ["project:read", "project:write", "configuration:write"]
).token
mine = {old, new, gaia}
for who, key, own in (("same org, other project", other_token, str(other.project_id)),
                      ("other org", stranger_token, stranger_project)):
    with Client(base, key) as outsider:
        # Positive control: the same claim and session name, in its own project.
        outsider.declare_predicate(own, "plan", "one")
        theirs = outsider.assert_facts(own, [{**claim, "object": "pro"}]).results[0].fact_id
        found = ChronomemRetriever(client=outsider, project=own, k=50).retrieve(QUERY)
        assert plans(found) == [(str(theirs), "pro")], (who, found)
        assert not {n.node.node_id for n in found} & mine, (who, found)
        their_chat = Memory.from_defaults(
            session_id="li chat", token_limit=120, chat_history_token_ratio=0.5,
            token_flush_size=20, memory_blocks=[ChronomemMemoryBlock(client=outsider, project=own)],
        )
        their_chat.put_messages(turns)
        stored, archived = flushed(outsider, own, "li chat", their_chat)
        assert archived and stored == archived, (who, stored, archived)
        # The tenant's project: refused, by the retriever and by the memory block (its
        # get and its flush, through a Memory).
        foreign = Memory.from_defaults(
            session_id="li chat", token_limit=120, chat_history_token_ratio=0.5,
            token_flush_size=20,
            memory_blocks=[ChronomemMemoryBlock(client=outsider, project=project)],
        )
        for read in (lambda: ChronomemRetriever(client=outsider, project=project).retrieve(QUERY),
                     lambda: foreign.get(input="Which plan is li user on?"),
                     lambda: foreign.put_messages(turns)):
            try:
                read()
            except (ValueError, PermissionError) as err:
                assert isinstance(err.__cause__, ChronomemError), (who, err)
                assert err.__cause__.status in (403, 404), (who, err.__cause__)
            else:
                raise AssertionError(who)
        print(who, "sees nothing")
stored, archived = flushed(memory, project, "li chat", chat)
assert stored == archived, (stored, archived)  # nothing of theirs in it


# --- async: AsyncClient for aretrieve and the block; the sync client in a thread ------
async def main():
    async with AsyncClient(base, token) as amemory:
        r = ChronomemRetriever(async_client=amemory, project=project, k=20)
        assert plans(await r.aretrieve(QUERY)) == [(new, "pro")]
        assert plans(await before.aretrieve(QUERY)) == [(old, "basic")]  # sync client, thread
        achat = Memory.from_defaults(
            session_id="li async", token_limit=120, chat_history_token_ratio=0.5,
            token_flush_size=20,
            memory_blocks=[ChronomemMemoryBlock(async_client=amemory, project=project)],
        )
        await achat.aput_messages(turns)
        stored = (await amemory.session_messages(project, "li async")).messages
        archived = await achat.aget_all(status=MessageStatus.ARCHIVED)
        assert archived and [m.content for m in stored] == [m.content for m in archived]
        got = await achat.aget(input="Which plan is li user on?")
        assert "li user plan pro" in got[0].content, got
        # Outside a Memory, a put needs the block's own session.
        try:
            await ChronomemMemoryBlock(**P).aput([ChatMessage(role="user", content="hi")])
        except ValueError as err:
            assert "session" in str(err), err
        else:
            raise AssertionError("a put with no session")

asyncio.run(main())
print("async ok")
"""


# Built while the session's other tests run (tests/py/conftest.py).
LIGHT_ENV = LightEnv(extras=(EXTRA,), packages=(OPENAI_LIKE,))


@pytest.fixture(scope="module")
def llama_python() -> Path:
    return LIGHT_ENV.python()


def test_the_light_environment_holds_llama_index_and_not_the_server(llama_python: Path) -> None:
    script = (
        "import importlib.util as u, sys\n"
        "import chronomem_client, chronomem_client.models\n"
        "assert not [m for m in sys.modules if m.startswith('llama_index')]\n"
        "import chronomem_client.llama_index\n"
        "assert 'llama_index.core' in sys.modules\n"  # positive control
        "present = [m for m in ('chronomem', 'thin_api', 'psycopg', 'fastapi')"
        " if u.find_spec(m) is not None]\n"
        "assert not present, present\n"
        "print('ok')\n"
    )
    result = run_python(llama_python, script)
    assert result.returncode == 0 and result.stdout == "ok\n", result.stdout + result.stderr


def test_llama_index_retriever_and_memory_block_against_a_real_server(
    llama_python: Path, light_api: str, app_dsn: str
) -> None:
    with EchoModel().running() as model:
        result = run_with_tenants(llama_python, SCRIPT, "li", model.base_url, light_api, app_dsn)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines() == [
        "retriever ok",
        "retraction ok",
        "query engine ok",
        "memory block ok",
        "bad arguments ok",
        "same org, other project sees nothing",
        "other org sees nothing",
        "async ok",
    ], result.stdout
    # The query engines and the chat engine each sent the model one request.
    assert len(model.requests) == 3, model.requests


def test_the_docs_example_runs(llama_python: Path, light_api: str, app_dsn: str) -> None:
    page = (ROOT / "docs" / "integrations" / "llama_index.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", page, flags=re.DOTALL)
    assert len(blocks) == 1, blocks  # positive control: the example was found
    tenant = make_tenant(app_dsn, f"li docs {uuid.uuid4().hex[:8]}")
    script = f"TOKEN = {tenant.token!r}\n" + blocks[0].replace("http://127.0.0.1:8765", light_api)
    result = run_python(llama_python, script)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines() == [
        "['pro']",
        "['basic']",
        "['user', 'assistant']",
        "True",
    ], result.stdout
