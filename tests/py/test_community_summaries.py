"""Community summaries end to end: the real worker, the real `openai` client and the
scripted OpenAI-compatible server (scripted_openai.py, answer_chat).

A computation that leaves a community without a summary for its members queues one
summarize_communities job; the worker asks the model about those communities only and
stores the answer; memory.context shows it. A computation that finds the same members
asks nothing; new members ask again for that community alone. Without a model the job
waits. A subject wipe leaves no summary that names the subject (another community's
survives)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import psycopg
import pytest
import worker_support
from scripted_openai import ScriptedOpenAI, Usage
from worker_support import drain, make_worker

from workers.extraction import NO_LLM_REASON

KIND = "summarize_communities"


def _facts(*triples: tuple[str, str, str]) -> str:
    return json.dumps(
        [
            {
                "subject": s,
                "predicate": p,
                "object": o,
                "object_type": "entity",
                "content": f"{s} {p.replace('_', ' ')} {o}.",
            }
            for s, p, o in triples
        ]
    )


class Tenant(worker_support.Tenant):
    def assert_facts(self, *triples: tuple[str, str, str]) -> None:
        self.one("select memory.assert_facts(%s, %s::jsonb)", (self.project, _facts(*triples)))

    def refresh(self) -> dict[str, Any]:
        result: dict[str, Any] = self.one("select memory.refresh_communities(%s)", (self.project,))
        return result

    def communities(self) -> dict[str, dict[str, Any]]:
        """The project's communities by label (listed, with their summaries)."""
        page = self.one("select memory.list_communities(%s)", (self.project,))
        return {c["label"]: c for c in page["communities"]}

    def community_of(self, member: str) -> dict[str, Any]:
        """The listed community that holds `member` (a label may change with the links)."""
        (found,) = (
            c for c in self.communities().values() if member in {m["name"] for m in c["members"]}
        )
        return found

    def summary_jobs(self) -> list[dict[str, Any]]:
        return self.rows(
            "select job_id, status, last_error, result from memory.jobs "
            "where org_id = %s and kind = %s order by job_id",
            (self.org, KIND),
        )


@pytest.fixture
def tenant(app_dsn: str) -> Tenant:
    return Tenant.create(app_dsn, "summaries test")


def answer(llm: ScriptedOpenAI, summaries: dict[str, str], usage: tuple[int, int] = (1, 1)) -> None:
    """The model's next answer to a summaries request: {community_id: summary}."""
    reply = {"summaries": [{"community_id": k, "summary": v} for k, v in summaries.items()]}
    # As a model writes it: fenced, with prose after (read leniently).
    text = f"```json\n{json.dumps(reply)}\n```\nHope this helps!"
    llm.answer_chat('"communities"', Usage(text, *usage))


def asked(llm: ScriptedOpenAI) -> list[list[str]]:
    """Per summaries request, the labels of the communities it asked about."""
    return [
        sorted(c["label"] for c in json.loads(call.body["messages"][-1]["content"])["communities"])
        for call in llm.chats_for('"communities"')
    ]


