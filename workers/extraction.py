"""The enrich job: one model call per episode (two when the answer must be asked again),
its answer applied by SQL.

`enrich_episode` reads what the model may see (memory_worker.extraction_context, with
the project's extraction schema), asks the model (workers/extraction_prompt.py builds
the prompt and the answer's JSON schema), reads the answer leniently and validates it
item by item (workers/answer_repair.py), and hands what holds to
memory_worker.apply_extraction, which decides everything else (entities, supersession,
windows, contradictions, confidence floor). Every model call and every rejected item is
kept on the job's AttemptLog (workers/attempt.py), which the runner writes with the
attempt's end. It talks to the database only through the `Plpy` interface, so it can
also run inside PostgreSQL (see workers/plpy.py).

Structured output, where the endpoint has it: response_format json_schema (strict),
else json_object, else plain text with the schema in the prompt. With
CHRONOMEM_LLM_RESPONSE_FORMAT=auto the first endpoint refusal of a format moves to the
next, and the Extractor remembers what worked.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import openai

from chronomem.settings import LLMSettings, Settings
from workers.answer_repair import RAW_LIMIT, AnswerError, parse_answer, validate_answer
from workers.attempt import AttemptLog, ModelCall, Outcome
from workers.errors import ParkJob, PartialFailure, RetryableError
from workers.extraction_prompt import Prompt, build_prompt
from workers.plpy import Plpy

__all__ = ["NO_LLM_REASON", "ExtractionOutcome", "Extractor", "ModelCall", "enrich_episode"]

NO_LLM_REASON = "no LLM endpoint configured: set CHRONOMEM_LLM_BASE_URL"

Structured = Literal["json_schema", "json_object", "text"]
MODES: dict[str, tuple[Structured, ...]] = {
    "auto": ("json_schema", "json_object", "text"),
    "json_schema": ("json_schema",),
    "json_object": ("json_object",),
    "none": ("text",),
}
# Words of an endpoint's refusal that name the response format it does not support.
_FORMAT_WORDS = ("response_format", "json_schema", "json_object", "structured", "schema", "format")


@dataclass
class ExtractionOutcome:
    payload: dict[str, Any]
    """The accepted sections: entities, facts, contradictions, notes, classification, fields."""
    rejected: list[dict[str, Any]] = field(default_factory=list)
    """Worker-side rejections (memory_worker.record_extraction_rejections' items)."""
    calls: list[ModelCall] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    """apply_extraction's p_meta: schema_version, prompt_hash, model, structured, calls."""


class _FormatRefused(Exception):
    """The endpoint refused this response format (try the next one)."""


def _format_refusal(err: openai.APIStatusError) -> bool:
    if err.status_code not in (400, 404, 422):
        return False
    text = f"{err.message} {getattr(err, 'body', '')}".lower()
    return any(word in text for word in _FORMAT_WORDS)


def _retry_after(err: openai.RateLimitError) -> float | None:
    """The seconds a 429 asks to wait (Retry-After in seconds, or OpenAI's
    retry-after-ms); None when it names no delay in seconds."""
    headers = err.response.headers
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) / scale
        except ValueError:
            continue  # an HTTP date: leave the wait to the queue's backoff
        if seconds >= 0:
            return seconds
    return None


