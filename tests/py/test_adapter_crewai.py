"""The CrewAI adapter (chronomem_client.crewai, extra `crewai`) in a light environment
holding only the light client and crewai 1.15, against a real `chronomem serve`, through
CrewAI's own entry points: `Memory`'s remember / remember_many / recall / forget /
update / reset / list_records / info, `memory.scope()`, and a `Crew(memory=...)`
kickoff whose agent model is a scripted OpenAI-compatible server (CrewModel below, over
tests/py/scripted_openai.py) reached through CrewAI's own `LLM(model="openai/...",
base_url=...)`. CrewAI 1.15 has no ExternalMemory any more: its pluggable memory is the
unified `Memory` over a `StorageBackend` (see the adapter's module doc).

Asserted: the environment holds crewai 1.15 with openai<3 and mcp<2, which the server's
environment cannot hold (openai>=3, mcp>=2), and importing chronomem_client imports no
crewai; saved items are episodes of the session named from their scope, with their
fields and speaker; recall finds them, and finds facts asserted through the light client:
a superseded value is gone now and present as_of before, a known_at before the assert
sees neither; the crew's agent reads the recalled facts, searches memory through
CrewAI's tool, and its result is saved as an episode of its agent's scope; another
project's key and another org's key see nothing (each with a positive control: its own
memory of the same scope works) and are refused on the tenant's project; reset wipes
only this memory's sessions (another session of the project survives, a positive
control); bad arguments raise ValueError. The example of docs/integrations/crewai.md
runs there too."""

from __future__ import annotations

import json
import re
import uuid
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from api_server import make_tenant
from light_env import ROOT, LightEnv, run_python, run_with_tenants
from scripted_openai import ScriptedOpenAI

# Run before crewai is imported, in the script's own temp directory (its cwd):
# CrewAI sends anonymous telemetry to its collector, checks PyPI for a newer version
# and may ask on the terminal whether to trace the first run; a test reaches no
# network and has no terminal, so all three are off. CrewAI also writes its settings,
# credentials key and task-output database under the home and data directories, and
# lock files in the temp directory: all pointed at the script's directory, which
# run_python removes, so a run leaves nothing behind.
QUIET = """
import os
os.environ.update(
    CREWAI_DISABLE_TELEMETRY="true",
    OTEL_SDK_DISABLED="true",
    CREWAI_TRACING_ENABLED="false",
    CREWAI_DISABLE_VERSION_CHECK="true",
    HOME=os.getcwd(),
    XDG_DATA_HOME=os.getcwd(),
    XDG_CONFIG_HOME=os.getcwd(),
    TMPDIR=os.getcwd(),
)
"""


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


class CrewModel(ScriptedOpenAI):
    """Answers a CrewAI agent's chat completions: a task that says "SEARCH" gets one call
    of the memory search tool the request offers, a tool result gets "Final: " and that
    result, any other turn gets "Answer: " and the user message."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[dict[str, Any]] = []

    def _chat(self, body: dict[str, Any]) -> tuple[int, dict[str, str], dict[str, Any]]:
        with self._lock:
            self.requests.append(body)
        messages = body["messages"]
        last = messages[-1]
        message: dict[str, Any] = {"role": "assistant", "content": None, "refusal": None}
        finish = "stop"
        tools = [t["function"]["name"] for t in body.get("tools", [])]
        search = next((t for t in tools if "search" in t and "memory" in t), None)
        if last["role"] == "tool":
            message["content"] = "Final: " + _text(last.get("content"))
        elif "SEARCH" in _text(last.get("content")) and search:
            arguments = json.dumps({"queries": ["crew user plan"]})
            message["tool_calls"] = [
                {
                    "id": "call_0",
                    "type": "function",
                    "function": {"name": search, "arguments": arguments},
                }
            ]
            finish = "tool_calls"
        else:
            message["content"] = "Answer: " + _text(last.get("content")).strip()
        return (
            200,
            {},
            {
                "id": "chatcmpl-crew",
                "object": "chat.completion",
                "created": 0,
                "model": body.get("model", "scripted"),
                "choices": [
                    {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
                ],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            },
        )


SCRIPT = (
    QUIET
    + r"""
