"""The OpenAI Agents SDK adapter (chronomem_client.openai_agents) in a light environment
holding only the light client and its `openai-agents` extra, against a real `chronomem
serve` on loopback. The agent's model is a scripted OpenAI-compatible server started in
this process (AgentModel below, over tests/py/scripted_openai.py), reached through the
SDK's own `OpenAIChatCompletionsModel`.

Runner.run twice with a ChronomemSession: the second turn's request holds the first
turn's items; get_items returns exactly what add_items stored (limit, session_settings),
pop_item removes the latest item, clear_session empties it; a key of another project of
the same org and one of another org see nothing of it (each with a positive control: its
own session of the same id works); bad arguments raise the SDK's UserError. The function
tools run through the SDK: a superseded value is gone now and present as_of before, the
history holds both, and a bad argument answers the model with the server's error code."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any, ClassVar

import pytest
from api_server import make_tenant
from light_env import ROOT, LightEnv, run_python, run_with_tenants
from scripted_openai import ScriptedOpenAI


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


class AgentModel(ScriptedOpenAI):
    """Answers an agent's chat completions: "TOOLS" or "BAD TOOL" from the user asks
    for tool calls, a tool result gets "tools answered", any other turn gets "seen: "
    and every user message the request holds (so a reply shows what the model saw)."""

    TOOL_CALLS: ClassVar[list[tuple[str, dict[str, Any]]]] = [
        ("search_memory", {"query": "agent user plan", "as_of": None, "k": None}),
        ("search_memory", {"query": "agent user plan", "as_of": "2024-02-01", "k": 20}),
        ("memory_history", {"subject": "agent user", "predicate": "plan"}),
        ("memory_context", {"query": "agent user plan", "as_of": "2024-02-01"}),
    ]

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
        if last["role"] == "tool":
            message["content"] = "tools answered"
        elif _text(last.get("content")) in ("TOOLS", "BAD TOOL"):
            calls = (
                self.TOOL_CALLS
                if _text(last["content"]) == "TOOLS"
                else [("search_memory", {"query": "plan", "as_of": None, "k": 500})]
            )
            message["tool_calls"] = [
                {
                    "id": f"call_{i}",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(args)},
                }
                for i, (name, args) in enumerate(calls)
            ]
            finish = "tool_calls"
        else:
            said = [_text(m.get("content")) for m in messages if m["role"] == "user"]
            message["content"] = "seen: " + " | ".join(said)
        return (
            200,
            {},
            {
                "id": "chatcmpl-agent",
                "object": "chat.completion",
                "created": 0,
                "model": body.get("model", "scripted"),
                "choices": [
                    {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
                ],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            },
        )


SCRIPT = """
import asyncio
import json
import sys

from agents import Agent, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
from agents.exceptions import UserError
from agents.memory import Session, SessionSettings
from openai import AsyncOpenAI

from chronomem_client import AsyncClient, ChronomemError
from chronomem_client.openai_agents import ITEM_KEY, ChronomemSession, memory_tools

model_url, base, token, project, stranger_token, stranger_project = sys.argv[1:]
set_tracing_disabled(True)
model = OpenAIChatCompletionsModel(
    model="scripted", openai_client=AsyncOpenAI(base_url=model_url, api_key="unused")
)
agent = Agent(name="assistant", instructions="Be brief.", model=model)
SID = "chat 1"


def texts(items):
    out = []
    for i in items:
        c = i.get("content")
        out.append(c if isinstance(c, str) else "".join(p.get("text", "") for p in c))
    return out


