"""The longest content the write paths accept is written and found: an episode of
32768 characters (memory.ingest's limit) and a fact of 8192 (assert_facts'), both of
distinct words, so their tsvectors are far larger than a btree entry may be (2704
bytes): an index that held them would make these writes fail. One character more is
refused with an error naming the content. Runs as the app role."""

from __future__ import annotations

import random
import string
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb


def _words(rng: random.Random, chars: int) -> str:
    """Distinct-looking words, `chars` characters in all."""
    out: list[str] = []
    size = 0
    while size < chars:
        w = "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(4, 10)))
        out.append(w)
        size += len(w) + 1
    return " ".join(out)[:chars].strip()


@pytest.fixture
def project(app_dsn: str) -> Iterator[tuple[psycopg.Connection[Any], uuid.UUID]]:
    with psycopg.connect(app_dsn, autocommit=True) as conn:
        org = conn.execute("select memory.create_org('long content')").fetchone()[0]  # type: ignore[index]
        conn.execute("select memory.use_org(%s, false)", (org,))
        p = conn.execute("select memory.create_project(%s, 'p')", (org,)).fetchone()[0]  # type: ignore[index]
        yield conn, p


def _found(conn: psycopg.Connection[Any], p: uuid.UUID, question: str, leg: str) -> list[str]:
    result = conn.execute(
        "select memory.search(%s, %s, null, p_k => 5, p_legs => array[%s])", (p, question, leg)
    ).fetchone()[0]  # type: ignore[index]
    assert not result["degraded"], result["failed_legs"]
    return [r["id"] for r in result["results"]]


def test_longest_episode_is_ingested_and_found(project: Any) -> None:
    conn, p = project
    text = "zanzibarian " + _words(random.Random(1), 32768 - len("zanzibarian "))
    assert len(text) == 32768
    ids = conn.execute(
        "select memory.ingest(%s, 's', %s)", (p, Jsonb([{"role": "user", "content": text}]))
    ).fetchone()[0]["episode_ids"]  # type: ignore[index]
    assert _found(conn, p, "who is zanzibarian?", "episode_fulltext") == ids
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="longer than 32768"):
        conn.execute(
            "select memory.ingest(%s, 's2', %s)",
            (p, Jsonb([{"role": "user", "content": text + "x"}])),
        )


def test_long_fact_is_asserted_and_found(project: Any) -> None:
    conn, p = project
    content = "quetzalcoatlus " + _words(random.Random(2), 8192 - len("quetzalcoatlus "))
    assert len(content) == 8192
    facts = [
        {"subject": "notes", "predicate": "says", "object": o, "content": c}
        for o, c in (("x", content), ("y", content + "x"))
    ]
    result = conn.execute("select memory.assert_facts(%s, %s)", (p, Jsonb(facts))).fetchone()[0]  # type: ignore[index]
    assert [r["status"] for r in result["results"]] == ["inserted", "invalid"], result
    assert result["results"][1]["error"]["field"] == "content"
    fact = result["results"][0]["fact_id"]
    assert _found(conn, p, "quetzalcoatlus", "fact_fulltext") == [fact]
