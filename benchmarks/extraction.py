"""Extraction quality of an OpenAI-compatible endpoint on the golden set
(benchmarks/golden/extraction.json): the real pipeline (a project with the golden
extraction schema, the conversations ingested, the enrich jobs drained by the worker's
Extractor), then what memory.facts_at holds compared with what a careful reader extracts.

Matching (benchmarks/README.md, "extraction"): a triple is (subject, predicate, object),
each compared after casefolding and collapsing whitespace (a trailing period dropped);
subject and entity objects through the conversation's aliases to one name; the predicate
exactly as the schema names it (no synonyms); date objects by their calendar day, number
objects by value. A golden fact holds from its valid_from (else its turn's occurred_at)
until its valid_to, the start of the next value of a cardinality-one predicate, or the
turn that ends it (a retraction), whichever comes first. The scoring functions are pure:
tests/py/test_bench_extraction.py runs them on scripted answers."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from pathlib import Path
from time import perf_counter
from typing import Any

import openai
import psycopg

from benchmarks.common import BenchDatabase, Conn, Run, latency_ms, scalar
from chronomem.paths import REPO_ROOT
from chronomem.settings import LLMSettings
from workers.embedding import OpenAIEmbedder
from workers.extraction import ExtractionOutcome, Extractor, ModelCall
from workers.handlers import build_handlers
from workers.runner import Worker

HELP = "extraction quality of an OpenAI-compatible model on the golden set (P/R/F1, windows)"

GOLDEN = REPO_ROOT / "benchmarks" / "golden" / "extraction.json"
WINDOW_TOLERANCE = timedelta(days=1)  # a window's bound is right within a day
PENDING = ("queued", "running")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    a = parser.add_argument
    a("--base-url", required=True, help="the endpoint, e.g. http://localhost:11434/v1 (Ollama)")
    a("--model", required=True, help="the chat model's name at that endpoint")
    a(
        "--api-key",
        default=os.environ.get("CHRONOMEM_LLM_API_KEY"),
        help="the endpoint's key (default: CHRONOMEM_LLM_API_KEY; local servers need none)",
    )
    a(
        "--response-format",
        choices=("auto", "json_schema", "json_object", "none"),
        default="auto",
        help="how the answer's JSON is asked for, as CHRONOMEM_LLM_RESPONSE_FORMAT (auto)",
    )
    a("--timeout", type=float, default=120.0, help="seconds per model call (120)")
    a("--min-confidence", type=float, default=0.5, help="the worker's confidence floor (0.5)")
    a("--golden", type=Path, default=GOLDEN, help="the golden set (benchmarks/golden/)")
    a("--limit-conversations", type=int, help="only the first N conversations")
    a(
        "--drain-timeout",
        type=float,
        default=1800.0,
        help="seconds the enrich jobs may take in all, retries included (1800)",
    )


# --------------------------------------------------------------------------- golden set


def _instant(text: str) -> datetime:
    """An ISO 8601 date or timestamp as an aware instant (a bare date: midnight UTC)."""
    at = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return at if at.tzinfo else at.replace(tzinfo=UTC)


@dataclass(frozen=True)
class GoldFact:
    subject: str
    predicate: str
    object: str
    object_type: str
    turn: int  # index of the turn that states it
    start: datetime  # valid_from, else the turn's occurred_at
    end: datetime | None  # derived: valid_to, next value, or the turn that ends it
    dated_from: datetime | None  # valid_from as the text gives it
    dated_to: datetime | None  # valid_to as the text gives it


@dataclass(frozen=True)
class Turn:
    role: str
    content: str
    occurred_at: datetime
    labels: frozenset[str]
    facts: list[dict[str, Any]]
    ends: list[dict[str, Any]]


@dataclass
class Conversation:
    id: str
    covers: list[str]
    entities: dict[str, dict[str, Any]]
    turns: list[Turn]
    facts: list[GoldFact] = field(default_factory=list)  # with derived windows
    aliases: dict[str, str] = field(default_factory=dict)  # normalized name -> canonical


@dataclass
class Golden:
    schema: dict[str, Any]
    conversations: list[Conversation]
    sha256: str

    @property
    def predicates(self) -> dict[str, dict[str, Any]]:
        return {p["name"]: p for p in self.schema["predicates"]}


def norm(text: str) -> str:
    """Casefolded, whitespace collapsed, a trailing period dropped."""
    return " ".join(str(text).casefold().split()).rstrip(".").strip()


def norm_object(value: str, object_type: str) -> str:
    """Dates by calendar day, numbers by value, the rest as norm()."""
    text = norm(value)
    if object_type == "date":
        m = re.match(r"\d{4}-\d{2}-\d{2}", text)
        return m.group(0) if m else text
    if object_type == "number":
        try:
            n = Decimal(text.replace(",", "").replace("_", ""))
        except InvalidOperation:
            return text
        return format(n.normalize(), "f") if n.is_finite() else text
    return text


def load_golden(path: Path = GOLDEN) -> Golden:
    """The golden set, checked against its own schema, with each fact's window derived."""
    raw = path.read_bytes()
    doc = json.loads(raw)
    schema = doc["schema"]
    predicates = {p["name"]: p for p in schema["predicates"]}
    labels = {label["name"] for label in schema["labels"]}
    types = {t["name"] for t in schema["entity_types"]}
    conversations = []
    for c in doc["conversations"]:
        conv = Conversation(c["id"], c.get("covers", []), c.get("entities", {}), [])
        for name, entity in conv.entities.items():
            assert entity["type"] in types, f"{conv.id}: {name} has an unknown type"
            for alias in [name, *entity.get("aliases", [])]:
                conv.aliases[norm(alias)] = norm(name)
        for t in c["turns"]:
            turn = Turn(
                t["role"],
                t["content"],
                _instant(t["occurred_at"]),
                frozenset(t.get("labels", [])),
                t.get("facts", []),
                t.get("ends", []),
            )
            assert turn.labels <= labels, f"{conv.id}: unknown label in {sorted(turn.labels)}"
            for f in turn.facts:
                p = predicates[f["predicate"]]  # KeyError: a predicate the schema lacks
                assert f["object_type"] == p["object_type"], f"{conv.id}: {f}"
            conv.turns.append(turn)
        conv.facts = windows(conv, predicates)
        conversations.append(conv)
    return Golden(schema, conversations, hashlib.sha256(raw).hexdigest())