import asyncio
import importlib.metadata as metadata
import sys
from datetime import UTC, datetime

import chronomem_client
assert "crewai" not in sys.modules, "chronomem_client imported crewai"

from crewai import LLM, Agent, Crew, Task
from crewai.memory import Memory, MemoryMatch
from crewai.memory.storage.backend import StorageBackend

from chronomem_client import ChronomemError, Client
from chronomem_client.crewai import RECORD_KEY, ChronomemMemory, ChronomemStorage

model_url, base, token, project, stranger_token, stranger_project = sys.argv[1:]
say = lambda *words: print("|", *words)

# The clash the light environment exists for: crewai 1.15 holds openai<3 and mcp<2.
major = lambda name: int(metadata.version(name).split(".")[0])
assert metadata.version("crewai").startswith("1.15."), metadata.version("crewai")
versions = {n: metadata.version(n) for n in ("openai", "mcp")}
assert major("openai") < 3 and major("mcp") < 2, versions

client = Client(base, token)
memory = ChronomemMemory(client=client)  # the key's own project
assert isinstance(memory, Memory) and isinstance(memory.chronomem, StorageBackend)
assert memory.chronomem.project() == project

# --- save: each item an episode of its scope's session ------------------------------
first = memory.remember(
    "Ana moved to Porto in May.", scope="/users/ana", categories=["moves"],
    metadata={"ticket": 7}, source="ana",
)
assert first is not None and first.scope == "/users/ana", first
more = memory.remember_many(
    ["Ana prefers green tea.", "Ana works at Acme."], scope="/users/ana", agent_role="Researcher"
)
assert len(more) == 2
page = client.session_messages(project, "crewai:users:ana")
assert [m.content for m in page.messages] == [
    "Ana moved to Porto in May.", "Ana prefers green tea.", "Ana works at Acme."
], page
assert [m.role for m in page.messages] == ["user", "assistant", "assistant"], page
assert [m.metadata.get("speaker") for m in page.messages] == ["ana", "Researcher", "Researcher"]
stored = page.messages[0].metadata[RECORD_KEY]
assert stored["categories"] == ["moves"] and stored["metadata"] == {"ticket": 7}, stored
assert [m.metadata[RECORD_KEY]["id"] for m in page.messages] == [r.id for r in (first, *more)]
first_episode = str(page.messages[0].episode_id)

records = memory.list_records()
assert {r.content for r in records} == {m.content for m in page.messages}, records
assert records[0].created_at >= records[-1].created_at
assert memory.list_records(scope="/users/bob") == []
info = memory.info("/users")
assert info.record_count == 3 and info.child_scopes == ["/users/ana"], info
assert info.categories == ["moves"] and memory.list_scopes("/") == ["/users"]
assert memory.list_categories() == {"moves": 1}
assert memory.chronomem.get_record(first.id).content == first.content
assert memory.chronomem.get_record(first_episode).id == first.id  # either id finds it

# A scope view is CrewAI's own, over the same storage.
ana = memory.scope("/users/ana")
ana.remember("Ana's cat is called Miso.", scope="/pets")
assert client.session_messages(project, "crewai:users:ana:pets").messages[0].content == (
    "Ana's cat is called Miso."
)

# --- recall: the saved episodes, and facts the light client asserts -----------------
hits = memory.recall("Porto", limit=5)
assert all(isinstance(m, MemoryMatch) for m in hits)
porto = [m for m in hits if m.record.id == first_episode]  # a hit: the episode's id
assert len(porto) == 1 and porto[0].record.metadata["kind"] == "episode", hits
assert porto[0].record.scope == "/users/ana" and "episode_fulltext" in porto[0].match_reasons
assert "Porto" in porto[0].format()
assert [m.record.id for m in memory.recall("Porto", scope="/users/bob")] == [], "scoped out"
# (Neighbouring turns of a session share an episode's score: they come after it.)
seen = ana.recall("Porto", limit=5)
assert seen[0].record.id == first_episode and {m.record.scope for m in seen} == {"/users/ana"}, seen

