"""BM25's statistics stay exact under concurrent ingests and wipes of one project.

The episode full-text leg reads document frequencies from
memory_internal.episode_term_df (sharded per writer) plus pending per-statement deltas
that ingests leave and later statements fold in. Eight app-role connections here
ingest and wipe sessions of the same project at once, sharing words, round after
round: no call may fail (a deadlock or a unique violation would surface here), and
afterwards every word's document frequency as the leg sees it must equal the number
of the project's episodes that hold it, counted from the episodes themselves.
Two more tests pin the locks that keep this deadlock-free: one transaction at a
time folds a project's pending deltas, and a wipe waits for the project's
uncommitted ingests.
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


def _project(conn: psycopg.Connection[Any], name: str) -> tuple[uuid.UUID, uuid.UUID]:
    """A new org and its project 'p', the connection's org set to it for the session."""
    org = conn.execute("select memory.create_org(%s)", (name,)).fetchone()[0]  # type: ignore[index]
    conn.execute("select memory.use_org(%s, false)", (org,))
    project = conn.execute("select memory.create_project(%s, 'p')", (org,)).fetchone()[0]  # type: ignore[index]
    return org, project


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
        org, project = _project(conn, "term stats")
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
        org, project = _project(conn, "term stats control")
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


def _pending_dummies(admin_dsn: str, org: uuid.UUID, project: uuid.UUID) -> None:
    """16 committed pending rows that change no frequency: the next inserting
    statement of the project finds enough pending rows to fold."""
    with psycopg.connect(admin_dsn) as conn:
        conn.execute(
            "insert into memory_internal.episode_term_df_pending"
            " (org_id, project_id, lexemes, deltas)"
            " select %s, %s, '{}', '{}' from generate_series(1, 16)",
            (org, project),
        )


def test_folding_transactions_never_wait_on_each_other(app_dsn: str, admin_dsn: str) -> None:
    """Two transactions that each ingest twice into one project, folding pending
    document frequencies each time, both commit. The writers' df rows are sharded by
    backend pid % 8, so the two connections are chosen with the same shard: then the
    first fold of T1 holds the rows of 'quokka' and 'zebra', T2's fold would take
    'walrus' and wait for 'zebra', and T1's second fold would wait for 'walrus' -- a
    deadlock, unless only one transaction at a time folds a project."""
    with psycopg.connect(app_dsn, autocommit=True) as conn:
        org, project = _project(conn, "fold lock")
    conns: list[psycopg.Connection[Any]] = []
    try:
        by_shard: dict[int, psycopg.Connection[Any]] = {}
        while True:
            c = psycopg.connect(app_dsn)
            conns.append(c)
            shard = c.execute("select pg_backend_pid() % 8").fetchone()[0]  # type: ignore[index]
            if shard in by_shard:
                t1, t2 = by_shard[shard], c
                break
            by_shard[shard] = c
        for c in (t1, t2):
            c.execute("set lock_timeout = '20s'")
            c.execute("select memory.use_org(%s, false)", (org,))
            c.commit()

        def ingest(c: psycopg.Connection[Any], session: str, text: str) -> None:
            c.execute(
                "select memory.ingest(%s, %s, %s)",
                (project, session, Jsonb([{"role": "user", "content": text}])),
            )

        _pending_dummies(admin_dsn, org, project)
        ingest(t1, "a", "quokka zebra")  # folds: T1 holds quokka's and zebra's rows
        errors: list[str] = []

        def second() -> None:
            try:
                ingest(t2, "b", "walrus zebra")  # folding here would wait for zebra
            except psycopg.Error as err:
                errors.append(f"T2: {type(err).__name__}: {err}")

        thread = threading.Thread(target=second)
        thread.start()
        thread.join(2)  # T2 folds and waits, or returns
        _pending_dummies(admin_dsn, org, project)
        try:
            ingest(t1, "c", "walrus")  # folds again: walrus's row
            t1.commit()
        except psycopg.Error as err:
            errors.append(f"T1: {type(err).__name__}: {err}")
            t1.rollback()
        thread.join()
        if not errors:
            t2.commit()
        assert errors == []
    finally:
        for c in conns:
            c.close()
    seen, truth = _frequencies(admin_dsn, project)
    assert truth == {"quokka": 1, "zebra": 2, "walrus": 2}  # control: all three committed
    assert seen == truth


def test_wipe_waits_for_an_uncommitted_ingest_of_its_project(app_dsn: str) -> None:
    """A wipe does not run while an ingest of the same project is uncommitted (both
    change the project's document frequencies); an ingest of another project does
    not hold it up (control)."""
    with psycopg.connect(app_dsn, autocommit=True) as conn:
        org, project = _project(conn, "wipe waits")
        other = conn.execute("select memory.create_project(%s, 'other')", (org,)).fetchone()[0]  # type: ignore[index]
        conn.execute(
            "select memory.ingest(%s, 'old', %s)", (project, _messages(random.Random(2), 3))
        )
    messages = _messages(random.Random(3), 3)
    with psycopg.connect(app_dsn) as writer, psycopg.connect(app_dsn) as wiper:
        for c in (writer, wiper):
            c.execute("select memory.use_org(%s, false)", (org,))
            c.commit()
        # SET inside the transaction: a rollback would undo a session-level one.
        writer.execute("select memory.ingest(%s, 'new', %s)", (other, messages))
        wiper.execute("set local lock_timeout = '500ms'")
        wiper.execute("select memory.wipe(%s, 'old')", (project,))  # control: not held up
        wiper.rollback()
        writer.execute("select memory.ingest(%s, 'new', %s)", (project, messages))
        wiper.execute("set local lock_timeout = '500ms'")
        try:
            wiper.execute("select memory.wipe(%s, 'old')", (project,))
            raise AssertionError("the wipe ran under an uncommitted ingest")
        except psycopg.errors.LockNotAvailable:
            wiper.rollback()
        writer.commit()
        wiper.execute("set local lock_timeout = '5s'")
        wiper.execute("select memory.wipe(%s, 'old')", (project,))
        wiper.commit()
