"""A scripted OpenAI-compatible server on 127.0.0.1, for the worker tests.

The model is an external service, so the tests replace it at the HTTP boundary: the
real `openai` client in the worker talks to this server.

- POST /v1/chat/completions answers from a script: replies are queued per *match*, a
  substring of the episode being extracted (read from the request's JSON context), and
  the last reply of a queue repeats. No match: an empty extraction. A reply is an
  extraction dict (sent as JSON), a raw string (e.g. invalid JSON), Hold(gate, reply)
  (answers only once the gate is set), Status(code) (an HTTP error, e.g. a 429 with
  Retry-After: 0), Delay(seconds, reply) (answers late: a client timeout) or
  Usage(reply, prompt_tokens, completion_tokens) (the usage the reply reports; else
  1 and 1). Every request is recorded, with its response_format and the status it got.
  json_schema=False emulates an endpoint without structured output: a request with
  response_format json_schema is refused with a 400 naming the parameter (no reply is
  consumed). Chats that extract no episode (community summaries) answer from
  answer_chat's script instead, matched against their last message.
- POST /v1/embeddings returns deterministic unit vectors of `dim` floats per input.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Reply = Any  # dict | str | Hold | Status | Delay | Usage

EMPTY: dict[str, list[Any]] = {"entities": [], "facts": [], "contradictions": [], "notes": []}


@dataclass
class Hold:
    gate: threading.Event
    reply: Reply
    arrived: threading.Event = field(default_factory=threading.Event)


@dataclass
class Status:
    """An HTTP error answer: code, and the headers sent with it."""

    code: int
    headers: dict[str, str] = field(default_factory=dict)
    message: str = "scripted error"


@dataclass
class Delay:
    seconds: float
    reply: Reply


@dataclass
class Usage:
    reply: Reply
    prompt_tokens: int
    completion_tokens: int


@dataclass
class ChatCall:
    episode: str
    context: dict[str, Any]
    body: dict[str, Any]
    status: int = 200

    @property
    def response_format(self) -> str | None:
        """The request's response_format type (json_schema, json_object), or None."""
        fmt = self.body.get("response_format")
        return fmt.get("type") if isinstance(fmt, dict) else None

    @property
    def system(self) -> str:
        return str(self.body["messages"][0].get("content") or "")


def _context(body: dict[str, Any]) -> dict[str, Any]:
    """The extraction context: the first user message that is JSON with an episode (a
    re-ask appends the model's answer and a plain-text user message after it)."""
    for message in body.get("messages", []):
        if message.get("role") != "user":
            continue
        try:
            value = json.loads(message.get("content") or "")
        except (TypeError, ValueError):
            continue
        if isinstance(value, dict) and "episode" in value:
            return value
    return {"episode": {"content": ""}}


def vector_for(text: str, dim: int) -> list[float]:
    rng = random.Random(hashlib.sha256(text.encode()).digest())
    v = [rng.gauss(0, 1) for _ in range(dim)]
    norm = sum(x * x for x in v) ** 0.5
    return [x / norm for x in v]