before_facts = datetime.now(UTC)
client.declare_predicate(project, "plan", "one")
claim = {"subject": "crew user", "predicate": "plan"}
for value, since in (("basic", "2024-01-01"), ("pro", "2024-03-01")):
    client.assert_facts(project, [{**claim, "object": value, "valid_from": since}])


def plans(matches):
    return {
        m.record.metadata["object"] for m in matches
        if m.record.metadata.get("kind") == "fact" and m.record.metadata.get("predicate") == "plan"
    }


assert plans(memory.recall("crew user plan", limit=20)) == {"pro"}
assert plans(memory.recall("crew user plan", limit=20, as_of="2024-02-01")) == {"basic"}
assert plans(memory.recall("crew user plan", limit=20, known_at=before_facts)) == set()
then = ChronomemMemory(client=client, as_of="2024-02-01")
assert then.read_only and plans(then.recall("crew user plan", limit=20)) == {"basic"}
assert then.remember("Ana moved to Lisbon.") is None and then.remember_many(["x"]) == []
fact = next(m for m in memory.recall("crew user plan", limit=20) if plans([m]))
assert fact.record.metadata["valid_from"].startswith("2024-03-01"), fact.record.metadata
assert "valid_until" not in fact.record.metadata, "still holds"
say("memory ok")

# --- forget and update: the session rewritten ---------------------------------------
assert memory.forget(record_ids=[more[1].id]) == 1
assert [m.content for m in client.session_messages(project, "crewai:users:ana").messages] == [
    "Ana moved to Porto in May.", "Ana prefers green tea."
]
updated = memory.update(more[0].id, content="Ana prefers black tea.")
assert (updated.id, updated.scope) == (more[0].id, "/users/ana"), updated
assert {r.id for r in memory.list_records(scope="/users/ana")} >= {first.id, more[0].id}
kept = client.session_messages(project, "crewai:users:ana").messages
assert [m.content for m in kept] == ["Ana moved to Porto in May.", "Ana prefers black tea."]
assert kept[0].metadata[RECORD_KEY]["categories"] == ["moves"]
assert kept[1].metadata["speaker"] == "Researcher"


async def async_entry_points():
    storage = memory.chronomem
    assert await storage.adelete(scope_prefix="/users/ana/pets") == 1
    miso = {"id": "miso", "scope": "/users/ana/pets", "content": "Miso."}
    await storage.asave([first.model_copy(update=miso)])
    assert await memory.arecall("Miso", limit=3)

asyncio.run(async_entry_points())
say("forget ok")

# --- a crew: recall before the task, the memory tool, the result saved --------------
llm = LLM(model="openai/scripted", base_url=model_url, api_key="unused")
agent = Agent(role="Researcher", goal="Answer from memory", backstory="Reads the memory.", llm=llm)
crew_memory = ChronomemMemory(client=client, root_scope="/crew/research")
tasks = [
    Task(description="Which plan is crew user on?", expected_output="the plan", agent=agent),
    Task(description="SEARCH the memory for crew user's plan.", expected_output="it", agent=agent),
]
result = Crew(agents=[agent], tasks=tasks, memory=crew_memory).kickoff()
outputs = [t.raw for t in result.tasks_output]
assert outputs[0].startswith("Answer: ") and "crew user plan" in outputs[0], outputs[0]
# The second task's answer is what CrewAI's memory search tool found (our recall).
assert outputs[1].startswith("Final: Found memories:"), outputs[1]
assert "object: pro" in outputs[1] and "basic" not in outputs[1], outputs[1]
saved = client.session_messages(project, "crewai:crew:research:agent:researcher").messages
assert [m.content.splitlines()[0] for m in saved] == [
    "Task: Which plan is crew user on?", "Task: SEARCH the memory for crew user's plan."
], saved
assert all(m.role == "assistant" and m.metadata["speaker"] == "Researcher" for m in saved)
assert saved[0].content.endswith("Result: " + outputs[0]), saved[0].content
say("crew ok")

