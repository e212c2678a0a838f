"""Loading LoCoMo conversations through the product's write path.

Turns go in through memory.ingest (one project per conversation, one session per
LoCoMo session), their embeddings through memory.store_embeddings, and, on request,
the `observation` lists through memory.assert_facts. Everything runs as the app role.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg

from benchmarks.common import scalar
from benchmarks.embedding import embed_many, literal
from benchmarks.locomo_data import Conversation, Observation, Turn
from workers.embedding import LocalMiniLM

INGEST_MAX = 100  # memory.ingest's per-call limit
ASSERT_MAX = 1000  # memory.assert_facts' per-call limit
STORE_BATCH = 256

Conn = psycopg.Connection[Any]


@dataclass
class LoadedConversation:
    conversation: Conversation
    project: uuid.UUID
    episode_ids: list[uuid.UUID] = field(default_factory=list)  # in turn order
    dia_of_episode: dict[uuid.UUID, str] = field(default_factory=dict)
    dia_of_fact: dict[uuid.UUID, frozenset[str]] = field(default_factory=dict)


def create_org(conn: Conn, name: str) -> uuid.UUID:
    """A new org; the connection stays scoped to it (session-level use_org)."""
    org: uuid.UUID = scalar(conn, "select memory.create_org(%s)", (name,))
    conn.execute("select memory.use_org(%s, false)", (org,))
    return org


def _messages(turns: Sequence[Turn]) -> str:
    return json.dumps(
        [
            {
                "role": t.role,
                "content": t.content,
                "occurred_at": t.occurred_at.isoformat(),
                "metadata": {"dia_id": t.dia_id, "speaker": t.speaker},
            }
            for t in turns
        ]
    )


def ingest(conn: Conn, org: uuid.UUID, conv: Conversation, name: str) -> LoadedConversation:
    project: uuid.UUID = scalar(conn, "select memory.create_project(%s, %s)", (org, name))
    loaded = LoadedConversation(conv, project)
    for session in conv.sessions:
        for start in range(0, len(session.turns), INGEST_MAX):
            turns = session.turns[start : start + INGEST_MAX]
            response = scalar(
                conn,
                "select memory.ingest(%s, %s, %s::jsonb, %s)",
                (
                    project,
                    f"session_{session.number}",
                    _messages(turns),
                    f"{name}/session_{session.number}/{start}",
                ),
            )
            ids = [uuid.UUID(i) for i in response["episode_ids"]]
            loaded.episode_ids += ids
            loaded.dia_of_episode.update(zip(ids, (t.dia_id for t in turns), strict=True))
    conn.commit()
    return loaded


def store_embeddings(
    conn: Conn, kind: str, ids: Sequence[uuid.UUID], vectors: Sequence[Sequence[float]]
) -> int:
    stored = 0
    for start in range(0, len(ids), STORE_BATCH):
        stored += scalar(
            conn,
            "select memory.store_embeddings(%s, %s, %s::text[]::vector[])",
            (
                kind,
                list(ids[start : start + STORE_BATCH]),
                [literal(v) for v in vectors[start : start + STORE_BATCH]],
            ),
        )
    conn.commit()
    return stored


def embed_episodes(
    conn: Conn, model: LocalMiniLM, loaded: LoadedConversation, texts: Sequence[str]
) -> list[list[float]]:
    """Embed one text per episode (in turn order), store them, return the vectors."""
    vectors = embed_many(model, texts)
    store_embeddings(conn, "episode", loaded.episode_ids, vectors)
    return vectors


def _observation_fact(obs: Observation, episode_of: dict[str, uuid.UUID]) -> dict[str, Any]:
    fact: dict[str, Any] = {
        "subject": obs.speaker,
        "predicate": "said",
        # The observation is the claim; a short hash of it keeps identities apart
        # ('said' is not declared, so it is cardinality many).
        "object": hashlib.sha1(obs.text.encode()).hexdigest()[:12],
        "object_type": "literal",
        "content": obs.text,
        "valid_from": obs.valid_from.isoformat(),
    }
    sources = [episode_of[d] for d in obs.evidence if d in episode_of]
    if sources:
        fact["source_episode_id"] = str(sources[0])
    return fact


def load_observations(conn: Conn, model: LocalMiniLM, loaded: LoadedConversation) -> int:
    """Assert the conversation's observations as facts, embed and store them.

    Each fact remembers the observation's evidence dia ids (dia_of_fact) so that a fact
    hit can be scored like the turns it came from."""
    episode_of = {d: e for e, d in loaded.dia_of_episode.items()}
    observations = loaded.conversation.observations
    for start in range(0, len(observations), ASSERT_MAX):
        chunk = observations[start : start + ASSERT_MAX]
        facts = [_observation_fact(o, episode_of) for o in chunk]
        result = scalar(
            conn, "select memory.assert_facts(%s, %s::jsonb)", (loaded.project, json.dumps(facts))
        )
        for obs, item in zip(chunk, result["results"], strict=True):
            if item.get("fact_id"):
                fid = uuid.UUID(item["fact_id"])
                known = loaded.dia_of_fact.get(fid, frozenset())
                loaded.dia_of_fact[fid] = known | frozenset(obs.evidence)
    conn.commit()
    ids = list(loaded.dia_of_fact)
    rows = conn.execute(
        "select id, input from memory.embedding_inputs(%s, 'fact', %s)", (loaded.project, ids)
    ).fetchall()
    conn.commit()
    vectors = embed_many(model, [r[1] for r in rows])
    return store_embeddings(conn, "fact", [r[0] for r in rows], vectors)