def test_only_changed_communities_are_summarized_and_shown_in_context(
    tenant: Tenant, llm: ScriptedOpenAI, app_dsn: str, quiet: Any
) -> None:
    tenant.assert_facts(
        ("Ann", "knows", "Ben"), ("Ben", "works_at", "Acme"), ("Cat", "knows", "Dan")
    )
    assert tenant.refresh()["computed"]
    groups = tenant.communities()
    assert set(groups) == {"Ben", "Cat"}
    assert [j["status"] for j in tenant.summary_jobs()] == ["queued"]
    answer(
        llm,
        {
            groups["Ben"]["community_id"]: "Ann and Ben know each other; Ben works at Acme.",
            groups["Cat"]["community_id"]: "Cat and Dan know each other.",
        },
        usage=(120, 30),
    )
    worker = make_worker(app_dsn, llm, extract=False, summarize=True)
    drain(worker)

    assert asked(llm) == [["Ben", "Cat"]]
    # The request showed each community's members and facts.
    shown = json.loads(llm.chats_for('"communities"')[0].body["messages"][-1]["content"])
    ben = next(c for c in shown["communities"] if c["label"] == "Ben")
    assert sorted(m["name"] for m in ben["members"]) == ["Acme", "Ann", "Ben"]
    assert sorted(ben["facts"]) == ["Ann knows Ben.", "Ben works at Acme."]
    groups = tenant.communities()
    assert groups["Ben"]["summary"] == "Ann and Ben know each other; Ben works at Acme."
    assert groups["Cat"]["summary"] == "Cat and Dan know each other."
    assert groups["Ben"]["summarized_at"] is not None
    job = tenant.summary_jobs()[0]
    assert job["status"] == "done" and job["result"]["stored"] == 2
    # The call's usage, recorded under the job's kind, as the server reported it.
    usage = tenant.rows(
        "select job_kind, model, operation, calls, tokens_in, tokens_out "
        "from memory.model_usage(%s) where job_kind = %s",
        (tenant.project, KIND),
    )
    assert usage == [
        {
            "job_kind": KIND,
            "model": "scripted-summaries",
            "operation": "chat",
            "calls": 1,
            "tokens_in": 120,
            "tokens_out": 30,
        }
    ]

    # The context names the community with its summary.
    context = tenant.one("select memory.context(%s, 'Where does Ben work?')", (tenant.project,))
    by_label = {c["label"]: c for c in context["communities"]}
    assert by_label["Ben"]["summary"] == "Ann and Ben know each other; Ben works at Acme."
    assert "Summary: Ann and Ben know each other; Ben works at Acme." in context["text"]

    # Unchanged: no computation, no job, no call.
    assert not tenant.refresh()["computed"]
    # An edge within a community: computed again, the same members, no call.
    tenant.assert_facts(("Ann", "works_at", "Acme"))
    assert tenant.refresh()["computed"]
    drain(worker)
    assert len(asked(llm)) == 1
    assert len(tenant.summary_jobs()) == 1
    assert tenant.community_of("Ben")["summary"] == groups["Ben"]["summary"]

    # New members: that community alone is asked about again.
    tenant.assert_facts(("Dan", "knows", "Eve"))
    assert tenant.refresh()["computed"]
    cat = tenant.community_of("Cat")
    assert cat["summary"] is None
    assert tenant.community_of("Ben")["summary"] == groups["Ben"]["summary"]
    answer(llm, {cat["community_id"]: "Cat, Dan and Eve are acquainted."})
    drain(worker)
    assert asked(llm) == [["Ben", "Cat"], [cat["label"]]]
    assert tenant.community_of("Cat")["summary"] == "Cat, Dan and Eve are acquainted."


def test_an_answer_for_members_that_changed_meanwhile_is_not_stored(
    tenant: Tenant, llm: ScriptedOpenAI, app_dsn: str, quiet: Any
) -> None:
    """The model answers for a community whose members changed after the job read it:
    skipped (the next computation asks again), and an unknown id is ignored."""
    tenant.assert_facts(("Ann", "knows", "Ben"))
    tenant.refresh()
    old = tenant.communities()["Ann"]["community_id"]
    inputs = tenant.one("select memory_worker.community_summary_inputs(%s)", (tenant.project,))
    tenant.assert_facts(("Ben", "knows", "Cat"))
    tenant.refresh()
    report = tenant.one(
        "select memory_worker.store_community_summaries(%s, %s::jsonb)",
        (
            tenant.project,
            json.dumps(
                [
                    {
                        "community_id": old,
                        "members_digest": inputs[0]["members_digest"],
                        "summary": "Ann knows Ben.",
                        "fact_ids": [],
                    }
                ]
            ),
        ),
    )
    assert report == {"stored": 0, "skipped": [{"community_id": old, "reason": "community_gone"}]}
    # The job queued by the new computation asks about the new community; an answer
    # naming another id is left out.
    group = tenant.communities()["Ben"]
    answer(llm, {str(uuid.uuid4()): "Invented.", group["community_id"]: "Ann, Ben and Cat."})
    drain(make_worker(app_dsn, llm, extract=False, summarize=True))
    assert tenant.communities()["Ben"]["summary"] == "Ann, Ben and Cat."