# --- other keys: another project of the org, another org ----------------------------
other = client.create_project("crewai other " + project)
other_token = client.create_api_key(
    other.project_id, "crewai other", ["project:read", "project:write", "configuration:write"]
).token
mine = {r.id for r in memory.list_records()}
for who, key, own in (("same org, other project", other_token, None),
                      ("other org", stranger_token, stranger_project)):
    with Client(base, key) as outsider:
        theirs = ChronomemMemory(client=outsider, project=own)
        assert theirs.chronomem.project() != project, who
        assert theirs.list_records() == [] and theirs.info("/").record_count == 0, who
        assert theirs.recall("Porto") == [] and theirs.recall("crew user plan") == [], who
        # Positive control: the same scope and words, in its own project.
        theirs.remember("Ana moved to Porto in May.", scope="/users/ana")
        found = [(m.record.content, m.record.scope) for m in theirs.recall("Porto")]
        assert found == [("Ana moved to Porto in May.", "/users/ana")], (who, found)
        theirs.reset()
        # The tenant's project: refused, as the errors CrewAI code expects.
        trespass = ChronomemMemory(client=outsider, project=project)
        for call in (lambda: trespass.recall("Porto"), lambda: trespass.list_records(),
                     lambda: trespass.remember("mine now"), lambda: trespass.reset()):
            try:
                call()
            except (PermissionError, ValueError) as err:
                assert isinstance(err.__cause__, ChronomemError), (who, err)
                assert err.__cause__.status in (403, 404), (who, err.__cause__)
            else:
                raise AssertionError(who)
    assert {r.id for r in memory.list_records()} == mine, who
    say(who, "sees nothing")

# --- reset: this memory's sessions only ---------------------------------------------
client.ingest(project, "support chat", [{"role": "user", "content": "Ana asked about Porto."}])
memory.reset(scope="/users")
assert [r.scope for r in memory.list_records()] == ["/crew/research/agent/researcher"] * 2
memory.reset()
assert memory.list_records() == [] and memory.recall("Porto", scope="/users") == []
sessions = [s.session for s in client.sessions(project).sessions]
assert sessions == ["support chat"], sessions
chat = client.session_messages(project, "support chat").messages
assert [m.content for m in chat] == ["Ana asked about Porto."], chat
episodes = [m.record for m in memory.recall("Porto") if m.record.metadata["kind"] == "episode"]
assert [r.metadata["session"] for r in episodes] == ["support chat"], episodes
say("reset ok")

# --- bad arguments: ValueError (a bad as_of: the server's 422, translated) ---------
bad = {
    "empty content": lambda: memory.remember("  "),
    "private": lambda: memory.remember("secret", private=True),
    "importance": lambda: memory.remember("x", importance=2),
    "long scope": lambda: memory.remember("x", scope="/" + "a" * 200),
    "not a list": lambda: memory.remember_many("one string"),
    "empty query": lambda: memory.recall(""),
    "limit 0": lambda: memory.recall("x", limit=0),
    "limit 201": lambda: memory.recall("x", limit=201),
    "depth": lambda: memory.recall("x", depth="very"),
    "categories": lambda: memory.recall("x", categories=["moves"]),
    "bad as_of": lambda: memory.recall("x", as_of="not a date"),
    "unknown record": lambda: memory.update("00000000-0000-4000-8000-000000000000", content="x"),
    "client": lambda: ChronomemMemory(client="http://127.0.0.1:8765"),
    "namespace": lambda: ChronomemMemory(client=client, namespace="a:b"),
    "storage": lambda: ChronomemMemory(client=client, storage="lancedb"),
    "storage client": lambda: ChronomemStorage("http://127.0.0.1:8765"),
}
for name, call in bad.items():
    try:
        call()
    except ValueError:
        continue
    raise AssertionError(name)
