"""A scripted OpenAI-compatible server on 127.0.0.1, for the worker tests.

The model is an external service, so the tests replace it at the HTTP boundary: the
real `openai` client in the worker talks to this server.

- POST /v1/chat/completions answers from a script: replies are queued per *match*, a
  substring of the episode being extracted (read from the request's JSON context), and
  the last reply of a queue repeats. No match: an empty extraction. A reply is an
  extraction dict (sent as JSON), a raw string (e.g. invalid JSON) or Hold(gate, reply)
  (answers only once the gate is set). Every request is recorded.
- POST /v1/embeddings returns deterministic unit vectors of `dim` floats per input.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Reply = Any  # dict | str | Hold

EMPTY: dict[str, list[Any]] = {"entities": [], "facts": [], "contradictions": [], "notes": []}


@dataclass
class Hold:
    gate: threading.Event
    reply: Reply
    arrived: threading.Event = field(default_factory=threading.Event)


@dataclass
class ChatCall:
    episode: str
    context: dict[str, Any]
    body: dict[str, Any]


def vector_for(text: str, dim: int) -> list[float]:
    rng = random.Random(hashlib.sha256(text.encode()).digest())
    v = [rng.gauss(0, 1) for _ in range(dim)]
    norm = sum(x * x for x in v) ** 0.5
    return [x / norm for x in v]


class ScriptedOpenAI:
    def __init__(self, dim: int = 384) -> None:
        self.dim = dim
        self.chat_calls: list[ChatCall] = []
        self.embedding_inputs: list[str] = []
        self._script: dict[str, list[Reply]] = {}
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

    def _chat(self, body: dict[str, Any]) -> dict[str, Any]:
        context = json.loads(body["messages"][-1]["content"])
        episode = context["episode"]["content"]
        with self._lock:
            self.chat_calls.append(ChatCall(episode, context, body))
        reply = self._next_reply(episode)
        if isinstance(reply, Hold):
            reply.arrived.set()
            reply.gate.wait(60)
            reply = reply.reply
        content = reply if isinstance(reply, str) else json.dumps({**EMPTY, **reply})
        return {
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
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }

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
                if self.path.endswith("/chat/completions"):
                    answer = owner._chat(body)
                elif self.path.endswith("/embeddings"):
                    answer = owner._embeddings(body)
                else:
                    self.send_error(404)
                    return
                payload = json.dumps(answer).encode()
                self.send_response(200)
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
