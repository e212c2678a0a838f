"""The summarize_communities job: the model writes a short summary of each community
whose members changed since its summary was written.

memory.refresh_communities queues the job (one per project) when a computation leaves a
community without a summary for its members. The job reads the largest of those
communities with their members and current facts
(memory_worker.community_summary_inputs), asks the model once for
{"summaries": [{"community_id", "summary"}]}, reads the answer leniently
(workers.answer_repair.parse_answer: code fences, trailing prose, a truncated array) and
stores what it got through memory_worker.store_community_summaries, which keeps a
summary only if its community still has the members and facts it was written from, and
redacts it. The call's usage goes on the job's AttemptLog (the runner records it as
memory_worker.record_model_call, job kind summarize_communities).

The request asks for plain JSON in the prompt, with no response_format, so it works on
every OpenAI-compatible endpoint (Ollama, vLLM, llama.cpp).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import openai
import psycopg
from psycopg.types.json import Jsonb

from chronomem.settings import LLMSettings
from workers.answer_repair import AnswerError, parse_answer
from workers.attempt import ModelCall, Outcome
from workers.errors import ParkJob, PermanentError, RetryableError
from workers.extraction import NO_LLM_REASON
from workers.jobs import Job

KIND = "summarize_communities"
BATCH = 20  # communities per call, the largest first
MEMBERS = 30  # member names shown per community
FACTS = 20  # current facts shown per community

SYSTEM_PROMPT = """\
You summarize groups of related entities from an AI agent's long-term memory.
The user message is JSON: `communities`, each with a `community_id`, a `label`, its \
`members` (name, type) and `facts` (current statements about its members).
For each community write a short summary (one to three sentences, at most 400 \
characters) of what ties its members together, using only the facts given. \
Do not invent facts.
Answer with one JSON object and nothing else:
{"summaries": [{"community_id": "<an id from the input>", "summary": "<text>"}]}"""


@dataclass(frozen=True)
class Summary:
    community_id: str
    summary: str


class Summarizer:
    """One chat.completions call per batch of communities."""

    def __init__(self, client: openai.OpenAI, model: str) -> None:
        self.client = client
        self.model = model

    @classmethod
    def from_settings(cls, llm: LLMSettings) -> Summarizer | None:
        """None when no endpoint is configured (summarize jobs then wait)."""
        if not llm.configured or llm.model is None:
            return None
        client = openai.OpenAI(
            base_url=llm.base_url,
            api_key=llm.api_key or "unused",  # local servers need none; the client does
            timeout=llm.timeout,
            max_retries=1,  # the job queue retries with backoff
        )
        return cls(client, llm.model)

    def summarize(self, communities: list[dict[str, Any]]) -> tuple[list[Summary], ModelCall]:
        """The model's summaries of the given communities (those it answered for, by
        an id it was given) and the call's usage. Raises RetryableError when the call
        fails or the answer holds no JSON object, ParkJob when the endpoint refuses
        the configuration; the call is returned on the exception (`call`)."""
        shown = [
            {
                "community_id": c["community_id"],
                "label": c["label"],
                "members": c["members"],
                "facts": [f["content"] for f in c["facts"]],
            }
            for c in communities
        ]
        started = time.monotonic()

        def call(outcome: Outcome, usage: Any = None) -> ModelCall:
            return ModelCall(
                model=self.model,
                operation="chat",
                tokens_in=int(getattr(usage, "prompt_tokens", 0) or 0),
                tokens_out=int(getattr(usage, "completion_tokens", 0) or 0),
                latency_ms=(time.monotonic() - started) * 1000,
                outcome=outcome,
            )

        try:
            completion = self.client.chat.completions.create(
                model=self.model,
                messages=[
                    {"role": "system", "content": SYSTEM_PROMPT},
                    {
                        "role": "user",
                        "content": json.dumps({"communities": shown}, ensure_ascii=False),
                    },
                ],
            )
        except (
            openai.AuthenticationError,
            openai.PermissionDeniedError,
            openai.NotFoundError,
        ) as err:
            raise _with_call(
                ParkJob(f"LLM endpoint rejected the request ({err}); check CHRONOMEM_LLM_*"),
                call("error"),
            ) from err
        except openai.APITimeoutError as err:
            raise _with_call(
                RetryableError(f"model call timed out: {err}"), call("timeout")
            ) from err
        except openai.RateLimitError as err:
            raise _with_call(
                RetryableError(f"model rate-limited: {err}"), call("rate_limited")
            ) from err
        except openai.APIError as err:
            raise _with_call(RetryableError(f"model call failed: {err}"), call("error")) from err
        text = completion.choices[0].message.content if completion.choices else None
        try:
            answer = parse_answer(text).answer
        except AnswerError as err:
            raise _with_call(
                RetryableError(f"malformed summaries answer: {err}"),
                call("parse_failure", completion.usage),
            ) from err
        ids = {str(c["community_id"]) for c in communities}
        items = answer.get("summaries")
        summaries: list[Summary] = []
        seen: set[str] = set()
        for item in items if isinstance(items, list) else []:
            if not isinstance(item, dict):
                continue
            cid, summary = item.get("community_id"), item.get("summary")
            if not (isinstance(cid, str) and isinstance(summary, str) and summary.strip()):
                continue
            if cid in ids and cid not in seen:
                seen.add(cid)
                summaries.append(Summary(cid, summary.strip()))
        return summaries, call("ok", completion.usage)


def _with_call(err: Exception, call: ModelCall) -> Exception:
    err.call = call  # type: ignore[attr-defined]
    return err


def _scalar(conn: psycopg.Connection[Any], query: str, params: tuple[Any, ...]) -> Any:
    row = conn.execute(query, params).fetchone()
    return None if row is None else row[0]


def summarize_communities(
    conn: psycopg.Connection[Any], job: Job, summarizer: Summarizer | None
) -> dict[str, Any]:
    """One batch of a project's communities due a summary: asked, then stored. Returns
    store_community_summaries' report with the communities asked for and those the
    model left out."""
    if summarizer is None:
        raise ParkJob(NO_LLM_REASON)
    if job.project_id is None:
        raise PermanentError(f"{KIND} job without a project")
    project = str(job.project_id)
    due: list[dict[str, Any]] = _scalar(
        conn,
        "select memory_worker.community_summary_inputs(%s, %s, %s, %s)",
        (project, BATCH, MEMBERS, FACTS),
    )
    if not due:
        return {"communities": 0, "stored": 0, "skipped": [], "unanswered": []}
    try:
        summaries, call = summarizer.summarize(due)
    except (ParkJob, RetryableError) as err:
        made = getattr(err, "call", None)
        if isinstance(made, ModelCall):
            job.attempt.add_calls(project, None, [made])
        raise
    job.attempt.add_calls(project, None, [call])
    by_id = {str(c["community_id"]): c for c in due}
    items = [
        {
            "community_id": s.community_id,
            "members_digest": by_id[s.community_id]["members_digest"],
            "fact_ids": [f["fact_id"] for f in by_id[s.community_id]["facts"]],
            "summary": s.summary,
        }
        for s in summaries
    ]
    report: dict[str, Any] = _scalar(
        conn,
        "select memory_worker.store_community_summaries(%s, %s, %s)",
        (project, Jsonb(items), summarizer.model),
    )
    answered = {s.community_id for s in summaries}
    return {
        "communities": len(due),
        **report,
        "unanswered": sorted(cid for cid in by_id if cid not in answered),
    }