class ScriptedOpenAI:
    def __init__(self, dim: int = 384, *, json_schema: bool = True) -> None:
        self.dim = dim
        self.json_schema = json_schema
        self.chat_calls: list[ChatCall] = []
        self.embedding_inputs: list[str] = []
        self._script: dict[str, list[Reply]] = {}
        self._chat_script: dict[str, list[Reply]] = {}  # chats that extract no episode
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def answer(self, match: str, *replies: Reply) -> None:
        """Queue replies for the episode whose content contains `match`."""
        with self._lock:
            self._script[match] = list(replies)

    def answer_chat(self, match: str, *replies: Reply) -> None:
        """Queue replies for a chat that extracts no episode (e.g. community summaries)
        whose last message contains `match`; the last reply repeats."""
        with self._lock:
            self._chat_script[match] = list(replies)

    def chats_for(self, match: str) -> list[ChatCall]:
        """The recorded chats that extract no episode whose last message contains
        `match`."""
        with self._lock:
            return [
                c
                for c in self.chat_calls
                if not c.episode and match in str(c.body["messages"][-1].get("content") or "")
            ]

    def _next_chat_reply(self, last: str) -> Reply | None:
        with self._lock:
            for match, queue in self._chat_script.items():
                if match in last and queue:
                    return queue.pop(0) if len(queue) > 1 else queue[0]
        return None

    def calls_for(self, match: str) -> list[ChatCall]:
        with self._lock:
            return [c for c in self.chat_calls if match in c.episode]

    def _next_reply(self, episode: str) -> Reply:
        with self._lock:
            for match, queue in self._script.items():
                if match in episode and queue:
                    return queue.pop(0) if len(queue) > 1 else queue[0]
        return EMPTY

    # -- HTTP ------------------------------------------------------------------------

    def _chat(self, body: dict[str, Any]) -> tuple[int, dict[str, str], dict[str, Any]]:
        """The status, headers and JSON body of the answer to a chat request. Adapter
        tests override it to play an agent's model."""
        context = _context(body)
        episode = context["episode"]["content"]
        call = ChatCall(episode, context, body)
        with self._lock:
            self.chat_calls.append(call)
        if not self.json_schema and call.response_format == "json_schema":
            call.status = 400
            error = {
                "message": "response_format type 'json_schema' is not supported by this server",
                "type": "invalid_request_error",
                "param": "response_format",
                "code": None,
            }
            return 400, {}, {"error": error}
        last = str(body["messages"][-1].get("content") or "")
        reply = None if episode else self._next_chat_reply(last)
        if reply is None:
            reply = self._next_reply(episode)
        usage = (1, 1)
        while isinstance(reply, (Hold, Delay, Usage)):
            if isinstance(reply, Hold):
                reply.arrived.set()
                reply.gate.wait(60)
            elif isinstance(reply, Delay):
                time.sleep(reply.seconds)
            else:
                usage = (reply.prompt_tokens, reply.completion_tokens)
            reply = reply.reply
        if isinstance(reply, Status):
            call.status = reply.code
            error = {"message": reply.message, "type": "scripted", "param": None, "code": None}
            return reply.code, dict(reply.headers), {"error": error}
        content = reply if isinstance(reply, str) else json.dumps({**EMPTY, **reply})
        return (
            200,
            {},
            {
                "id": "chatcmpl-scripted",
                "object": "chat.completion",
                "created": 0,
                "model": body.get("model", "scripted"),
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": content, "refusal": None},
                        "finish_reason": "stop",
                        "logprobs": None,
                    }
                ],
                "usage": {
                    "prompt_tokens": usage[0],
                    "completion_tokens": usage[1],
                    "total_tokens": usage[0] + usage[1],
                },
            },
        )

    def _embeddings(self, body: dict[str, Any]) -> dict[str, Any]:
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        with self._lock:
            self.embedding_inputs.extend(inputs)
        data = []
        for i, text in enumerate(inputs):
            vector = vector_for(text, self.dim)
            if body.get("encoding_format") == "base64":
                packed = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
                data.append({"object": "embedding", "index": i, "embedding": packed})
            else:
                data.append({"object": "embedding", "index": i, "embedding": vector})
        return {
            "object": "list",
            "data": data,
            "model": body.get("model", "scripted"),
            "usage": {"prompt_tokens": 1, "total_tokens": 1},
        }

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                status, headers = 200, {}
                if self.path.endswith("/chat/completions"):
                    status, headers, answer = owner._chat(body)
                elif self.path.endswith("/embeddings"):
                    answer = owner._embeddings(body)
                else:
                    self.send_error(404)
                    return
                payload = json.dumps(answer).encode()
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # quiet

        return Handler

    @contextmanager
    def running(self) -> Iterator[ScriptedOpenAI]:
        self._thread.start()
        try:
            yield self
        finally:
            self._server.shutdown()
            self._server.server_close()