def windows(conv: Conversation, predicates: Mapping[str, Mapping[str, Any]]) -> list[GoldFact]:
    """Each golden fact with the window a store that understood the conversation holds."""
    facts: list[GoldFact] = []
    for i, turn in enumerate(conv.turns):
        for f in turn.facts:
            dated_from = _instant(f["valid_from"]) if f.get("valid_from") else None
            dated_to = _instant(f["valid_to"]) if f.get("valid_to") else None
            facts.append(
                GoldFact(
                    f["subject"],
                    f["predicate"],
                    f["object"],
                    f["object_type"],
                    i,
                    dated_from or turn.occurred_at,
                    dated_to,
                    dated_from,
                    dated_to,
                )
            )
    for i, turn in enumerate(conv.turns):
        for e in turn.ends:
            assert any(g.turn < i and _same(conv, g, e) for g in facts), f"{conv.id}: ends {e}"
    out = []
    for g in facts:
        ends = [] if g.end is None else [g.end]
        if predicates[g.predicate]["cardinality"] == "one":  # the next value closes it
            ends += [
                h.start
                for h in facts
                if h.subject == g.subject and h.predicate == g.predicate and h.start > g.start
            ]
        for i, turn in enumerate(conv.turns):
            if i > g.turn and any(_same(conv, g, e) for e in turn.ends):
                ends.append(turn.occurred_at)
        out.append(GoldFact(**{**g.__dict__, "end": min(ends) if ends else None}))
    return out


def _same(conv: Conversation, g: GoldFact, item: Mapping[str, Any]) -> bool:
    return triple(conv, g.subject, g.predicate, g.object, g.object_type) == triple(
        conv, item["subject"], item["predicate"], item["object"], g.object_type
    )


Triple = tuple[str, str, str]


def triple(conv: Conversation, subject: str, predicate: str, obj: str, object_type: str) -> Triple:
    s = norm(subject)
    o = norm_object(obj, object_type)
    if object_type == "entity":
        o = conv.aliases.get(o, o)
    return conv.aliases.get(s, s), predicate.strip(), o


