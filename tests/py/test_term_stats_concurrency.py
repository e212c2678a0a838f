"""BM25's statistics stay exact under concurrent ingests and wipes of one project.

The episode full-text leg reads document frequencies from
memory_internal.episode_term_df (sharded per writer) plus pending per-statement deltas
that ingests leave and later statements fold in. Eight app-role connections here
ingest and wipe sessions of the same project at once, sharing words, round after
round: no call may fail (a deadlock or a unique violation would surface here), and
afterwards every word's document frequency as the leg sees it must equal the number
of the project's episodes that hold it, counted from the episodes themselves.
"""

from __future__ import annotations

import random
import threading
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

WRITERS = 8
ROUNDS = 6
# Few words, so every statement touches words every other one touches.
WORDS = [
    "apple",
    "banana",
    "cherry",
    "dinner",
    "evening",
    "forest",
    "garden",
    "harbor",
    "island",
    "jungle",
    "kitchen",
    "lemon",
    "morning",
    "night",
    "ocean",
    "pepper",
    "quiet",
    "river",
    "summer",
    "tiger",
    "umbrella",
    "valley",
    "winter",
]


def _text(rng: random.Random) -> str:
    return " ".join(rng.sample(WORDS, 6))


def _messages(rng: random.Random, n: int) -> Jsonb:
    return Jsonb([{"role": "user", "content": _text(rng)} for _ in range(n)])


def _frequencies(admin_dsn: str, project: uuid.UUID) -> tuple[dict[str, int], dict[str, int]]:
    """(df as the leg reads it, df counted from the episodes) for every word."""
    with psycopg.connect(admin_dsn) as conn:
        truth = dict(
            conn.execute(
                "select u.lexeme, count(*) from memory.episodes e "
                "cross join lateral unnest(tsvector_to_array(e.content_tsv)) u(lexeme) "
                "where e.project_id = %s group by 1",
                (project,),
            ).fetchall()
        )
        seen = dict(
            conn.execute(
                "select d.lexeme, d.df from memory.projects p cross join lateral "
                "memory_internal.episode_term_dfs(p.org_id, p.project_id, "
                "  (select array_agg(distinct x.lexeme) from ("
                "     select lexeme from memory_internal.episode_term_df where project_id = %s"
                "     union select unnest(lexemes) from memory_internal.episode_term_df_pending"
                "      where project_id = %s union select unnest(%s::text[])) x)) d "
                "where p.project_id = %s and d.df <> 0",
                (project, project, list(truth), project),
            ).fetchall()
        )
    return seen, truth


def _run_round(app_dsn: str, org: uuid.UUID, tasks: list[Callable[[Any], None]]) -> list[str]:
    """Run each task in its own connection and transaction, all released together."""
    barrier = threading.Barrier(len(tasks))
    errors: list[str] = []

    def run(task: Callable[[Any], None]) -> None:
        with psycopg.connect(app_dsn) as conn:
            conn.execute("set statement_timeout = '30s'")
            barrier.wait()
            try:
                with conn.transaction():
                    conn.execute("select memory.use_org(%s)", (org,))
                    task(conn)
            except psycopg.Error as err:
                errors.append(f"{type(err).__name__}: {err}")

    threads = [threading.Thread(target=run, args=(t,)) for t in tasks]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def test_document_frequencies_exact_after_concurrent_ingests_and_wipes(
    app_dsn: str, admin_dsn: str
) -> None:
    rng = random.Random(7)
    with psycopg.connect(app_dsn, autocommit=True) as conn:
        org = conn.execute("select memory.create_org('term stats')").fetchone()[0]  # type: ignore[index]
        conn.execute("select memory.use_org(%s, false)", (org,))
        project = conn.execute("select memory.create_project(%s, 'p')", (org,)).fetchone()[0]  # type: ignore[index]
        # One statement per session: pending deltas pile up and get folded on the way.
        for s in range(3 * WRITERS):
            conn.execute("select memory.ingest(%s, %s, %s)", (project, f"s{s}", _messages(rng, 5)))

    live = [f"s{s}" for s in range(3 * WRITERS)]
    fresh = iter(range(1000, 2000))
    for _ in range(ROUNDS):
        rng.shuffle(live)
        wiped, live = live[: WRITERS // 2], live[WRITERS // 2 :]
        new = [f"s{next(fresh)}" for _ in range(WRITERS - len(wiped))]
        live += new

        def wipe(session: str) -> Callable[[Any], None]:
            return lambda c: c.execute("select memory.wipe(%s, %s)", (project, session))

        def ingest(session: str, messages: Jsonb) -> Callable[[Any], None]:
            return lambda c: c.execute(
                "select memory.ingest(%s, %s, %s)", (project, session, messages)
            )

        tasks = [wipe(s) for s in wiped] + [ingest(s, _messages(rng, 5)) for s in new]
        assert _run_round(app_dsn, org, tasks) == []

    seen, truth = _frequencies(admin_dsn, project)
    assert len(truth) == len(WORDS)  # positive control: every word is still there
    assert seen == truth


def test_the_comparison_sees_a_wrong_frequency(app_dsn: str, admin_dsn: str) -> None:
    """Positive control for the check above: one df off by one is caught."""
    with psycopg.connect(app_dsn, autocommit=True) as conn:
        org = conn.execute("select memory.create_org('term stats control')").fetchone()[0]  # type: ignore[index]
        conn.execute("select memory.use_org(%s, false)", (org,))
        project = conn.execute("select memory.create_project(%s, 'p')", (org,)).fetchone()[0]  # type: ignore[index]
        conn.execute("select memory.ingest(%s, 's', %s)", (project, _messages(random.Random(1), 5)))
    seen, truth = _frequencies(admin_dsn, project)
    assert seen == truth
    with psycopg.connect(admin_dsn) as conn:
        conn.execute(
            "insert into memory_internal.episode_term_df (org_id, project_id, lexeme, shard, df) "
            "values (%s, %s, 'appl', 99, 1)",
            (org, project),
        )
    seen, truth = _frequencies(admin_dsn, project)
    assert seen != truth
