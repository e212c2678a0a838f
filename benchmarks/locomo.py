"""LoCoMo evidence recall@k: the share of a question's evidence turns among the top k
episodes of memory.search, fused (every leg) against the vector and full-text legs alone.
Turns are episodes (memory.ingest) embedded with the product's local all-MiniLM-L6-v2;
questions are embedded as the API embeds them (memory.vector_query_text). No LLM."""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import statistics
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from time import perf_counter
from typing import Any

import psycopg

from benchmarks.common import BenchDatabase, Conn, Run, latency_ms, scalar
from workers.embedding import BATCH, LocalMiniLM

HELP = "LoCoMo evidence recall@1/5/10 of fused search, vector leg and full-text leg"

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
KS = (1, 5, 10)
LEG_N = 90  # a leg alone is asked for the list the fused search ranks
SYSTEMS = {"fused": None, "vector": ["episode_vector"], "fulltext": ["episode_fulltext"]}
SEARCH_SQL = (
    "select memory.search(p_project => %s, p_query => %s, p_query_embedding => %s::vector, "
    "p_k => %s, p_legs => %s::text[])"
)
_DIA_ID = re.compile(r"D:?(\d+):(\d+)")  # "D1:3"; a few read "D:11:26" or hold two ids


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data", type=Path, required=True, help="a file in LoCoMo's format")
    parser.add_argument("--limit-conversations", type=int, help="only the first N conversations")
    parser.add_argument("--k", type=int, default=30, help="results asked of the fused search (30)")


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class Question:
    text: str
    category: int
    evidence: frozenset[str]  # dia ids that exist in the conversation


@dataclass(frozen=True)
class Conversation:
    sample_id: str
    sessions: list[tuple[int, list[dict[str, Any]]]]  # (number, ingest messages)
    questions: list[Question]


def _dia_ids(raw: Any) -> list[str]:
    items = raw if isinstance(raw, list) else [raw]
    return [f"D{m[0]}:{m[1]}" for item in items for m in _DIA_ID.findall(str(item))]


def parse(sample: dict[str, Any]) -> Conversation:
    """Turns as messages: '<speaker>: <text>' (plus a shared photo's caption), speaker_a
    as user, speaker_b as assistant, the session's date plus the turn index in seconds."""
    conv, sessions = sample["conversation"], []
    numbers = sorted(int(m[1]) for k, v in conv.items()
                     if (m := re.fullmatch(r"session_(\d+)", k)) and v)  # fmt: skip
    for n in numbers:
        start = datetime.strptime(conv[f"session_{n}_date_time"].strip(), "%I:%M %p on %d %B, %Y")
        messages: list[dict[str, Any]] = []
        for i, t in enumerate(conv[f"session_{n}"]):
            text = f"{t['speaker']}: {str(t.get('text', '')).strip()}"
            if t.get("blip_caption"):
                text += f" [shares a photo: {t['blip_caption'].strip()}]"
            at = start.replace(tzinfo=UTC) + timedelta(seconds=i)
            role = "user" if t["speaker"] == conv["speaker_a"] else "assistant"
            meta = {"dia_id": t["dia_id"], "speaker": t["speaker"]}
            messages.append({"role": role, "content": text, "occurred_at": at.isoformat(),
                             "metadata": meta})  # fmt: skip
        sessions.append((n, messages))
    known = {m["metadata"]["dia_id"] for _, ms in sessions for m in ms}
    questions = []
    for qa in sample.get("qa", []):
        evidence = frozenset(d for d in _dia_ids(qa.get("evidence", [])) if d in known)
        if int(qa.get("category", 0)) in CATEGORIES and evidence:  # 5: adversarial
            questions.append(Question(str(qa["question"]), int(qa["category"]), evidence))
    return Conversation(str(sample.get("sample_id", "")), sessions, questions)


# --------------------------------------------------------------------------- load


def embed(model: LocalMiniLM, texts: Sequence[str]) -> list[str]:
    """Vectors as pgvector literals, embedded in batches of similar length."""
    order, out = sorted(range(len(texts)), key=lambda i: len(texts[i])), [""] * len(texts)
    for s in range(0, len(order), BATCH):
        chunk = order[s : s + BATCH]
        for i, v in zip(chunk, model.embed([texts[i] for i in chunk]), strict=True):
            out[i] = "[" + ",".join(f"{x:.7g}" for x in v) + "]"
    return out


def load(conn: Conn, model: LocalMiniLM, org: uuid.UUID, conv: Conversation) -> Any:
    """The conversation's project, and the dia id of each episode."""
    project = scalar(conn, "select memory.create_project(%s, %s)", (org, conv.sample_id))
    dia_of: dict[uuid.UUID, str] = {}
    for n, messages in conv.sessions:
        for s in range(0, len(messages), 100):  # memory.ingest's per-call limit
            chunk = messages[s : s + 100]
            r = scalar(conn, "select memory.ingest(%s, %s, %s::jsonb)",
                       (project, f"session_{n}", json.dumps(chunk)))  # fmt: skip
            for i, m in zip(r["episode_ids"], chunk, strict=True):
                dia_of[uuid.UUID(i)] = m["metadata"]["dia_id"]
    ids = list(dia_of)
    texts = [m["content"] for _, ms in conv.sessions for m in ms]
    vectors = embed(model, texts)
    for s in range(0, len(ids), 256):
        conn.execute("select memory_worker.store_embeddings('episode', %s, %s::text[]::vector[])",
                     (ids[s : s + 256], vectors[s : s + 256]))  # fmt: skip
    conn.commit()
    print(f"  {conv.sample_id}: {len(ids)} episodes", flush=True)
    return project, dia_of


