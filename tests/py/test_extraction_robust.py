"""Extraction that holds up with real endpoints: broken answers, structured-output
fallback, re-asking, timeouts, rate limits, project schemas and usage accounting.

The real worker (workers.runner, the real `openai` client) against a real database and
the scripted OpenAI-compatible server (scripted_openai.py). Each case checks the facts
stored (memory.facts_at), the rejections recorded with their reasons
(memory.extraction_rejections), and that no job was lost or run twice (memory.jobs).
The lenient reader itself (workers/answer_repair.py) is covered first, without a model.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import openai
import pytest
import worker_support
from scripted_openai import Delay, ScriptedOpenAI, Status, Usage
from worker_support import drain_until, fact, limit_attempts, make_worker

from chronomem.settings import LLMSettings, SettingsError
from workers.answer_repair import AnswerError, parse_answer, validate_answer
from workers.extraction import Extractor
from workers.extraction_prompt import ProjectSchema
from workers.runner import Worker

T1 = datetime(2024, 3, 1, 10, 0, tzinfo=UTC)


# -- the lenient reader, without a model ----------------------------------------------


def test_parse_answer_repairs_common_breakage() -> None:
    body = {"facts": [fact("a", "p", "x", "A p x.")]}
    text = json.dumps(body)
    assert parse_answer(f"```json\n{text}\n```").answer == body  # fenced
    assert parse_answer(f"Here you go:\n{text}\nHope this helps {{!}}").answer == body  # prose
    cut = parse_answer(text[:-2] + ', {"subject": "b", "predi')  # truncated mid-item
    assert cut.answer == body and cut.truncated_tail == ', {"subject": "b", "predi'
    slip = parse_answer(text[:-2] + ",\n ],}")  # trailing commas: a slip, not a cut
    assert slip.answer == body and slip.truncated_tail is None
    quoted = {"facts": [fact("a", "p", "x,]", "A p x,].")]}  # commas in strings stay
    assert parse_answer(json.dumps(quoted)).answer == quoted
    for broken in ("", "   ", "no JSON here", "this is not JSON {", "[1, 2]"):
        with pytest.raises(AnswerError):
            parse_answer(broken)


def test_validate_answer_keeps_valid_items_and_rejects_the_rest() -> None:
    answer = {
        "entities": [{"name": "Alice", "type": "person"}, {"type": "person"}],
        "facts": [
            fact("Alice", "age", "30", "Alice is 30.", confidence="0.8"),  # coerced
            fact("Alice", "mood", "calm", "Alice is calm.", confidence="high"),
        ],
        "notes": [{"kind": "diary", "content": "x"}],
        "classification": ["billing"],
    }
    result = validate_answer(answer, ProjectSchema())
    assert [e["name"] for e in result.payload["entities"]] == ["Alice"]
    assert [(f["predicate"], f["confidence"]) for f in result.payload["facts"]] == [("age", 0.8)]
    assert result.payload["notes"] == []
    # Labels are the project's rule: apply_extraction decides them.
    assert result.payload["classification"] == ["billing"]
    assert [(r["section"], r["reason"]) for r in result.rejected] == [
        ("entities", "schema_violation"),
        ("facts", "schema_violation"),
        ("notes", "schema_violation"),
    ]
    assert "confidence" in result.rejected[1]["message"]
    with pytest.raises(AnswerError, match="facts"):
        validate_answer({"facts": {"subject": "a"}}, ProjectSchema())


# -- against the database -------------------------------------------------------------


class Tenant(worker_support.Tenant):
    def say(self, session: str, *contents: str) -> list[str]:
        """Ingest each of `contents` as a user message at T1."""
        return self.ingest(
            session, *({"role": "user", "content": c, "occurred_at": str(T1)} for c in contents)
        )

    def enrich_jobs(self) -> list[dict[str, Any]]:
        return self.rows(
            "select job_id, status, attempts, last_error from memory.jobs "
            "where org_id = %s and kind = 'enrich' order by job_id",
            (self.org,),
        )

    def facts(self) -> list[tuple[str, str, str]]:
        rows = self.rows(
            "select s.name as subject, f.predicate_label as predicate, "
            "coalesce(f.object_literal, o.name) as object "
            "from memory.facts_at(%s, now()) f "
            "join memory.entities s on s.entity_id = f.subject_id "
            "left join memory.entities o on o.entity_id = f.object_entity_id "
            "order by 1, 2, 3",
            (self.project,),
        )
        return [(r["subject"], r["predicate"], r["object"]) for r in rows]

    def rejections(self) -> list[tuple[str, str]]:
        rows = self.rows(
            "select section, reason from memory.extraction_rejections "
            "where project_id = %s order by rejection_id",
            (self.project,),
        )
        return [(r["section"], r["reason"]) for r in rows]

    def model_calls(self) -> list[dict[str, Any]]:
        return self.rows(
            "select job_kind, job_id, episode_id::text, model, operation, tokens_in, "
            "tokens_out, outcome from memory.model_calls "
            "where project_id = %s and job_kind = 'enrich' "
            "order by call_id",
            (self.project,),
        )

    def set_schema(self, document: dict[str, Any]) -> Any:
        return self.one(
            "select memory.set_extraction_schema(%s, %s::jsonb)",
            (self.project, json.dumps(document)),
        )


@pytest.fixture
def tenant(app_dsn: str) -> Tenant:
    return Tenant.create(app_dsn, "extraction test")


def enrich_done(t: Tenant) -> Callable[[], bool]:
    return lambda: all(j["status"] == "done" for j in t.enrich_jobs())


def run(t: Tenant, llm: ScriptedOpenAI, app_dsn: str, admin_dsn: str, **kw: Any) -> Worker:
    worker = make_worker(app_dsn, llm, **kw)
    drain_until(worker, admin_dsn, t.org, enrich_done(t), timeout=60)
    return worker


ALICE = {"name": "Alice", "type": "person", "summary": None, "aliases": []}


def test_fenced_json_and_trailing_prose_are_read(
    tenant: Tenant, llm: ScriptedOpenAI, app_dsn: str, admin_dsn: str, quiet: Any
) -> None:
    fenced = {"entities": [ALICE], "facts": [fact("Alice", "lives_in", "Paris", "In Paris.")]}
    prose = {"entities": [ALICE], "facts": [fact("Alice", "likes", "tea", "Likes tea.")]}
    llm.answer("Paris", "```json\n" + json.dumps(fenced) + "\n```")
    llm.answer("tea", "Sure! " + json.dumps(prose) + "\nLet me know {if} you need more.")
    tenant.say("s", "Alice lives in Paris.", "Alice likes tea.")
    run(tenant, llm, app_dsn, admin_dsn)
    assert tenant.facts() == [("Alice", "likes", "tea"), ("Alice", "lives_in", "Paris")]
    assert tenant.rejections() == []
    assert [(j["status"], j["attempts"]) for j in tenant.enrich_jobs()] == [("done", 1)] * 2
    assert len(llm.chat_calls) == 2  # one call each, no re-ask


def test_truncated_answer_keeps_its_complete_items(
    tenant: Tenant, llm: ScriptedOpenAI, app_dsn: str, admin_dsn: str, quiet: Any
) -> None:
    whole = json.dumps(
        {
            "entities": [ALICE],
            "facts": [
                fact("Alice", "lives_in", "Paris", "In Paris."),
                fact("Alice", "works_at", "Acme", "Works at Acme."),
            ],
        }
    )
    llm.answer("Paris", whole[: whole.index("Works at") + 4])  # cut inside the 2nd fact
    tenant.say("s", "Alice lives in Paris and works at Acme.")
    run(tenant, llm, app_dsn, admin_dsn)
    assert tenant.facts() == [("Alice", "lives_in", "Paris")]
    assert tenant.rejections() == [("answer", "parse_failure")]
    (item,) = tenant.rows("select item, message from memory.extraction_rejections")
    assert "works_at" in item["item"]["raw"] and "cut off" in item["message"]
    assert [(j["status"], j["attempts"]) for j in tenant.enrich_jobs()] == [("done", 1)]


def test_wrong_types_are_coerced_or_rejected_item_by_item(
    tenant: Tenant, llm: ScriptedOpenAI, app_dsn: str, admin_dsn: str, quiet: Any
) -> None:
    answer = {
        "entities": [ALICE, {"name": 42}],
        "facts": [
            fact("Alice", "lives_in", "Paris", "In Paris.", confidence="0.9"),  # coerced
            fact("Alice", "likes", "tea", "Likes tea.", confidence="very"),
            fact("Alice", "age", 30, "Alice is 30.", object_type="number"),  # coerced
        ],
        "notes": [{"kind": "preference", "subject": "Alice", "content": "Prefers mornings."}, 7],
    }
    llm.answer("Paris", answer)
    tenant.say("s", "Alice, 30, lives in Paris.")
    run(tenant, llm, app_dsn, admin_dsn)
    assert tenant.facts() == [("Alice", "age", "30"), ("Alice", "lives_in", "Paris")]
    assert sorted(tenant.rejections()) == [
        ("entities", "schema_violation"),
        ("facts", "schema_violation"),
        ("notes", "schema_violation"),
    ]
    messages = tenant.rows("select section, message from memory.extraction_rejections")
    assert any(m["section"] == "facts" and "confidence" in m["message"] for m in messages)
    assert tenant.one("select count(*) from memory.notes") == 1
    assert [(j["status"], j["attempts"]) for j in tenant.enrich_jobs()] == [("done", 1)]


SCHEMA = {
    "entity_types": [
        {"name": "person", "description": "A human."},
        {"name": "company", "description": "A business."},
    ],
    "predicates": [
        {
            "name": "works_at",
            "description": "Employer.",
            "cardinality": "one",
            "object_type": "entity",
        },
        {
            "name": "age",
            "description": "Age in years.",
            "cardinality": "one",
            "object_type": "number",
        },
    ],
    "labels": [
        {"name": "billing", "description": "About money."},
        {"name": "hr", "description": "About people's jobs."},
    ],
    "fields": {
        "type": "object",
        "properties": {"sentiment": {"type": "string", "enum": ["positive", "negative"]}},
        "required": ["sentiment"],
        "additionalProperties": False,
    },
    "allow_other_predicates": False,
    "allow_other_entity_types": False,
}


def test_project_schema_changes_what_is_asked_and_accepted(
    tenant: Tenant, llm: ScriptedOpenAI, app_dsn: str, admin_dsn: str, quiet: Any
) -> None:
    version = tenant.set_schema(SCHEMA)["version"]
    acme = {"name": "Acme", "type": "company", "summary": None, "aliases": []}
    robot = {"name": "R2", "type": "droid", "summary": None, "aliases": []}
    answer = {
        "entities": [ALICE, acme, robot],
        "facts": [
            fact("Alice", "works_at", "Acme", "Alice works at Acme.", object_type="entity"),
            fact("Alice", "likes", "tea", "Alice likes tea."),  # not declared
            fact("Alice", "age", "thirty", "Alice is thirty.", object_type="number"),
        ],
        "classification": ["hr", "gossip"],
        "fields": {"sentiment": "positive"},
    }
    llm.answer("Acme", Usage(answer, 321, 54))
    (episode,) = tenant.say("s", "Alice, thirty, works at Acme and likes tea.")
    run(tenant, llm, app_dsn, admin_dsn)

    # What was asked: the schema's predicates and labels in the prompt, the labels as the
    # classification enum of the strict JSON schema.
    (call,) = llm.calls_for("Acme")
    assert call.response_format == "json_schema"
    for word in ("works_at", "Employer.", "age", "billing", "About money.", "sentiment"):
        assert word in call.system
    sent = call.body["response_format"]["json_schema"]
    props = sent["schema"]["properties"]
    assert props["classification"]["items"]["enum"] == ["billing", "hr"]
    assert props["facts"]["items"]["properties"]["predicate"]["enum"] == ["works_at", "age"]
    assert props["fields"] == SCHEMA["fields"] and sent["strict"] is True
    assert "schema" not in call.context  # in the prompt, not repeated in the message

    # What was accepted.
    assert tenant.facts() == [("Alice", "works_at", "Acme")]
    assert sorted(tenant.rejections()) == [
        ("classification", "schema_violation"),
        ("entities", "unknown_entity_type"),
        ("facts", "schema_violation"),
        ("facts", "unknown_predicate"),
    ]
    (enrichment,) = tenant.rows(
        "select schema_version, prompt_hash, model, structured, calls, labels, fields "
        "from memory.episode_extractions where episode_id = %s",
        (episode,),
    )
    expected_hash = hashlib.sha256(
        json.dumps(
            {"system": call.system, "response_schema": sent["schema"]},
            ensure_ascii=False,
            sort_keys=True,
        ).encode()
    ).hexdigest()
    assert enrichment == {
        "schema_version": version,
        "prompt_hash": expected_hash,
        "model": "scripted",
        "structured": "json_schema",
        "calls": 1,
        "labels": ["hr"],
        "fields": {"sentiment": "positive"},
    }
    schema_versions = tenant.rows(
        "select distinct schema_version from memory.extraction_rejections"
    )
    assert schema_versions == [{"schema_version": version}]
    # The usage the server reported, per project and job kind.
    (usage,) = tenant.model_calls()
    assert (usage["job_kind"], usage["episode_id"], usage["operation"]) == (
        "enrich",
        episode,
        "chat",
    )
    assert (usage["tokens_in"], usage["tokens_out"], usage["outcome"]) == (321, 54, "ok")
    assert [(j["status"], j["attempts"]) for j in tenant.enrich_jobs()] == [("done", 1)]


def test_without_a_schema_nothing_is_restricted(
    tenant: Tenant, llm: ScriptedOpenAI, app_dsn: str, admin_dsn: str, quiet: Any
) -> None:
    """Positive control of the schema test: the same undeclared predicate is stored."""
    llm.answer("tea", {"entities": [ALICE], "facts": [fact("Alice", "likes", "tea", "Tea.")]})
    tenant.say("s", "Alice likes tea.")
    run(tenant, llm, app_dsn, admin_dsn)
    assert tenant.facts() == [("Alice", "likes", "tea")]
    (call,) = llm.chat_calls
    props = call.body["response_format"]["json_schema"]["schema"]["properties"]
    assert "classification" not in props and "fields" not in props
    assert "enum" not in props["facts"]["items"]["properties"]["predicate"]


def test_empty_answer_is_asked_again_once(
    tenant: Tenant, llm: ScriptedOpenAI, app_dsn: str, admin_dsn: str, quiet: Any
) -> None:
    good = {"entities": [ALICE], "facts": [fact("Alice", "likes", "tea", "Tea.")]}
    llm.answer("tea", Usage("", 10, 0), Usage(good, 20, 5))
    (episode,) = tenant.say("s", "Alice likes tea.")
    run(tenant, llm, app_dsn, admin_dsn)
    assert tenant.facts() == [("Alice", "likes", "tea")]
    first, second = llm.calls_for("tea")
    assert first.body["messages"][-1]["role"] == "user" and len(first.body["messages"]) == 2
    assert second.body["messages"][-1]["role"] == "user"
    assert "empty" in second.body["messages"][-1]["content"]  # the validation error
    assert [(c["outcome"], c["tokens_in"]) for c in tenant.model_calls()] == [
        ("parse_failure", 10),
        ("ok", 20),
    ]
    assert tenant.rejections() == []
    assert (
        tenant.one("select calls from memory.episode_extractions where episode_id = %s", (episode,))
        == 2
    )
    assert [(j["status"], j["attempts"]) for j in tenant.enrich_jobs()] == [("done", 1)]


def test_answer_broken_twice_is_recorded_retried_and_ends_dead(
    tenant: Tenant, llm: ScriptedOpenAI, app_dsn: str, admin_dsn: str, quiet: Any
) -> None:
    llm.answer("garbled", "I cannot help with that.")
    tenant.say("s", "garbled message")
    limit_attempts(admin_dsn, tenant.org, "enrich", 2)
    worker = make_worker(app_dsn, llm)
    drain_until(
        worker,
        admin_dsn,
        tenant.org,
        lambda: tenant.enrich_jobs()[0]["status"] == "dead",
        timeout=60,
    )
    (job,) = tenant.enrich_jobs()
    assert job["attempts"] == 2 and "asked twice" in job["last_error"]
    assert len(llm.calls_for("garbled")) == 4  # two attempts, each asked twice
    # Recorded (identical rejections of the retry once), counted per call, nothing applied.
    assert tenant.rejections() == [("answer", "parse_failure")]
    (raw,) = tenant.rows("select item from memory.extraction_rejections")
    assert raw["item"] == {"raw": "I cannot help with that."}
    calls = tenant.model_calls()
    assert [c["outcome"] for c in calls] == ["parse_failure"] * 4
    assert {c["job_id"] for c in calls} == {job["job_id"]}
    assert tenant.facts() == []
    assert tenant.one("select count(*) from memory.episode_extractions") == 0


def test_timeout_is_retried_and_applied_once(
    tenant: Tenant, llm: ScriptedOpenAI, app_dsn: str, admin_dsn: str, quiet: Any
) -> None:
    good = {"entities": [ALICE], "facts": [fact("Alice", "likes", "tea", "Tea.")]}
    llm.answer("tea", Delay(3, good), good)
    tenant.say("s", "Alice likes tea.")
    run(tenant, llm, app_dsn, admin_dsn, timeout=1.0)
    assert tenant.facts() == [("Alice", "likes", "tea")]
    (job,) = tenant.enrich_jobs()
    assert (job["status"], job["attempts"]) == ("done", 2)
    assert [c["outcome"] for c in tenant.model_calls()] == ["timeout", "ok"]
    assert tenant.one("select count(*) from memory.fact_events where event_type = 'asserted'") == 1


@pytest.mark.parametrize(
    ("retry_after", "attempts"),
    [("0", 1), ("0.2", 1), ("3600", 2), ("Wed, 21 Oct 2037 07:28:00 GMT", 2), (None, 2)],
)
def test_rate_limit_then_success_stores_the_facts_once(
    tenant: Tenant,
    llm: ScriptedOpenAI,
    app_dsn: str,
    admin_dsn: str,
    quiet: Any,
    retry_after: str | None,
    attempts: int,
) -> None:
    """A 429 naming a short Retry-After is retried by the Extractor in the same attempt;
    a long one, a date or none goes back to the queue (the job's next attempt). Either
    way the fact is stored once, and both calls are recorded."""
    good = {"entities": [ALICE], "facts": [fact("Alice", "likes", "tea", "Tea.")]}
    headers = {} if retry_after is None else {"Retry-After": retry_after}
    llm.answer("tea", Status(429, headers, "slow down"), Usage(good, 7, 3))
    tenant.say("s", "Alice likes tea.")
    run(tenant, llm, app_dsn, admin_dsn)
    assert tenant.facts() == [("Alice", "likes", "tea")]
    assert [c.status for c in llm.calls_for("tea")] == [429, 200]
    (job,) = tenant.enrich_jobs()
    assert (job["status"], job["attempts"]) == ("done", attempts)
    outcomes = [(c["outcome"], c["tokens_in"]) for c in tenant.model_calls()]
    assert outcomes == [("rate_limited", 0), ("ok", 7)]
    assert tenant.one("select count(*) from memory.fact_events where event_type = 'asserted'") == 1


def test_endpoint_without_json_schema_falls_back_and_remembers(
    tenant: Tenant, app_dsn: str, admin_dsn: str, quiet: Any
) -> None:
    with ScriptedOpenAI(dim=384, json_schema=False).running() as llm:
        llm.answer("tea", {"entities": [ALICE], "facts": [fact("Alice", "likes", "tea", "Tea.")]})
        llm.answer(
            "Paris", {"entities": [ALICE], "facts": [fact("Alice", "lives_in", "Paris", "P.")]}
        )
        client = openai.OpenAI(base_url=llm.base_url, api_key="test", max_retries=0)
        extractor = Extractor(client, "scripted")
        tenant.say("s", "Alice likes tea.")
        run(tenant, llm, app_dsn, admin_dsn, extractor=extractor)
        assert [(c.response_format, c.status) for c in llm.calls_for("tea")] == [
            ("json_schema", 400),
            ("json_object", 200),
        ]
        assert extractor.structured == "json_object"
        # The next episode goes straight to what worked.
        tenant.say("s", "Alice lives in Paris.")
        run(tenant, llm, app_dsn, admin_dsn, extractor=extractor)
        assert [c.response_format for c in llm.calls_for("Paris")] == ["json_object"]
        assert "JSON schema" in llm.calls_for("Paris")[0].system  # the schema is in the prompt
    assert tenant.facts() == [("Alice", "likes", "tea"), ("Alice", "lives_in", "Paris")]
    structured = tenant.rows("select structured from memory.episode_extractions order by 1")
    assert structured == [{"structured": "json_object"}] * 2
    assert [(j["status"], j["attempts"]) for j in tenant.enrich_jobs()] == [("done", 1)] * 2
    assert [c["outcome"] for c in tenant.model_calls()] == ["error", "ok", "ok"]


def test_plain_text_mode_sends_no_response_format(
    tenant: Tenant, llm: ScriptedOpenAI, app_dsn: str, admin_dsn: str, quiet: Any
) -> None:
    llm.answer("tea", {"entities": [ALICE], "facts": [fact("Alice", "likes", "tea", "Tea.")]})
    client = openai.OpenAI(base_url=llm.base_url, api_key="test", max_retries=0)
    extractor = Extractor(client, "scripted", response_format="none")
    tenant.say("s", "Alice likes tea.")
    run(tenant, llm, app_dsn, admin_dsn, extractor=extractor)
    assert [c.response_format for c in llm.chat_calls] == [None]
    assert tenant.facts() == [("Alice", "likes", "tea")]


def test_response_format_setting_is_checked() -> None:
    env = {"CHRONOMEM_LLM_BASE_URL": "http://127.0.0.1:1/v1", "CHRONOMEM_LLM_MODEL": "m"}
    assert LLMSettings.from_env(env).response_format == "auto"
    chosen = LLMSettings.from_env({**env, "CHRONOMEM_LLM_RESPONSE_FORMAT": "JSON_OBJECT"})
    assert chosen.response_format == "json_object"
    extractor = Extractor.from_settings(chosen)
    assert extractor is not None and extractor.structured == "json_object"
    with pytest.raises(SettingsError, match="CHRONOMEM_LLM_RESPONSE_FORMAT"):
        LLMSettings.from_env({**env, "CHRONOMEM_LLM_RESPONSE_FORMAT": "xml"})


def test_a_format_set_explicitly_that_the_endpoint_refuses_parks_the_job(
    tenant: Tenant, app_dsn: str, admin_dsn: str, quiet: Any
) -> None:
    with ScriptedOpenAI(dim=384, json_schema=False).running() as llm:
        client = openai.OpenAI(base_url=llm.base_url, api_key="test", max_retries=0)
        extractor = Extractor(client, "scripted", response_format="json_schema")
        tenant.say("s", "Alice likes tea.")
        assert make_worker(app_dsn, llm, extractor=extractor).drain(timeout=30)
        assert [c.response_format for c in llm.chat_calls] == ["json_schema"]  # no fallback
    (job,) = tenant.enrich_jobs()
    assert job["status"] == "waiting" and "CHRONOMEM_LLM_RESPONSE_FORMAT" in job["last_error"]
    assert [c["outcome"] for c in tenant.model_calls()] == ["error"]  # the call still counts
    assert tenant.facts() == []
