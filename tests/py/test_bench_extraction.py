"""`python -m benchmarks extraction` as a smoke test: the real pipeline (golden schema,
ingest, the worker's Extractor and apply_extraction, facts_at) against the scripted
OpenAI-compatible server, answering as the golden set says (every score 1.0) or wrongly
on a few turns (scores below 1, each miss named). Plus the scoring rules on their own."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from scripted_openai import ScriptedOpenAI, _context

from benchmarks import extraction
from benchmarks.__main__ import build_parser
from benchmarks.common import BenchDatabase

GOLDEN = extraction.load_golden()
Override = Callable[[dict[str, Any]], dict[str, Any]]


class GoldenModel(ScriptedOpenAI):
    """Answers each golden turn with extraction.golden_answer, or with what `wrong`
    makes of it for the turns it names ((conversation id, turn index))."""

    def __init__(self, wrong: Mapping[tuple[str, int], Override] | None = None) -> None:
        super().__init__()
        self.wrong = dict(wrong or {})
        self.turns = {
            t.content: (c, i) for c in GOLDEN.conversations for i, t in enumerate(c.turns)
        }
        self.script_lock = threading.Lock()

    def _chat(self, body: dict[str, Any]) -> tuple[int, dict[str, str], dict[str, Any]]:
        context = _context(body)
        episode = context["episode"]["content"]
        if episode in self.turns:
            conv, i = self.turns[episode]
            answer = extraction.golden_answer(conv, i, context)
            if (conv.id, i) in self.wrong:
                answer = self.wrong[conv.id, i](answer)
            with self._lock:
                self._script = {episode: [answer]}
        return super()._chat(body)


def _quiet(admin_dsn: str) -> None:
    """Other tests' pending enrich jobs set aside: the benchmark's worker claims any org's."""
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(
            "update memory.jobs set status = 'done', locked_by = null, locked_until = null, "
            "finished_at = now() where kind = 'enrich' "
            "and status in ('queued', 'running', 'waiting')"
        )


@pytest.fixture
def bench(
    admin_dsn: str, owner_dsn: str, app_dsn: str, tmp_path: Path
) -> Iterator[Callable[[GoldenModel], dict[str, Any]]]:
    """Runs the command against a scripted model on the test database; its result file."""

    def run(model: GoldenModel) -> dict[str, Any]:
        _quiet(admin_dsn)
        with model.running():
            args = build_parser().parse_args(
                [
                    "extraction",
                    "--base-url",
                    model.base_url,
                    "--model",
                    "scripted",
                    "--api-key",
                    "test",
                    "--out",
                    str(tmp_path),
                    "--drain-timeout",
                    "60",
                ]
            )
            db = BenchDatabase("test", admin_dsn, owner_dsn, app_dsn, "test")
            path = extraction.run(args, db)
        result: dict[str, Any] = json.loads(path.read_text())
        return result

    yield run
    _quiet(admin_dsn)
    with psycopg.connect(admin_dsn, autocommit=True) as conn:  # the runs' embed jobs too
        conn.execute(
            "update memory.jobs set status = 'done', finished_at = now() where status = 'queued' "
            "and org_id in (select org_id from memory.orgs where name = 'benchmark extraction')"
        )


def test_golden_answers_score_one(bench: Callable[[GoldenModel], dict[str, Any]]) -> None:
    model = GoldenModel()
    r = bench(model)
    turns = sum(len(c.turns) for c in GOLDEN.conversations)
    assert r["misses"] == []
    for key in ("triples", "current", "as_of", "classification"):
        assert (r[key]["precision"], r[key]["recall"], r[key]["f1"]) == (1.0, 1.0, 1.0), key
    assert r["triples"]["tp"] == len(
        {(c.id, extraction.gold_key(c, g)) for c in GOLDEN.conversations for g in c.facts}
    )
    assert r["windows"] == {"dated": 7, "correct": 7, "accuracy": 1.0}
    assert r["classification"]["exact_turns"] == turns
    assert r["jobs"] == {"done": turns}
    assert r["rejections"]["total"] == 0
    # One call per turn, its usage as the scripted server reported it (1 in, 1 out).
    assert r["usage"]["calls"] == turns == len(model.chat_calls)
    assert (r["usage"]["tokens_in"], r["usage"]["tokens_out"]) == (turns, turns)
    assert r["usage"]["database"]["calls"] == turns
    # The model was asked with the golden schema (its labels come from nowhere else).
    assert all("small_talk" in json.dumps(c.body) for c in model.chat_calls)


def _set(path: str, value: Any) -> Override:
    """The answer with facts[i].<key> (path "i.key") changed."""
    index, key = path.split(".")

    def change(answer: dict[str, Any]) -> dict[str, Any]:
        answer["facts"][int(index)][key] = value
        return answer

    return change