async def outsiders_see_nothing(memory, items):
    other = await memory.create_project("agents other " + project)
    other_key = (
        await memory.create_api_key(other.project_id, "o", ["project:read", "project:write"])
    ).token
    for who, key, own in (
        ("same org, other project", other_key, None),  # None: the key's own project
        ("other org", stranger_token, stranger_project),
    ):
        async with AsyncClient(base, key) as client:
            theirs = ChronomemSession(SID, client=client, project=own)
            assert await theirs.project() != project, who
            assert await theirs.get_items() == [], who
            # Positive control: the same session id works in its own project, and its
            # model sees only its own turn.
            ran = await Runner.run(agent, "Stranger here.", session=theirs)
            assert ran.final_output == "seen: Stranger here.", (who, ran.final_output)
            assert texts(await theirs.get_items()) == ["Stranger here.", ran.final_output], who
            # The tenant's project itself: refused, as the SDK's UserError.
            try:
                await ChronomemSession(SID, client=client, project=project).get_items()
            except UserError as err:
                assert isinstance(err.__cause__, ChronomemError), who
                assert err.__cause__.status in (403, 404), (who, err.__cause__)
            else:
                raise AssertionError(who)
        assert await ChronomemSession(SID, client=memory, project=project).get_items() == items
        print(who, "sees nothing")


async def main():
    async with AsyncClient(base, token) as memory:
        session = ChronomemSession(SID, client=memory)  # the key's own project
        assert isinstance(session, Session)
        assert await session.project() == project
        assert await session.get_items() == [] and await session.pop_item() is None

        first = await Runner.run(agent, "My favourite colour is teal.", session=session)
        assert first.final_output == "seen: My favourite colour is teal.", first.final_output
        second = await Runner.run(agent, "What is my favourite colour?", session=session)
        assert second.final_output == (
            "seen: My favourite colour is teal. | What is my favourite colour?"
        ), second.final_output

        items = await session.get_items()
        assert [i.get("role") for i in items] == ["user", "assistant"] * 2, items
        assert texts(items) == [
            "My favourite colour is teal.", first.final_output,
            "What is my favourite colour?", second.final_output,
        ], items
        assert items[1] == first.new_items[0].to_input_item(), items[1]
        # Stored as episodes of one Chronomem session, the item in each one's metadata.
        page = await memory.session_messages(project, SID)
        assert [m.role for m in page.messages] == ["user", "assistant"] * 2, page
        assert [m.content for m in page.messages] == texts(items), page
        assert [m.metadata[ITEM_KEY] for m in page.messages] == items, page

        assert await session.get_items(limit=2) == items[-2:]
        assert await session.get_items(limit=0) == []
        limited = ChronomemSession(
            SID, client=memory, project=project, session_settings=SessionSettings(limit=1)
        )
        assert await limited.get_items() == items[-1:]

        # An item of any shape reads back exactly as added.
        odd = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"a": [1]}'}
        await session.add_items([odd])
        assert await session.get_items() == [*items, odd]
        assert await session.pop_item() == odd
        assert await session.pop_item() == items[-1]
        assert await session.get_items() == items[:-1]
        await session.add_items([items[-1]])
        assert await session.get_items() == items

        await outsiders_see_nothing(memory, items)

        await session.clear_session()
        assert await session.get_items() == [] and await session.pop_item() is None
        assert SID not in [s.session for s in (await memory.sessions(project)).sessions]

        # Bad arguments: the SDK's UserError, before any request.
        for bad in ("", "x" * 201):
            try:
                ChronomemSession(bad, client=memory, project=project)
            except UserError:
                pass
            else:
                raise AssertionError(bad)

        # The function tools, called by the model through the SDK.
        await memory.declare_predicate(project, "plan", "one")
        claim = {"subject": "agent user", "predicate": "plan"}
        for value, since in (("basic", "2024-01-01"), ("pro", "2024-03-01")):
            await memory.assert_facts(project, [{**claim, "object": value, "valid_from": since}])
        tooled = Agent(name="tooled", model=model, tools=memory_tools(memory, project))
        tool_session = ChronomemSession("tools 1", client=memory, project=project)
        ran = await Runner.run(tooled, "TOOLS", session=tool_session)
        assert ran.final_output == "tools answered", ran.final_output
        outputs = [i.output for i in ran.new_items if i.type == "tool_call_output_item"]
        assert len(outputs) == 4, ran.new_items
        now, before, history, context = outputs
        plans = lambda hits: {h["object"] for h in json.loads(hits) if h["predicate"] == "plan"}
        assert plans(now) == {"pro"}, now
        assert plans(before) == {"basic"}, before
        assert sorted((h["object"], h["status"]) for h in json.loads(history)) == [
            ("basic", "ended"), ("pro", "current"),
        ], history
        assert "basic" in context and "pro" not in context, context
        kinds = [i.get("type") for i in await tool_session.get_items()]
        assert kinds.count("function_call") == 4 and kinds.count("function_call_output") == 4, kinds

        bad = await Runner.run(tooled, "BAD TOOL")
        out = [i.output for i in bad.new_items if i.type == "tool_call_output_item"]
        assert len(out) == 1 and out[0].startswith("Chronomem refused the call: "), out
        assert bad.final_output == "tools answered", bad.final_output
    print("agents ok")