# --------------------------------------------------------------------------- measure


def ranking(result: dict[str, Any], legs: list[str] | None) -> list[uuid.UUID]:
    """Fused: the episode results in order; a leg alone: its own ranks."""
    episodes = [r for r in result["results"] if r["kind"] == "episode"]
    if legs is None:
        return [uuid.UUID(r["id"]) for r in episodes]
    leg = legs[0]
    return [uuid.UUID(r["id"]) for r in sorted(
        (r for r in episodes if leg in r["ranks"]), key=lambda r: r["ranks"][leg])]  # fmt: skip


def recall(found: list[str], evidence: frozenset[str], k: int) -> float:
    return len(evidence & set(found[:k])) / len(evidence)


def run(args: argparse.Namespace, db: BenchDatabase) -> Path:
    run = Run("locomo", args, db)
    samples = json.loads(args.data.read_text())[: args.limit_conversations]
    convs = [parse(s) for s in samples]
    model = LocalMiniLM()
    scores: dict[str, dict[int, list[dict[int, float]]]] = defaultdict(lambda: defaultdict(list))
    seconds: dict[str, list[float]] = defaultdict(list)
    with psycopg.connect(db.app) as conn:
        org = scalar(conn, "select memory.create_org('benchmark locomo')")
        conn.execute("select memory.use_org(%s, false)", (org,))
        t0 = perf_counter()
        loaded = [load(conn, model, org, c) for c in convs]
        load_s = perf_counter() - t0
        with psycopg.connect(db.owner, autocommit=True) as owner:
            owner.execute("analyze memory.episodes, memory.facts, memory.entities")
        pairs = [(c, lc, q) for c, lc in zip(convs, loaded, strict=True) for q in c.questions]
        texts = [scalar(conn, "select memory.vector_query_text(%s, %s)", (lc[0], q.text))
                 for _, lc, q in pairs]  # fmt: skip
        conn.commit()
        print(f"  {len(pairs)} questions ...", flush=True)
        for (_, (project, dia_of), q), vector in zip(pairs, embed(model, texts), strict=True):
            for system, legs in SYSTEMS.items():
                t0 = perf_counter()
                result = scalar(conn, SEARCH_SQL, (project, q.text, vector,
                                                   LEG_N if legs else args.k, legs))  # fmt: skip
                seconds[system].append(perf_counter() - t0)
                conn.commit()
                found = [dia_of.get(i, "") for i in ranking(result, legs)]
                scores[system][q.category].append({k: recall(found, q.evidence, k) for k in KS})

    def mean(rows: list[dict[int, float]]) -> dict[str, float]:
        return {f"recall@{k}": round(statistics.fmean(r[k] for r in rows), 4) for k in KS}

    result = {
        "data": {
            "file": str(args.data),
            "sha256": hashlib.sha256(args.data.read_bytes()).hexdigest(),
            "conversations": len(convs),
            "episodes": sum(len(ms) for c in convs for _, ms in c.sessions),
            "questions": len(pairs),
            "load_s": round(load_s, 1),
        },
        "model": model.name,
        "overall": {s: mean([r for rows in by.values() for r in rows]) for s, by in scores.items()},
        "by_category": {
            f"{c} {name}": {s: mean(by[c]) for s, by in scores.items() if by[c]}
            for c, name in CATEGORIES.items()
        },
        "question_counts": {f"{c} {n}": len(scores["fused"][c]) for c, n in CATEGORIES.items()},
        "search_latency_ms": {s: latency_ms(v) for s, v in seconds.items()},
    }
    for system, r in result["overall"].items():
        print(f"  {system:9} " + "  ".join(f"{k} {v:.3f}" for k, v in r.items()), flush=True)
    return run.finish(result, _plot)


def _plot(plt: Any, r: dict[str, Any]) -> None:
    groups = ["overall", *r["by_category"]]
    _, ax = plt.subplots(figsize=(10, 5))
    width = 0.8 / len(SYSTEMS)
    for i, system in enumerate(SYSTEMS):
        rows = [r["overall"], *(r["by_category"][g] for g in groups[1:])]
        xs = [g + (i - (len(SYSTEMS) - 1) / 2) * width for g in range(len(groups))]
        bars = ax.bar(xs, [row[system]["recall@10"] for row in rows], width, label=system)
        ax.bar_label(bars, fmt="%.2f", padding=1, fontsize=7)
    counts = [r["data"]["questions"], *r["question_counts"].values()]
    ax.set_xticks(range(len(groups)), [f"{g}\n(n={n})" for g, n in zip(groups, counts,
                                                                        strict=True)])  # fmt: skip
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("evidence recall@10 (top 10 episodes)")
    ax.legend(fontsize=8)