try:
    memory.chronomem.search([0.1, 0.2])
except NotImplementedError:
    pass
else:
    raise AssertionError("a vector search succeeded")
say("errors ok")
"""
)


# Built while the session's other tests run (tests/py/conftest.py).
LIGHT_ENV = LightEnv(extras=("crewai",))


@pytest.fixture(scope="module")
def crewai_python() -> Path:
    return LIGHT_ENV.python()


def test_the_light_environment_holds_crewai_and_not_the_server(crewai_python: Path) -> None:
    # The clash the light environment exists for: the server's holds openai>=3 and mcp>=2,
    # crewai 1.15 needs openai<3 and mcp<2 (the script below checks the light side).
    assert int(version("openai").split(".")[0]) >= 3 and int(version("mcp").split(".")[0]) >= 2
    script = (
        "import importlib.util as u\n"
        "assert u.find_spec('crewai') is not None\n"
        "assert u.find_spec('chronomem_client.crewai') is not None\n"
        "present = [m for m in ('chronomem', 'thin_api', 'psycopg', 'fastapi')"
        " if u.find_spec(m) is not None]\n"
        "assert not present, present\n"
        "print('ok')\n"
    )
    result = run_python(crewai_python, script)
    assert result.returncode == 0 and result.stdout == "ok\n", result.stdout + result.stderr


def test_crewai_memory_and_crew_against_a_real_server(
    crewai_python: Path, light_api: str, app_dsn: str
) -> None:
    with CrewModel().running() as model:
        result = run_with_tenants(
            crewai_python, SCRIPT, "crewai", model.base_url, light_api, app_dsn
        )
    assert result.returncode == 0, result.stdout + result.stderr
    said = [line[2:] for line in result.stdout.splitlines() if line.startswith("| ")]
    assert said == [
        "memory ok",
        "forget ok",
        "crew ok",
        "same org, other project sees nothing",
        "other org sees nothing",
        "reset ok",
        "errors ok",
    ], result.stdout + result.stderr
    # Before its first task the agent read what recall found: the current plan only.
    first = next(r for r in model.requests if "Which plan is crew user on?" in json.dumps(r))
    prompt = "\n".join(_text(m.get("content")) for m in first["messages"])
    assert "Memories from past conversations" in prompt and "crew user plan pro" in prompt, prompt
    assert "crew user plan basic" not in prompt, prompt
    tools = {t["function"]["name"] for t in first.get("tools", [])}
    assert len(tools) == 2 and all("memory" in t for t in tools), tools


def test_the_docs_example_runs(crewai_python: Path, light_api: str, app_dsn: str) -> None:
    page = (ROOT / "docs" / "integrations" / "crewai.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", page, flags=re.DOTALL)
    assert len(blocks) == 1, blocks  # positive control: the example was found
    tenant = make_tenant(app_dsn, f"crewai docs {uuid.uuid4().hex[:8]}")
    example = blocks[0].replace("http://127.0.0.1:8765", light_api)
    example = re.sub(r"^TOKEN = .*$", f"TOKEN = {tenant.token!r}", example, flags=re.MULTILINE)
    assert tenant.token in example, example
    with CrewModel().running() as model:
        # The example's OpenAI model, pointed at the scripted server (the only change).
        preamble = QUIET + (
            f"os.environ.update(OPENAI_BASE_URL={model.base_url!r}, OPENAI_API_KEY='unused')\n"
        )
        result = run_python(crewai_python, preamble + example, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[-2:] == ["pro", "basic"], result.stdout + result.stderr
    assert any("user 42 plan pro" in json.dumps(r) for r in model.requests), model.requests