asyncio.run(main())
"""


# Built while the session's other tests run (tests/py/conftest.py).
LIGHT_ENV = LightEnv(extras=("openai-agents",))


@pytest.fixture(scope="module")
def agents_python() -> Path:
    return LIGHT_ENV.python()


def test_agents_session_and_tools_in_the_light_environment(
    agents_python: Path, light_api: str, app_dsn: str
) -> None:
    with AgentModel().running() as model:
        result = run_with_tenants(
            agents_python, SCRIPT, "agents", model.base_url, light_api, app_dsn
        )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines() == [
        "same org, other project sees nothing",
        "other org sees nothing",
        "agents ok",
    ], result.stdout
    # The second turn's request held the first turn: its user message and the reply.
    second = next(
        r for r in model.requests if "What is my favourite colour?" in json.dumps(r["messages"])
    )
    assert [m["role"] for m in second["messages"]] == [
        "system",
        "user",
        "assistant",
        "user",
    ], second["messages"]


def test_the_docs_example_runs_in_the_light_environment(
    agents_python: Path, light_api: str, app_dsn: str
) -> None:
    page = (ROOT / "docs" / "integrations" / "openai_agents.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", page, flags=re.DOTALL)
    assert len(blocks) == 1, blocks  # positive control: the example was found
    tenant = make_tenant(app_dsn, f"agents docs {uuid.uuid4().hex[:8]}")
    example = blocks[0].replace("http://127.0.0.1:8765", light_api)
    example = re.sub(r"^TOKEN = .*$", f"TOKEN = {tenant.token!r}", example, flags=re.MULTILINE)
    assert tenant.token in example, example
    with AgentModel().running() as model:
        # The SDK's default model, pointed at the scripted server (the only change).
        preamble = (
            "from agents import set_default_openai_api, set_default_openai_client\n"
            "from agents import set_tracing_disabled\n"
            "from openai import AsyncOpenAI\n"
            f"set_default_openai_client(AsyncOpenAI(base_url={model.base_url!r}, api_key='x'))\n"
            "set_default_openai_api('chat_completions')\n"
            "set_tracing_disabled(True)\n"
        )
        result = run_python(agents_python, preamble + example)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines() == [
        "seen: My favourite colour is teal.",
        "seen: My favourite colour is teal. | What is my favourite colour?",
    ], result.stdout
    # The model was offered the three memory tools.
    tools = {t["function"]["name"] for t in model.requests[0]["tools"]}
    assert tools == {"search_memory", "memory_context", "memory_history"}, tools


def test_importing_the_client_does_not_import_the_sdk(agents_python: Path) -> None:
    script = (
        "import sys\nimport chronomem_client\n"
        "assert 'agents' not in sys.modules and 'openai' not in sys.modules\n"
        "import chronomem_client.openai_agents\nassert 'agents' in sys.modules\nprint('ok')\n"
    )
    result = run_python(agents_python, script)
    assert result.returncode == 0 and result.stdout == "ok\n", result.stdout + result.stderr