def gold_key(conv: Conversation, g: GoldFact) -> Triple:
    return triple(conv, g.subject, g.predicate, g.object, g.object_type)


def holds(conv: Conversation, at: datetime | None) -> set[Triple]:
    """The golden triples holding at world instant `at` (None: now)."""
    now = datetime.now(UTC) if at is None else at
    return {
        gold_key(conv, g) for g in conv.facts if g.start <= now and (g.end is None or now < g.end)
    }


def checkpoints(conv: Conversation) -> list[datetime]:
    """The instants as_of is scored at: every turn's occurred_at, and inside each window
    the text dates (two days past its start, or its middle when shorter)."""
    at = {t.occurred_at for t in conv.turns}
    for g in conv.facts:
        if g.dated_from is not None:
            span = (g.end - g.start) / 2 if g.end is not None else timedelta(days=2)
            at.add(g.start + min(span, timedelta(days=2)))
    return sorted(at)


# --------------------------------------------------------------------------- scoring (pure)


@dataclass(frozen=True)
class Stored:
    """One row of memory.readable_facts_at (a read through memory.facts_at)."""

    subject: str
    predicate: str
    object: str
    valid_from: datetime
    valid_until: datetime | None  # None: open


def stored_key(conv: Conversation, f: Stored, predicates: Mapping[str, Any]) -> Triple:
    p = predicates.get(f.predicate.strip())
    return triple(conv, f.subject, f.predicate, f.object, p["object_type"] if p else "literal")


def prf(tp: int, fp: int, fn: int) -> dict[str, Any]:
    p = tp / (tp + fp) if tp + fp else 1.0
    r = tp / (tp + fn) if tp + fn else 1.0
    f1 = 2 * p * r / (p + r) if p + r else 0.0
    return {
        "precision": round(p, 4),
        "recall": round(r, 4),
        "f1": round(f1, 4),
        "tp": tp,
        "fp": fp,
        "fn": fn,
    }


def _show(t: Triple) -> str:
    return " | ".join(t)