class Extractor:
    """chat.completions calls with the most structured answer format the endpoint takes.

    A 429 is retried here, once, after the Retry-After it names (at most
    max_retry_after seconds): every HTTP call is then a row of memory.model_calls,
    which a retry inside the openai client would hide. Give it a client with
    max_retries=0 (from_settings does)."""

    def __init__(
        self,
        client: openai.OpenAI,
        model: str,
        *,
        response_format: str = "auto",
        rate_limit_retries: int = 1,
        max_retry_after: float = 30.0,
    ) -> None:
        if response_format not in MODES:
            raise ValueError(f"response_format must be one of {', '.join(MODES)}")
        self.client = client
        self.model = model
        self.response_format = response_format
        self.rate_limit_retries = rate_limit_retries
        self.max_retry_after = max_retry_after
        self._modes: tuple[Structured, ...] = MODES[response_format]
        self._lock = threading.Lock()  # lanes share the Extractor

    @classmethod
    def from_settings(cls, llm: LLMSettings) -> Extractor | None:
        """None when no endpoint is configured (enrich jobs then wait)."""
        if not llm.configured or llm.model is None:
            return None
        client = openai.OpenAI(
            base_url=llm.base_url,
            # Local servers (Ollama, vLLM) need no key, but the client insists on one.
            api_key=llm.api_key or "unused",
            timeout=llm.timeout,
            # The Extractor retries a 429 itself (each call recorded); the job queue
            # retries the rest with backoff (don't stack retries).
            max_retries=0,
        )
        return cls(client, llm.model, response_format=llm.response_format)

    @classmethod
    def from_env(cls) -> Extractor | None:
        return cls.from_settings(Settings.from_env().llm)

    @property
    def structured(self) -> Structured:
        """The format tried first: the one that last worked, under auto."""
        with self._lock:
            return self._modes[0]

    def _worked(self, mode: Structured) -> None:
        with self._lock:
            if mode in self._modes:
                self._modes = self._modes[self._modes.index(mode) :]

    def extract(self, context: dict[str, Any]) -> ExtractionOutcome:
        return self.run(context, [], [], {})

    def run(
        self,
        context: dict[str, Any],
        calls: list[ModelCall],
        rejected: list[dict[str, Any]],
        meta: dict[str, Any],
    ) -> ExtractionOutcome:
        """extract(), filling the caller's lists as it goes, so that what happened
        before an exception (calls made, rejections) is the caller's to keep."""
        prompt = build_prompt(context)
        shown = {k: v for k, v in context.items() if k != "schema"}  # the schema is in the prompt
        user = json.dumps(shown, ensure_ascii=False)
        meta.update(
            schema_version=prompt.schema.version, model=self.model, calls=0, prompt_hash=None
        )
        messages: list[dict[str, Any]] = [{"role": "user", "content": user}]
        text, mode = self._ask(prompt, messages, calls, meta)
        try:
            outcome = self._read(text, prompt, rejected)
        except AnswerError as err:
            calls[-1].outcome = "parse_failure"
            messages += [
                {"role": "assistant", "content": text or ""},
                {
                    "role": "user",
                    "content": f"Your answer could not be used: {err}. Answer again with "
                    "only one JSON object in the schema.",
                },
            ]
            text, mode = self._ask(prompt, messages, calls, meta, modes=(mode,))
            try:
                outcome = self._read(text, prompt, rejected)
            except AnswerError as again:
                calls[-1].outcome = "parse_failure"
                rejected.append(
                    {
                        "section": "answer",
                        "item": {"raw": (text or "")[:RAW_LIMIT]},
                        "reason": "parse_failure",
                        "message": f"asked twice; {again}",
                    }
                )
                raise RetryableError(f"malformed model answer, asked twice: {again}") from again
        meta["calls"] = len(calls)
        outcome.calls, outcome.meta = list(calls), dict(meta)
        return outcome

    def _read(
        self, text: str | None, prompt: Prompt, rejected: list[dict[str, Any]]
    ) -> ExtractionOutcome:
        parsed = parse_answer(text)
        validated = validate_answer(parsed.answer, prompt.schema)
        found = list(validated.rejected)
        if parsed.truncated_tail is not None:
            found.append(
                {
                    "section": "answer",
                    "item": {"raw": parsed.truncated_tail},
                    "reason": "parse_failure",
                    "message": "the answer was cut off; its incomplete last item was dropped",
                }
            )
        rejected.extend(found)
        return ExtractionOutcome(validated.payload, list(rejected))

    def _messages(self, prompt: Prompt, mode: Structured, rest: list[dict[str, Any]]) -> Any:
        system = prompt.system
        if mode != "json_schema":  # the endpoint is not given the schema: the prompt is
            system += "\n\nThe answer's JSON schema:\n" + json.dumps(
                prompt.response_schema, ensure_ascii=False, sort_keys=True
            )
        return [{"role": "system", "content": system}, *rest]

    def _format(self, prompt: Prompt, mode: Structured) -> dict[str, Any]:
        if mode == "json_schema":
            return {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {
                        "name": "extraction",
                        "strict": prompt.strict,
                        "schema": prompt.response_schema,
                    },
                }
            }
        if mode == "json_object":
            return {"response_format": {"type": "json_object"}}
        return {}

    def _ask(
        self,
        prompt: Prompt,
        rest: list[dict[str, Any]],
        calls: list[ModelCall],
        meta: dict[str, Any],
        modes: tuple[Structured, ...] | None = None,
    ) -> tuple[str | None, Structured]:
        """One answer's text, in the first format the endpoint accepts."""
        tried = modes or self._current_modes()
        for i, mode in enumerate(tried):
            messages = self._messages(prompt, mode, rest)
            meta["prompt_hash"] = prompt.hash_for(messages[0]["content"])
            meta["structured"] = mode
            try:
                text = self._call(messages, self._format(prompt, mode), calls)
            except _FormatRefused as err:
                if i + 1 < len(tried):
                    continue
                raise RetryableError(f"the endpoint refused every answer format: {err}") from err
            meta["calls"] = len(calls)
            if modes is None:
                self._worked(mode)
            return text, mode
        raise AssertionError("unreachable")  # pragma: no cover

    def _current_modes(self) -> tuple[Structured, ...]:
        with self._lock:
            return self._modes

    def _call(self, messages: Any, fmt: dict[str, Any], calls: list[ModelCall]) -> str | None:
        for retry in range(self.rate_limit_retries + 1):
            try:
                return self._call_once(messages, fmt, calls)
            except openai.RateLimitError as err:
                wait = _retry_after(err)
                if retry == self.rate_limit_retries or wait is None or wait > self.max_retry_after:
                    raise RetryableError(f"the endpoint is rate limiting: {err}") from err
                time.sleep(wait)
        raise AssertionError("unreachable")  # pragma: no cover

    def _call_once(self, messages: Any, fmt: dict[str, Any], calls: list[ModelCall]) -> str | None:
        started = time.monotonic()

        def record(outcome: Outcome, tokens_in: int = 0, tokens_out: int = 0) -> None:
            latency = (time.monotonic() - started) * 1000
            calls.append(ModelCall(self.model, "chat", tokens_in, tokens_out, latency, outcome))

        try:
            # No temperature: reasoning models refuse the parameter.
            completion = self.client.chat.completions.create(
                model=self.model, messages=messages, **fmt
            )
        except openai.APITimeoutError as err:
            record("timeout")
            raise RetryableError(f"the model did not answer in time: {err}") from err
        except openai.RateLimitError:
            record("rate_limited")
            raise  # _call retries it after its Retry-After, or gives it to the queue
        except openai.APIStatusError as err:
            record("error")
            if fmt and _format_refusal(err):
                if self.response_format == "auto":
                    raise _FormatRefused(str(err)) from err
                # Configuration, not this episode: the format was chosen explicitly.
                raise ParkJob(
                    f"LLM endpoint refused response_format {self.response_format} ({err}); "
                    "set CHRONOMEM_LLM_RESPONSE_FORMAT to auto or a format it supports"
                ) from err
            if isinstance(
                err,
                (openai.AuthenticationError, openai.PermissionDeniedError, openai.NotFoundError),
            ):
                # Configuration, not this episode: wait for a worker with a working setup.
                raise ParkJob(
                    f"LLM endpoint rejected the request ({err}); check CHRONOMEM_LLM_*"
                ) from err
            raise RetryableError(f"the endpoint failed: {err}") from err
        except openai.APIError as err:  # connection refused, reset, invalid response
            record("error")
            raise RetryableError(f"the endpoint failed: {err}") from err
        usage = completion.usage
        record(
            "ok",
            (usage.prompt_tokens or 0) if usage else 0,
            (usage.completion_tokens or 0) if usage else 0,
        )
        if not completion.choices:
            return None
        return completion.choices[0].message.content