def test_without_a_model_the_job_waits(tenant: Tenant, app_dsn: str, quiet: Any) -> None:
    tenant.assert_facts(("Ann", "knows", "Ben"))
    tenant.refresh()
    with ScriptedOpenAI().running() as server:
        drain(make_worker(app_dsn, server, extract=False))
        assert server.chat_calls == []
    jobs = tenant.summary_jobs()
    assert [(j["status"], j["last_error"]) for j in jobs] == [("waiting", NO_LLM_REASON)]
    assert tenant.communities()["Ann"]["summary"] is None
    # Another computation adds no second job while one waits.
    tenant.assert_facts(("Ann", "works_at", "Acme"))
    tenant.refresh()
    assert len(tenant.summary_jobs()) == 1


def test_a_subject_wipe_leaves_no_summary_naming_the_subject(
    tenant: Tenant, llm: ScriptedOpenAI, app_dsn: str, admin_dsn: str, quiet: Any
) -> None:
    tenant.assert_facts(
        ("Ann", "knows", "Bartholomew"),
        ("Bartholomew", "works_at", "Acme"),
        ("Cat", "knows", "Dan"),
        ("Eve", "knows", "Fay"),
    )
    tenant.refresh()
    groups = tenant.communities()
    answer(
        llm,
        {
            groups["Bartholomew"]["community_id"]: "Ann knows Bartholomew, who works at Acme.",
            # Names the subject without holding it (the model's words).
            groups["Cat"]["community_id"]: "Cat knows Dan; both met Bartholomew once.",
            groups["Eve"]["community_id"]: "Eve and Fay are friends.",
        },
    )
    drain(make_worker(app_dsn, llm, extract=False, summarize=True))
    assert all(g["summary"] for g in tenant.communities().values())

    tenant.one("select memory.wipe(%s, p_subject => 'Bartholomew')", (tenant.project,))

    with psycopg.connect(admin_dsn) as conn:  # every org, past row-level security
        named = conn.execute(
            "select count(*) from memory.communities where summary ilike '%%bartholomew%%'"
        ).fetchone()
        jobs = conn.execute(
            "select count(*) from memory.jobs where org_id = %s and (result::text ilike "
            "'%%bartholomew%%' or payload::text ilike '%%bartholomew%%')",
            (tenant.org,),
        ).fetchone()
    assert named == (0,) and jobs == (0,)
    groups = tenant.communities()
    assert "Bartholomew" not in groups
    assert groups["Cat"]["summary"] is None
    # Positive control: the summary that names nothing wiped survives.
    assert groups["Eve"]["summary"] == "Eve and Fay are friends."
    # The cleared one is asked for again.
    assert [j["status"] for j in tenant.summary_jobs()][-1] == "queued"


def test_a_session_wipe_clears_the_summaries_written_from_its_facts(
    tenant: Tenant, llm: ScriptedOpenAI, app_dsn: str, quiet: Any
) -> None:
    (episode,) = tenant.ingest("s1", {"role": "user", "content": "Gus knows Hal."})
    fact = {"subject": "Gus", "predicate": "knows", "object": "Hal", "object_type": "entity"}
    tenant.one(
        "select memory.assert_facts(%s, %s::jsonb)",
        (tenant.project, json.dumps([{**fact, "source_episode_id": episode}])),
    )
    tenant.assert_facts(("Ivy", "knows", "Jo"))
    tenant.refresh()
    groups = tenant.communities()
    answer(
        llm,
        {
            groups["Gus"]["community_id"]: "Gus knows Hal.",
            groups["Ivy"]["community_id"]: "Ivy knows Jo.",
        },
    )
    drain(make_worker(app_dsn, llm, extract=False, summarize=True))
    assert tenant.communities()["Gus"]["summary"] == "Gus knows Hal."

    tenant.one("select memory.wipe(%s, p_session => 's1')", (tenant.project,))
    groups = tenant.communities()
    assert groups["Gus"]["summary"] is None and groups["Gus"]["summarized_at"] is None
    assert groups["Ivy"]["summary"] == "Ivy knows Jo."  # positive control