def test_wrong_answers_lower_the_scores_and_are_named(
    bench: Callable[[GoldenModel], dict[str, Any]],
) -> None:
    def no_retraction(answer: dict[str, Any]) -> dict[str, Any]:
        return {**answer, "contradictions": []}

    def billing_only(answer: dict[str, Any]) -> dict[str, Any]:
        return {**answer, "classification": ["billing"]}

    def off_schema(answer: dict[str, Any]) -> dict[str, Any]:
        learning = {"subject": "Amara Okafor", "predicate": "learning", "object": "Portuguese",
                    "object_type": "literal", "content": "Amara is learning Portuguese.",
                    "confidence": 0.9, "valid_from": None, "valid_to": None}  # fmt: skip
        return {**answer, "facts": [learning]}

    wrong: dict[tuple[str, int], Override] = {
        ("c03_plan_upgrade", 1): _set("0.object", "Premium"),  # the wrong new plan
        ("c07_move", 1): _set("0.valid_from", None),  # the move's date missed
        ("c04_retraction", 1): no_retraction,  # penicillin never retracted
        ("c12_seat_mismatch", 0): billing_only,  # support_request missed
    }
    r = bench(GoldenModel({**wrong, ("c05_birthday_languages", 1): off_schema}))
    assert r["triples"]["f1"] < 1 and r["current"]["f1"] < 1 and r["as_of"]["f1"] < 1
    assert r["windows"]["correct"] == r["windows"]["dated"] - 1
    assert r["classification"]["recall"] < 1 and r["classification"]["precision"] == 1.0
    named = {(m["conversation"], m["scope"], m["kind"], m.get("triple")) for m in r["misses"]}
    plan = "brightline logistics | plan"
    assert ("c03_plan_upgrade", "current", "missing", f"{plan} | enterprise") in named
    assert ("c03_plan_upgrade", "current", "extra", f"{plan} | premium") in named
    assert ("c04_retraction", "current", "extra", "jonas berg | allergic_to | penicillin") in named
    assert ("c07_move", "window", "wrong", "sofia marino | lives_in | turin") in named
    assert any(
        m["conversation"] == "c12_seat_mismatch"
        and m["scope"] == "classification"
        and m["turn"] == 0
        for m in r["misses"]
    )
    # A predicate the schema lacks is rejected, not stored: counted, not a miss.
    assert r["rejections"]["by_reason"] == {"unknown_predicate": 1}
    # Nothing else is wrong.
    assert {m["conversation"] for m in r["misses"]} == {c for c, _ in wrong}


# -- the scoring rules, without a database ---------------------------------------------


def _conv(conv_id: str) -> extraction.Conversation:
    return next(c for c in GOLDEN.conversations if c.id == conv_id)


def test_golden_windows_follow_supersession_dates_and_retractions() -> None:
    def window(conv_id: str, obj: str) -> tuple[datetime, datetime | None]:
        g = next(g for g in _conv(conv_id).facts if g.object == obj)
        return g.start, g.end

    # A new employer from its stated date closes the old one then, not at the turn.
    assert window("c01_job_change", "Northwind Analytics") == (
        datetime(2024, 3, 4, 9, tzinfo=UTC),
        datetime(2024, 9, 2, tzinfo=UTC),
    )
    assert window("c02_since_march", "Lisbon") == (datetime(2023, 3, 1, tzinfo=UTC), None)
    # A retraction ends the fact at the turn that retracts it.
    assert window("c04_retraction", "penicillin") == (
        datetime(2024, 2, 20, 8, tzinfo=UTC),
        datetime(2024, 2, 20, 8, 5, tzinfo=UTC),
    )
    # A closed window the text gives.
    assert window("c13_past_job", "Initech") == (
        datetime(2018, 3, 1, tzinfo=UTC),
        datetime(2021, 6, 30, tzinfo=UTC),
    )
    # Nothing to extract: no golden facts at any instant.
    assert extraction.holds(_conv("c10_small_talk"), None) == set()


def test_matching_normalizes_case_space_aliases_dates_and_numbers() -> None:
    conv = _conv("c01_job_change")
    assert extraction.triple(conv, " priya  ", "works_at", "NORTHWIND.", "entity") == (
        "priya raman",
        "works_at",
        "northwind analytics",
    )
    # The predicate is exact: no synonyms, no case folding.
    got = extraction.triple(conv, "Priya", "employed_by", "Northwind", "entity")
    assert got[1] == "employed_by"
    assert extraction.norm_object("1990-07-14T00:00:00Z", "date") == "1990-07-14"
    assert extraction.norm_object("25.0", "number") == extraction.norm_object("25", "number")
    assert extraction.norm_object("1,200", "number") == "1200"
    assert extraction.prf(0, 0, 0)["f1"] == 1.0 and extraction.prf(0, 1, 1)["f1"] == 0.0