def _write_directly(plpy: Plpy, attempt: AttemptLog, job_kind: str = "enrich") -> None:
    """Without a runner (inside PostgreSQL): the log in the current transaction."""
    call = plpy.prepare(
        "select memory_worker.record_model_call($1, $2, null, $3, $4, $5, $6, $7, $8, $9)",
        ["uuid", "text", "uuid", "text", "text", "integer", "integer", "float8", "text"],
    )
    for u in attempt.usage:
        c = u.call
        call.execute(
            [
                u.project,
                job_kind,
                u.episode,
                c.model,
                c.operation,
                c.tokens_in,
                c.tokens_out,
                c.latency_ms,
                c.outcome,
            ]
        )
    rejections = plpy.prepare(
        "select memory_worker.record_extraction_rejections($1, $2, $3)",
        ["uuid", "jsonb", "jsonb"],
    )
    for r in attempt.rejections:
        rejections.execute([r.episode, json.dumps(r.items), json.dumps(r.meta)])
    attempt.clear()


def enrich_episode(
    plpy: Plpy,
    episode_id: str,
    extractor: Extractor | None,
    *,
    min_confidence: float = 0.5,
    turns: int = 6,
    attempt: AttemptLog | None = None,
) -> dict[str, Any]:
    """Extract and apply one episode; returns apply_extraction's report.

    Raises ParkJob without a model, RetryableError for an answer unusable twice or a
    failed call, and PartialFailure when a section failed to apply (the rest stands).
    The calls made and the items rejected go to `attempt` (the runner writes them with
    the attempt's end); without one they are written here, in the current transaction."""
    if extractor is None:
        raise ParkJob(NO_LLM_REASON)
    # Two statements: the context is built where this session runs (on Citus, the
    # coordinator), not inside a read of memory.episodes on the episode's shard.
    found = plpy.prepare(
        "select project_id::text from memory.episodes where episode_id = $1", ["uuid"]
    ).execute([episode_id])
    if not found:  # wiped since it was ingested: nothing left to understand
        return {"episode_id": str(episode_id), "skipped": "episode not found"}
    project = found[0]["project_id"]
    context = plpy.prepare(
        "select memory_worker.extraction_context($1, $2)::text as ctx", ["uuid", "integer"]
    ).execute([episode_id, turns])[0]["ctx"]
    log = attempt if attempt is not None else AttemptLog()
    calls: list[ModelCall] = []
    rejected: list[dict[str, Any]] = []
    meta: dict[str, Any] = {}
    try:
        outcome = extractor.run(json.loads(context), calls, rejected, meta)
    finally:
        log.add_calls(project, str(episode_id), calls)
        log.add_rejections(str(episode_id), rejected, meta)
        if attempt is None:
            _write_directly(plpy, log)
    rows = plpy.prepare(
        "select memory_worker.apply_extraction($1, $2, $3, $4, $5)::text as report",
        ["uuid", "jsonb", "real", "integer", "jsonb"],
    ).execute(
        [episode_id, json.dumps(outcome.payload), min_confidence, turns, json.dumps(outcome.meta)]
    )
    report: dict[str, Any] = json.loads(rows[0]["report"])
    if rejected:
        report["worker_rejected"] = len(rejected)
    failed = report.get("failed_sections") or []
    if failed:
        errors = {s: report.get(s, {}).get("error") for s in failed}
        raise PartialFailure(f"apply_extraction failed sections {failed}: {errors}", report)
    return report