def score_conversation(
    conv: Conversation,
    predicates: Mapping[str, Any],
    stored: Mapping[datetime | None, Sequence[Stored]],
    labels: Sequence[Iterable[str] | None],
) -> dict[str, Any]:
    """Counts and named misses of one conversation. stored: facts_at's rows at each
    checkpoint and at None (now); labels: the classification stored per turn (None:
    no enrichment stored)."""
    at_keys = {at: {stored_key(conv, f, predicates) for f in rows} for at, rows in stored.items()}
    misses: list[dict[str, Any]] = []

    def compare(at: datetime | None, scope: str) -> tuple[int, int, int]:
        gold, got = holds(conv, at), at_keys.get(at, set())
        when = "now" if at is None else at.isoformat()
        for t in sorted(gold - got):
            misses.append(
                {
                    "conversation": conv.id,
                    "scope": scope,
                    "at": when,
                    "kind": "missing",
                    "triple": _show(t),
                }
            )
        for t in sorted(got - gold):
            misses.append(
                {
                    "conversation": conv.id,
                    "scope": scope,
                    "at": when,
                    "kind": "extra",
                    "triple": _show(t),
                }
            )
        return len(gold & got), len(got - gold), len(gold - got)

    current = compare(None, "current")
    as_of = [compare(at, "as_of") for at in checkpoints(conv)]
    # Triples: every golden fact against every triple facts_at shows at some instant read.
    gold_all = {gold_key(conv, g) for g in conv.facts}
    got_all = set().union(*at_keys.values()) if at_keys else set()
    for t in sorted(gold_all - got_all):
        misses.append(
            {"conversation": conv.id, "scope": "triples", "kind": "missing", "triple": _show(t)}
        )
    for t in sorted(got_all - gold_all):
        misses.append(
            {"conversation": conv.id, "scope": "triples", "kind": "extra", "triple": _show(t)}
        )

    # Windows: each bound the text gives, against the stored fact's, within a day.
    window = {"dated": 0, "correct": 0}
    for g in conv.facts:
        if g.dated_from is None and g.dated_to is None:
            continue
        window["dated"] += 1
        key = gold_key(conv, g)
        inside = g.start + min(
            (g.end - g.start) / 2 if g.end else timedelta(days=2), timedelta(days=2)
        )
        rows = [
            f
            for at in (inside, conv.turns[g.turn].occurred_at, None)
            for f in stored.get(at, ())
            if stored_key(conv, f, predicates) == key
        ]
        problem = None
        if not rows:
            problem = "not stored"
        else:
            f = min(rows, key=lambda r: abs(r.valid_from - g.start))
            if g.dated_from is not None and abs(f.valid_from - g.dated_from) > WINDOW_TOLERANCE:
                problem = f"valid_from {f.valid_from.isoformat()}, not {g.dated_from.date()}"
            elif g.dated_to is not None and (
                f.valid_until is None or abs(f.valid_until - g.dated_to) > WINDOW_TOLERANCE
            ):
                until = "open" if f.valid_until is None else f.valid_until.isoformat()
                problem = f"valid_to {until}, not {g.dated_to.date()}"
        if problem is None:
            window["correct"] += 1
        else:
            misses.append(
                {
                    "conversation": conv.id,
                    "scope": "window",
                    "kind": "wrong",
                    "triple": _show(key),
                    "detail": problem,
                }
            )

    # Classification: (turn, label) pairs.
    ctp = cfp = cfn = exact = 0
    for i, (turn, got_labels) in enumerate(zip(conv.turns, labels, strict=True)):
        got = {norm(x) for x in (got_labels or ())}
        gold_labels = {norm(x) for x in turn.labels}
        ctp, cfp, cfn = (
            ctp + len(gold_labels & got),
            cfp + len(got - gold_labels),
            cfn + len(gold_labels - got),
        )
        exact += got == gold_labels
        if got != gold_labels:
            misses.append(
                {
                    "conversation": conv.id,
                    "scope": "classification",
                    "turn": i,
                    "kind": "wrong",
                    "detail": f"{sorted(got)}, not {sorted(gold_labels)}",
                }
            )
    return {
        "current": current,
        "as_of": as_of,
        "triples": (len(gold_all & got_all), len(got_all - gold_all), len(gold_all - got_all)),
        "window": window,
        "classification": (ctp, cfp, cfn, exact, len(conv.turns)),
        "misses": misses,
    }


