"""The enrich job: one model call per episode, its answer applied by SQL.

`enrich_episode` reads what the model may see (memory_worker.extraction_context), asks the
model once for JSON in the schema below, validates the answer with pydantic and hands
it to memory_worker.apply_extraction, which decides everything (entities, supersession,
windows, contradictions, confidence floor). It talks to the database only through
the `Plpy` interface, so it can also run inside PostgreSQL (see workers/plpy.py).
"""

from __future__ import annotations

import json
from typing import Any, Literal

import openai
import pydantic
from pydantic import BaseModel, Field

from chronomem.settings import LLMSettings, Settings
from workers.errors import ParkJob, PartialFailure, RetryableError
from workers.plpy import Plpy

NO_LLM_REASON = "no LLM endpoint configured: set CHRONOMEM_LLM_BASE_URL"


# The answer's schema. Every field is listed as required in the strict JSON schema
# the model gets (the openai client makes it so); the defaults only make validation
# lenient towards servers that omit nulls.
class Entity(BaseModel):
    name: str = Field(description="The entity's most specific name as written.")
    type: str | None = Field(None, description="person, organization, product, place, ...")
    summary: str | None = Field(None, description="One short sentence about it.")
    aliases: list[str] = Field(default_factory=list, description="Other names it goes by.")


class Fact(BaseModel):
    subject: str = Field(description="Entity name the fact is about.")
    predicate: str = Field(description="Short snake_case relation; reuse a declared one.")
    object: str = Field(description="Entity name or literal value.")
    object_type: Literal["entity", "literal"] | None = None
    content: str = Field(description="The fact as one self-contained sentence.")
    confidence: float = Field(ge=0, le=1, description="How clearly the message states it.")
    valid_from: str | None = Field(None, description="ISO 8601; only if the text says when.")
    valid_to: str | None = Field(None, description="ISO 8601; only if the text says when.")


class Contradiction(BaseModel):
    fact_id: str = Field(description="A fact_id from known_facts, never another.")
    reason: str


class Note(BaseModel):
    kind: Literal["preference", "summary"]
    subject: str | None = Field(None, description="Entity name it is about, if any.")
    content: str


class Extraction(BaseModel):
    entities: list[Entity] = Field(default_factory=list)
    facts: list[Fact] = Field(default_factory=list)
    contradictions: list[Contradiction] = Field(default_factory=list)
    notes: list[Note] = Field(default_factory=list)


SYSTEM_PROMPT = """\
You turn one message of a conversation into long-term memory for an AI agent.
The user message is JSON: `episode` (the message, with its occurred_at), \
`recent_turns` (earlier messages, context only), `known_facts` (what memory holds \
now about the entities mentioned, each with a fact_id) and `predicates` (declared \
relations with their cardinality). Extract only what `episode` states or implies.

Answer with JSON in the given schema:
- entities: named people, organizations, products, places... with a type, a short \
summary and aliases (other names used for the same thing).
- facts: subject-predicate-object statements. subject (and object when \
object_type is "entity") are entity names; predicates are short snake_case \
relations (reuse a declared predicate when one fits); content is one \
self-contained sentence; confidence is 0 to 1.
- Time: valid_from / valid_to are ISO 8601 timestamps, set only when the text says \
when a fact started or ended (resolve relative dates like "last March" against \
the episode's occurred_at); otherwise null, and the fact starts at the episode.
- A predicate declared with cardinality "one" has one value per subject at a time: \
state the new value as a fact; memory closes the old value itself (do not list it \
as a contradiction).
- contradictions: facts from known_facts that this message shows are no longer \
true and that no new fact replaces. Cite only fact_id values from known_facts; \
never invent one.
- notes: preferences (kind "preference") and summaries (kind "summary") that are \
not subject-predicate-object facts.
Empty lists are fine. Never repeat known facts that did not change."""


class Extractor:
    """One chat.completions call with a strict JSON-schema answer."""

    def __init__(self, client: openai.OpenAI, model: str) -> None:
        self.client = client
        self.model = model

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
            max_retries=1,  # the job queue retries with backoff; don't stack retries
        )
        return cls(client, llm.model)

    @classmethod
    def from_env(cls) -> Extractor | None:
        return cls.from_settings(Settings.from_env().llm)

    def extract(self, context: dict[str, Any]) -> Extraction:
        try:
            completion = self.client.chat.completions.parse(
                model=self.model,
                messages=[
                    {"role": "system", "content": SYSTEM_PROMPT},
                    {"role": "user", "content": json.dumps(context, ensure_ascii=False)},
                ],
                # No temperature: reasoning models refuse the parameter.
                response_format=Extraction,
            )
        except pydantic.ValidationError as err:  # not JSON, or not the schema
            raise RetryableError(f"malformed model answer: {err}") from err
        except (openai.LengthFinishReasonError, openai.ContentFilterFinishReasonError) as err:
            raise RetryableError(f"model answer unusable: {err}") from err
        except (
            openai.AuthenticationError,
            openai.PermissionDeniedError,
            openai.NotFoundError,
        ) as err:
            # Configuration, not this episode: wait for a worker with a working setup.
            raise ParkJob(
                f"LLM endpoint rejected the request ({err}); check CHRONOMEM_LLM_*"
            ) from err
        message = completion.choices[0].message
        if message.parsed is None:
            raise RetryableError(f"model gave no answer (refusal: {message.refusal!r})")
        return message.parsed


def enrich_episode(
    plpy: Plpy,
    episode_id: str,
    extractor: Extractor | None,
    *,
    min_confidence: float = 0.5,
    turns: int = 6,
) -> dict[str, Any]:
    """Extract and apply one episode; returns apply_extraction's report.

    Raises ParkJob without a model, RetryableError for a malformed answer, and
    PartialFailure when a section failed to apply (the rest stands)."""
    if extractor is None:
        raise ParkJob(NO_LLM_REASON)
    found = plpy.prepare(
        "select memory_worker.extraction_context($1, $2)::text as ctx "
        "from memory.episodes where episode_id = $1",
        ["uuid", "integer"],
    ).execute([episode_id, turns])
    if not found:  # wiped since it was ingested: nothing left to understand
        return {"episode_id": str(episode_id), "skipped": "episode not found"}
    extraction = extractor.extract(json.loads(found[0]["ctx"]))
    payload = extraction.model_dump(mode="json", exclude_none=True)
    rows = plpy.prepare(
        "select memory_worker.apply_extraction($1, $2, $3, $4)::text as report",
        ["uuid", "jsonb", "real", "integer"],
    ).execute([episode_id, json.dumps(payload), min_confidence, turns])
    report: dict[str, Any] = json.loads(rows[0]["report"])
    failed = report.get("failed_sections") or []
    if failed:
        errors = {s: report.get(s, {}).get("error") for s in failed}
        raise PartialFailure(f"apply_extraction failed sections {failed}: {errors}", report)
    return report