def summarize(scores: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Micro-averaged figures over the conversations' scores."""

    def total(rows: Iterable[tuple[int, ...]], width: int = 3) -> list[int]:
        return [sum(col) for col in zip(*rows, strict=True)] or [0] * width

    triples = total(s["triples"] for s in scores)
    current = total(s["current"] for s in scores)
    as_of = total(a for s in scores for a in s["as_of"])
    dated = sum(s["window"]["dated"] for s in scores)
    correct = sum(s["window"]["correct"] for s in scores)
    ctp, cfp, cfn, exact, turns = total((s["classification"] for s in scores), 5)
    return {
        "triples": prf(*triples),
        "current": prf(*current),
        "as_of": prf(*as_of),
        "windows": {
            "dated": dated,
            "correct": correct,
            "accuracy": round(correct / dated, 4) if dated else 1.0,
        },
        "classification": {**prf(ctp, cfp, cfn), "exact_turns": exact, "turns": turns},
    }


def golden_answer(conv: Conversation, turn: int, context: Mapping[str, Any]) -> dict[str, Any]:
    """What a model that extracts exactly the golden facts answers for a turn (contract
    2), given the context the worker sent: a turn's ends cite the known facts' ids."""
    t = conv.turns[turn]
    names = {f["subject"] for f in t.facts} | {
        f["object"] for f in t.facts if f["object_type"] == "entity"
    }
    entities = [
        {
            "name": n,
            "type": conv.entities[n]["type"],
            "summary": None,
            "aliases": conv.entities[n].get("aliases", []),
        }
        for n in sorted(names)
    ]
    facts = [
        {
            "subject": f["subject"],
            "predicate": f["predicate"],
            "object": f["object"],
            "object_type": f["object_type"],
            "content": f"{f['subject']} {f['predicate'].replace('_', ' ')} {f['object']}.",
            "confidence": 0.95,
            "valid_from": f.get("valid_from"),
            "valid_to": f.get("valid_to"),
        }
        for f in t.facts
    ]
    contradictions = []
    for e in t.ends:
        ended = next(g for g in conv.facts if g.turn < turn and _same(conv, g, e))
        for k in context.get("known_facts", []):
            if _same(conv, ended, k):
                contradictions.append({"fact_id": k["fact_id"], "reason": "the user says so"})
    return {
        "entities": entities,
        "facts": facts,
        "contradictions": contradictions,
        "notes": [],
        "classification": sorted(t.labels),
        "fields": {},
    }


# --------------------------------------------------------------------------- the run


class TimedExtractor(Extractor):
    """The worker's Extractor, keeping the wall time and the model calls of each
    extraction (what the enrich path calls: run)."""

    seconds: list[float]
    model_calls: list[ModelCall]
    lock: threading.Lock

    def prepare(self) -> TimedExtractor:
        self.seconds, self.model_calls, self.lock = [], [], threading.Lock()
        return self

    def run(
        self,
        context: dict[str, Any],
        calls: list[ModelCall],
        rejected: list[dict[str, Any]],
        meta: dict[str, Any],
    ) -> ExtractionOutcome:
        t0 = perf_counter()
        try:
            return super().run(context, calls, rejected, meta)
        finally:
            with self.lock:
                self.seconds.append(perf_counter() - t0)
                self.model_calls += calls


def _exists(conn: Conn, regclass: str) -> bool:
    return bool(scalar(conn, "select to_regclass(%s) is not null", (regclass,)))


def _has_function(conn: Conn, name: str) -> bool:
    schema, proname = name.split(".")
    return bool(
        scalar(
            conn,
            "select exists (select from pg_proc p join pg_namespace n on "
            "n.oid = p.pronamespace where n.nspname = %s and p.proname = %s)",
            (schema, proname),
        )
    )


def load_conversation(
    conn: Conn, org: uuid.UUID, golden: Golden, conv: Conversation
) -> tuple[uuid.UUID, list[uuid.UUID]]:
    """A project of its own, with the golden schema; its turns ingested as one session."""
    project = scalar(conn, "select memory.create_project(%s, %s)", (org, conv.id))
    if _has_function(conn, "memory.set_extraction_schema"):
        conn.execute(
            "select memory.set_extraction_schema(%s, %s::jsonb)",
            (project, json.dumps(golden.schema)),
        )
    else:  # before the schema API: its cardinalities at least
        for p in golden.schema["predicates"]:
            conn.execute(
                "select memory.declare_predicate(%s, %s, %s)",
                (project, p["name"], p["cardinality"]),
            )
    messages = [
        {
            "role": t.role,
            "content": t.content,
            "occurred_at": t.occurred_at.isoformat(),
            "metadata": {"golden": conv.id, "turn": i},
        }
        for i, t in enumerate(conv.turns)
    ]
    r = scalar(
        conn, "select memory.ingest(%s, %s, %s::jsonb)", (project, conv.id, json.dumps(messages))
    )
    conn.commit()
    return project, [uuid.UUID(str(e)) for e in r["episode_ids"]]


def drain(
    db: BenchDatabase, worker: Worker, org: uuid.UUID, timeout: float
) -> tuple[dict[str, int], list[str]]:
    """The worker drains the enrich jobs; retry backoff is skipped (a retry runs at once).
    Returns the jobs by status and the errors of those not done (at most 5)."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(db.app, autocommit=True) as conn:
        conn.execute("select memory.use_org(%s, false)", (org,))
        while True:
            worker.drain(timeout=max(1.0, deadline - time.monotonic()))
            pending = scalar(
                conn,
                "select count(*) from memory.jobs where org_id = %s and "
                "kind = 'enrich' and status = any(%s)",
                (org, list(PENDING)),
            )
            if pending == 0 or time.monotonic() > deadline:
                break
            with psycopg.connect(db.admin, autocommit=True) as admin:
                admin.execute(
                    "update memory.jobs set run_at = now() where org_id = %s "
                    "and kind = 'enrich' and status = 'queued'",
                    (org,),
                )
            time.sleep(0.05)
        rows = conn.execute(
            "select status, count(*) from memory.jobs where org_id = %s "
            "and kind = 'enrich' group by 1",
            (org,),
        ).fetchall()
        errors = conn.execute(
            "select distinct last_error from memory.jobs where org_id = %s and kind = 'enrich' "
            "and status <> 'done' and last_error is not null order by 1 limit 5",
            (org,),
        ).fetchall()
    return {str(s): int(n) for s, n in rows}, [str(e) for (e,) in errors]


def read_stored(
    conn: Conn, project: uuid.UUID, ats: Iterable[datetime | None]
) -> dict[datetime | None, list[Stored]]:
    out: dict[datetime | None, list[Stored]] = {}
    for at in ats:
        rows = conn.execute(
            "select subject, predicate, object, valid_from, valid_until "
            "from memory.readable_facts_at(%s, %s)",
            (project, at),
        ).fetchall()
        out[at] = [Stored(s, p, o, vf, vu) for s, p, o, vf, vu in rows]
    return out


def read_labels(conn: Conn, episodes: Sequence[uuid.UUID]) -> list[list[str] | None]:
    """The classification labels stored per episode (memory.episode_extractions), None
    where none is stored."""
    if not _exists(conn, "memory.episode_extractions"):
        return [None] * len(episodes)
    rows = dict(
        conn.execute(
            "select episode_id, to_jsonb(x) -> 'labels' from memory.episode_extractions x "
            "where episode_id = any(%s)",
            (list(episodes),),
        ).fetchall()
    )
    return [[str(v) for v in rows[e]] if isinstance(rows.get(e), list) else None for e in episodes]


def read_rejections(conn: Conn) -> dict[str, Any]:
    if not _exists(conn, "memory.extraction_rejections"):
        return {"available": False}
    rows = conn.execute(
        "select to_jsonb(r) ->> 'reason', coalesce(to_jsonb(r) ->> 'section', ''), count(*) "
        "from memory.extraction_rejections r group by 1, 2 order by 1, 2"
    ).fetchall()
    by_reason: Counter[str] = Counter()
    for reason, _, n in rows:
        by_reason[str(reason)] += int(n)
    return {
        "available": True,
        "total": sum(by_reason.values()),
        "by_reason": dict(by_reason),
        "by_reason_section": {f"{r}/{s}": int(n) for r, s, n in rows},
    }


def read_usage(conn: Conn, projects: Sequence[uuid.UUID]) -> dict[str, Any]:
    """What memory.model_usage recorded for the projects' enrich calls."""
    if not _has_function(conn, "memory.model_usage"):
        return {"available": False}
    calls = tokens_in = tokens_out = errors = 0
    for project in projects:
        for c, i, o, e in conn.execute(
            "select calls, tokens_in, tokens_out, errors from memory.model_usage(%s) "
            "where job_kind = 'enrich'",
            (project,),
        ).fetchall():
            calls, tokens_in, tokens_out, errors = (
                calls + c,
                tokens_in + i,
                tokens_out + o,
                errors + e,
            )
    return {
        "available": True,
        "calls": calls,
        "tokens_in": tokens_in,
        "tokens_out": tokens_out,
        "errors": errors,
    }


def make_extractor(args: argparse.Namespace) -> TimedExtractor:
    llm = LLMSettings(
        base_url=args.base_url,
        api_key=args.api_key,
        model=args.model,
        timeout=args.timeout,
        response_format=args.response_format,
    )
    extractor = TimedExtractor.from_settings(llm)
    assert isinstance(extractor, TimedExtractor)
    return extractor.prepare()


def run(args: argparse.Namespace, db: BenchDatabase) -> Path:
    # The result file records the settings: the key only as whether one was given.
    shown = argparse.Namespace(**{**vars(args), "api_key": "given" if args.api_key else None})
    run = Run("extraction", shown, db)
    golden = load_golden(args.golden)
    convs = golden.conversations[: args.limit_conversations]
    extractor = make_extractor(args)
    # Only enrich jobs run: embeddings play no part in what is extracted.
    client = openai.OpenAI(base_url=args.base_url, api_key=args.api_key or "unused")
    handlers = build_handlers(extractor, OpenAIEmbedder(client, "unused"), args.min_confidence)
    worker = Worker(
        db.app,
        {"enrich": handlers["enrich"]},
        name="bench-extraction",
        lease=max(60.0, args.timeout * 3),
        poll_interval=0.1,
    )
    with psycopg.connect(db.app) as conn:
        org = scalar(conn, "select memory.create_org('benchmark extraction')")
        conn.execute("select memory.use_org(%s, false)", (org,))
        loaded = [load_conversation(conn, org, golden, c) for c in convs]
        print(
            f"  {len(convs)} conversations, {sum(len(c.turns) for c in convs)} turns: "
            f"extracting with {args.model} ...",
            flush=True,
        )
        t0 = perf_counter()
        jobs, job_errors = drain(db, worker, org, args.drain_timeout)
        extract_s = perf_counter() - t0
        scores = []
        for conv, (project, episodes) in zip(convs, loaded, strict=True):
            stored = read_stored(conn, project, [*checkpoints(conv), None])
            scores.append(
                score_conversation(conv, golden.predicates, stored, read_labels(conn, episodes))
            )
        rejections = read_rejections(conn)
        usage = read_usage(conn, [project for project, _ in loaded])
        conn.commit()
    summary = summarize(scores)
    calls = extractor.model_calls
    result = {
        "golden": {
            "file": str(args.golden),
            "sha256": golden.sha256,
            "conversations": len(convs),
            "turns": sum(len(c.turns) for c in convs),
            "facts": sum(len(c.facts) for c in convs),
        },
        "endpoint": {"base_url": args.base_url, "model": args.model},
        **summary,
        "by_conversation": {
            c.id: {"covers": c.covers, **summarize([s])} for c, s in zip(convs, scores, strict=True)
        },
        "jobs": jobs,
        "job_errors": job_errors,
        "rejections": rejections,
        "usage": {
            "database": usage,
            "calls": len(calls),
            "tokens_in": sum(c.tokens_in for c in calls),
            "tokens_out": sum(c.tokens_out for c in calls),
            "outcomes": dict(Counter(c.outcome for c in calls)),
            "call_latency_ms": latency_ms([c.latency_ms / 1000 for c in calls]),
        },
        "extraction_latency_ms": latency_ms(extractor.seconds),
        "extraction_s": round(extract_s, 1),
        "misses": [m for s in scores for m in s["misses"]],
    }
    print_table(result)
    return run.finish(result)


def print_table(r: dict[str, Any]) -> None:
    print(f"  {'':16} {'precision':>9} {'recall':>7} {'F1':>6}   tp/fp/fn", flush=True)
    for key in ("triples", "current", "as_of", "classification"):
        m = r[key]
        print(
            f"  {key:16} {m['precision']:9.3f} {m['recall']:7.3f} {m['f1']:6.3f}   "
            f"{m['tp']}/{m['fp']}/{m['fn']}",
            flush=True,
        )
    w = r["windows"]
    print(f"  windows          {w['correct']}/{w['dated']} within a day ({w['accuracy']:.3f})")
    rej = r["rejections"]
    if rej.get("available"):
        print(
            f"  rejected         {rej['total']}: "
            + (", ".join(f"{k} {v}" for k, v in sorted(rej["by_reason"].items())) or "none")
        )
    u, lat = r["usage"], r["extraction_latency_ms"]
    print(
        f"  model calls      {u['calls']}, tokens in/out {u['tokens_in']}/{u['tokens_out']}, "
        f"extraction p50 {lat['p50']:.0f} ms, p95 {lat['p95']:.0f} ms; jobs {r['jobs']}"
    )
    for m in r["misses"][:40]:
        at = f" at {m['at']}" if "at" in m else f" turn {m['turn']}" if "turn" in m else ""
        what = m.get("triple", "") + (f" ({m['detail']})" if "detail" in m else "")
        print(f"  miss {m['scope']:14} {m['conversation']}{at}: {m['kind']} {what}", flush=True)
    for e in r["job_errors"]:
        print(f"  job error        {e[:200]}", flush=True)
    if len(r["misses"]) > 40:
        print(f"  ... {len(r['misses']) - 40} more misses in the result file", flush=True)
