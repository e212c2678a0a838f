"""The vector legs of memory.search use the HNSW indexes, and iterative scans keep
project-filtered queries whole.

One org, three projects holding 80 %, 19 % and 1 % of 5,000 episodes and 5,000 facts
with random 384-dimension embeddings. The rows are written as superuser (triggers
off) in one transaction that is rolled back at the end; so that this takes seconds,
not the ~20 s that 10,000 one-by-one HNSW inserts cost, the two HNSW indexes are
dropped for the load and re-created from their own pg_get_indexdef (same name, same
definition) before ANALYZE. Every check then runs as chronomem_app, scoped with
memory.use_org, with `hnsw.iterative_scan = relaxed_order` as memory.search sets it,
in a savepoint of that same transaction.

The EXPLAINs use literal values (client-side binding): that is the custom plan
PL/pgSQL uses for memory.search's leg queries, whose parameters it knows.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from nested_plans import analyzed_tables, plans_in_a_new_session, plans_in_this_session

SIZES = {"big": 4000, "mid": 950, "small": 50}  # 80 %, 19 %, 1 % of 5,000
K = 30  # the leg's LIMIT for k = 10: greatest(k * 3, 30)
HNSW_INDEXES = ("episodes_embedding_idx", "fact_embeddings_embedding_idx")

# The leg queries of memory.search, as written in functions/076_search_episodes.sql
# (episodes) and functions/077_search.sql (facts).
EPISODE_LEG = """
    select e.episode_id from memory.episodes e
     where e.project_id = %(project)s and e.embedding is not null
       and e.occurred_at <= %(at)s and e.created_at <= %(known_at)s
     order by e.embedding <=> %(q)s::vector
     limit %(n)s"""
# The episode vector leg as memory.search calls it: a SQL function the planner inlines.
EPISODE_LEG_FUNCTION = """
    select x.episode_id from memory_internal.search_episode_vector(
      %(project)s, %(q)s::vector, %(at)s, %(known_at)s, %(n)s) x"""
FACT_LEG = """
    select e.fact_id from memory.fact_embeddings e
      join memory.facts_at(%(project)s, %(at)s, %(known_at)s) f
        on f.org_id = e.org_id and f.fact_id = e.fact_id
     where e.project_id = %(project)s
     order by e.embedding <=> %(q)s::vector
     limit %(n)s"""

RANDOM_VECTOR = (
    "(select array_agg(random() - 0.5) from generate_series(1, 384) d where {corr})::vector(384)"
)


@dataclass
class PlanData:
    conn: psycopg.Connection[Any]
    org: uuid.UUID
    projects: dict[str, uuid.UUID]
    queries: list[str]  # query embeddings as vector literals

    def scalar(self, query: str, params: dict[str, Any] | tuple[Any, ...] | None = None) -> Any:
        row = self.conn.execute(query, params).fetchone()
        assert row is not None
        return row[0]

    def leg_params(self, project: str, q: str | None = None) -> dict[str, Any]:
        return {
            "project": self.projects[project],
            "at": self.scalar("select now()"),
            "known_at": self.scalar("select now()"),
            "q": q or self.queries[0],
            "n": K,
        }

    def explain(self, query: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        """The plan's nodes, depth first."""
        plan = self.scalar("explain (format json) " + query, params)
        if isinstance(plan, str):
            plan = json.loads(plan)
        nodes: list[dict[str, Any]] = []

        def walk(node: dict[str, Any]) -> None:
            nodes.append(node)
            for child in node.get("Plans", []):
                walk(child)

        walk(plan[0]["Plan"])
        return nodes

    def explain_text(self, query: str, params: dict[str, Any]) -> str:
        return "\n".join(r[0] for r in self.conn.execute("explain " + query, params))


def _one(conn: psycopg.Connection[Any], query: str, params: Any = None) -> Any:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return row[0]


EPISODES = f"""
    insert into memory.episodes (org_id, project_id, session_id, seq, role, content,
                                 occurred_at, created_at, token_count, embedding)
    select s.org_id, s.project_id, s.session_id, g.i, 'user', 'message number ' || g.i,
           now() - interval '1 day', now() - interval '1 day', 3,
           {RANDOM_VECTOR.format(corr="g.i > 0")}
      from generate_series(1, %(n)s) g(i)
      join memory.sessions s on s.org_id = %(org)s and s.project_id = %(p)s"""
ENTITIES = """
    insert into memory.entities (org_id, project_id, name, normalized_name)
    select %(org)s, %(p)s, 'subject ' || i, 'subject ' || i from generate_series(1, %(n)s) i"""
# Current facts (open windows starting anywhere in 2019-2023), recorded a day ago.
FACTS = """
    insert into memory.facts (org_id, project_id, subject_id, predicate, predicate_label,
                              object_literal, object_key, identity_object, content, content_key,
                              source, valid_from, valid_range, recorded_at, range_changed_at,
                              last_seen_at)
    select n.org_id, n.project_id, n.entity_id, 'likes', 'likes', 'tea', 'tea', 'tea',
           n.name || ' likes tea', n.normalized_name || ' likes tea', 'api',
           v.t, tstzrange(v.t, null), now() - interval '1 day', now() - interval '1 day',
           now() - interval '1 day'
      from memory.entities n
     cross join lateral (select timestamptz '2019-01-01Z' + random() * interval '5 years'
                                + interval '0 s' * (n.entity_id is not null)::int as t) v
     where n.org_id = %(org)s and n.project_id = %(p)s"""
FACT_EMBEDDINGS = f"""
    insert into memory.fact_embeddings (org_id, project_id, fact_id, embedding)
    select f.org_id, f.project_id, f.fact_id, {RANDOM_VECTOR.format(corr="f.fact_id is not null")}
      from memory.facts f
     where f.org_id = %(org)s and f.project_id = %(p)s"""


def _load(conn: psycopg.Connection[Any], org: uuid.UUID, projects: dict[str, uuid.UUID]) -> None:
    """As superuser, triggers off; the HNSW indexes are rebuilt after the load."""
    conn.execute("reset role")
    conn.execute("set local session_replication_role = replica")
    conn.execute("select setseed(0.25)")
    indexdefs = [
        _one(conn, "select pg_get_indexdef(%s::regclass)", (f"memory.{name}",))
        for name in HNSW_INDEXES
    ]
    for name in HNSW_INDEXES:
        conn.execute(f"drop index memory.{name}")
    for name, n in SIZES.items():
        params = {"org": org, "p": projects[name], "n": n}
        conn.execute(
            "insert into memory.sessions (org_id, project_id, external_id)"
            " values (%(org)s, %(p)s, 'load')",
            params,
        )
        for query in (EPISODES, ENTITIES, FACTS, FACT_EMBEDDINGS):
            conn.execute(query, params)
    conn.execute("set local maintenance_work_mem = '256MB'")
    for ddl in indexdefs:
        conn.execute(ddl)
    conn.execute(
        "analyze memory.sessions, memory.episodes, memory.entities, memory.facts,"
        " memory.fact_embeddings"
    )
    conn.execute("set local session_replication_role = origin")


@pytest.fixture(scope="module")
def data(admin_dsn: str) -> Iterator[PlanData]:
    # ClientCursor: values are inlined, so EXPLAIN shows the custom plan.
    with (
        psycopg.connect(admin_dsn, cursor_factory=psycopg.ClientCursor) as conn,
        conn.transaction(force_rollback=True),
    ):
        conn.execute("set local role chronomem_app")
        org = _one(conn, "select memory.create_org('search plan')")
        conn.execute("select memory.use_org(%s)", (org,))
        projects = {
            name: _one(conn, "select memory.create_project(%s, %s)", (org, name)) for name in SIZES
        }
        _load(conn, org, projects)
        queries = [
            _one(conn, f"select {RANDOM_VECTOR.format(corr='true')}::text") for _ in range(6)
        ]
        yield PlanData(conn, org, projects, queries)


@pytest.fixture
def app(data: PlanData) -> Iterator[PlanData]:
    """The app role, scoped to the org, as memory.search runs its legs; undone after."""
    with data.conn.transaction(force_rollback=True):
        data.conn.execute("set local role chronomem_app")
        data.conn.execute("select memory.use_org(%s)", (data.org,))
        data.conn.execute("set local hnsw.iterative_scan = relaxed_order")
        yield data


def _hnsw_scan(nodes: list[dict[str, Any]], index: str) -> bool:
    """An index scan on `index` delivers the order (no Sort above it does the work)."""
    scans = [
        n
        for n in nodes
        if n["Node Type"] == "Index Scan" and n.get("Index Name") == index and n.get("Order By")
    ]
    sorts = [n for n in nodes if n["Node Type"] in ("Sort", "Incremental Sort")]
    return bool(scans) and not sorts


def test_fixture_sizes(app: PlanData) -> None:
    """Control: the projects hold what the tests assume, all embedded, as the app sees them."""
    for name, n in SIZES.items():
        p = app.projects[name]
        assert (
            app.scalar(
                "select count(*) from memory.episodes"
                " where project_id = %s and embedding is not null",
                (p,),
            )
            == n
        )
        assert (
            app.scalar(
                "select count(*) from memory.facts_at(%s) f join memory.fact_embeddings e"
                " using (org_id, fact_id)",
                (p,),
            )
            == n
        )
    assert SIZES["small"] > K


@pytest.mark.parametrize("project", ["big", "mid"])
def test_episode_vector_leg_uses_the_hnsw_index(app: PlanData, project: str) -> None:
    params = app.leg_params(project)
    nodes = app.explain(EPISODE_LEG, params)
    assert _hnsw_scan(nodes, "episodes_embedding_idx"), app.explain_text(EPISODE_LEG, params)


@pytest.mark.parametrize("project", ["big", "mid"])
def test_episode_vector_leg_function_is_inlined_onto_the_hnsw_index(
    app: PlanData, project: str
) -> None:
    params = app.leg_params(project)
    nodes = app.explain(EPISODE_LEG_FUNCTION, params)
    assert not any(n["Node Type"] == "Function Scan" for n in nodes), app.explain_text(
        EPISODE_LEG_FUNCTION, params
    )
    scans = [n for n in nodes if n.get("Index Name") == "episodes_embedding_idx"]
    assert scans and scans[0].get("Order By"), app.explain_text(EPISODE_LEG_FUNCTION, params)
    # Control: the function returns the episodes the leg query returns (ordered by
    # distance, where the relaxed index scan may be slightly out of order).
    direct = {r[0] for r in app.conn.execute(EPISODE_LEG, params).fetchall()}
    got = [r[0] for r in app.conn.execute(EPISODE_LEG_FUNCTION, params).fetchall()]
    assert len(got) == K and set(got) == direct


def test_fact_vector_leg_uses_the_hnsw_index(app: PlanData) -> None:
    """The HNSW scan of the embeddings gives the order; each candidate's version is a
    probe of memory.facts by its key (a nested loop keeps the scan's order)."""
    params = app.leg_params("big")
    nodes = app.explain(FACT_LEG, params)
    text = app.explain_text(FACT_LEG, params)
    assert _hnsw_scan(nodes, "fact_embeddings_embedding_idx"), text
    loops = [n for n in nodes if n["Node Type"] == "Nested Loop"]
    assert loops, text
    probes = [
        n
        for n in _plan_nodes({"Plan": loops[0]})
        if n.get("Relation Name") == "facts" and "fact_id = e.fact_id" in n.get("Index Cond", "")
    ]
    assert probes, text


def test_iterative_scan_returns_full_k_for_a_one_percent_project(app: PlanData) -> None:
    params = app.leg_params("small")
    # For 50 rows the planner rightly prefers an exact sort; take that path away so
    # the HNSW index serves the project-filtered query, as it does for larger projects.
    app.conn.execute("set local enable_sort = off")
    nodes = app.explain(EPISODE_LEG, params)
    assert _hnsw_scan(nodes, "episodes_embedding_idx"), app.explain_text(EPISODE_LEG, params)
    assert (
        app.scalar(
            "select count(*) from memory.episodes where project_id = %s", (params["project"],)
        )
        > K
    )

    for q in app.queries:
        params["q"] = q
        assert len(app.conn.execute(EPISODE_LEG, params).fetchall()) == K

    # Control: without iterative scans the same index path finds only the few of
    # its first ef_search candidates that belong to the project.
    app.conn.execute("set local hnsw.iterative_scan = off")
    short = [len(app.conn.execute(EPISODE_LEG, {**params, "q": q}).fetchall()) for q in app.queries]
    assert all(n < K for n in short), short


@pytest.mark.parametrize("project", list(SIZES))
def test_search_returns_k_results_with_all_legs(app: PlanData, project: str) -> None:
    p = app.projects[project]
    for legs in (None, ["episode_vector"], ["fact_vector"]):
        result = app.scalar(
            "select memory.search(%s, 'message number 7, subject 7 likes tea', %s::vector,"
            " p_k => 10, p_legs => %s)",
            (p, app.queries[0], legs),
        )
        assert result["degraded"] is False and result["failed_legs"] == [], result["failed_legs"]
        assert result["legs"] == (
            legs
            or [
                "episode_vector",
                "fact_vector",
                "episode_fulltext",
                "fact_fulltext",
                "entity",
                "graph",
            ]
        )
        assert len(result["results"]) == 10, (legs, len(result["results"]))
        assert [r["position"] for r in result["results"]] == list(range(1, 11))
    # The setting memory.search changes for its vector legs is given back.
    assert app.scalar("select current_setting('hnsw.iterative_scan')") == "relaxed_order"


@pytest.mark.parametrize("leg", ["episode_vector", "fact_vector"])
def test_vector_leg_ranks_follow_distance(app: PlanData, leg: str) -> None:
    """relaxed_order lets an iterative scan return rows slightly out of distance order;
    a leg's ranks must still be by distance."""
    table, key = (
        ("episodes", "episode_id") if leg == "episode_vector" else ("fact_embeddings", "fact_id")
    )
    bad = []
    for project in ("big", "mid"):
        for q in app.queries:
            result = app.scalar(
                "select memory.search(%s, 'zzz', %s::vector, p_k => 30, p_legs => %s)",
                (app.projects[project], q, [leg]),
            )
            # Episodes found only as a hit's neighbours (context shares) have no leg rank.
            ranked_by_leg = [r for r in result["results"] if leg in r["ranks"]]
            assert len(ranked_by_leg) >= 5, result["results"]
            ids = [r["id"] for r in sorted(ranked_by_leg, key=lambda r: r["ranks"][leg])]
            dist = dict(
                app.conn.execute(
                    f"select {key}::text, embedding <=> %s::vector from memory.{table}"
                    f" where {key} = any(%s::uuid[])",
                    (q, ids),
                ).fetchall()
            )
            ranked = [round(dist[i], 6) for i in ids]
            if ranked != sorted(ranked):
                bad.append((project, ranked))
    assert not bad, f"{leg} ranks out of distance order: {bad}"


# The vector leg within a period the question names (memory.search adds it when
# the question names a day, month or year): every episode here occurred a day ago.
PERIOD_LEG = """
    select x.episode_id from memory_internal.search_episode_vector_within(
      %(project)s, %(q)s::vector, tstzrange(%(at)s - interval '2 days', %(at)s), %(at)s,
      %(known_at)s, %(n)s) x"""


def _executed(nodes: list[dict[str, Any]], node_type: str, index: str) -> bool:
    return any(
        n["Node Type"] == node_type and n.get("Index Name") == index and n["Actual Loops"] > 0
        for n in nodes
    )


@pytest.mark.parametrize("project", ["big", "mid"])
def test_period_vector_leg_reads_the_period_by_btree_or_hnsw(app: PlanData, project: str) -> None:
    """A period of at most 2000 episodes (mid: 950) is read through the btree on
    (org, project, occurred_at) and ranked exactly; a wider one (big: 4000) goes
    through the HNSW index, so its cost is the plain leg's, not the period's size."""
    params = app.leg_params(project)
    plan = app.scalar("explain (analyze, format json) " + PERIOD_LEG, params)
    nodes: list[dict[str, Any]] = []

    def walk(node: dict[str, Any]) -> None:
        nodes.append(node)
        for child in node.get("Plans", []):
            walk(child)

    walk((json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"])
    text = app.explain_text(PERIOD_LEG, params)
    hnsw = _executed(nodes, "Index Scan", "episodes_embedding_idx")
    btree = _executed(nodes, "Index Scan", "episodes_project_idx")
    assert (hnsw, btree) == ((True, False) if project == "big" else (False, True)), text
    # Control: the period holds the whole project, so the answer is the project's
    # nearest K: exactly (mid) or as the plain leg's HNSW scan finds them (big).
    exact = EPISODE_LEG.replace("order by e.embedding <=>", "order by 0 + (e.embedding <=>")
    exact = exact.replace("::vector\n", "::vector)\n")
    got = [r[0] for r in app.conn.execute(PERIOD_LEG, params).fetchall()]
    direct = app.conn.execute(exact if project == "mid" else EPISODE_LEG, params).fetchall()
    assert len(got) == K and set(got) == {r[0] for r in direct}


# The vector legs with one plan per session (memory.search on a project of more
# than 20,000 rows): a generic plan, forced, with sorts disabled so that it is the
# HNSW scan. Their nested statements' plans are read with auto_explain (as notices,
# JSON); a generic plan shows the project as a parameter ($1), a custom one as a value.
CACHED = {
    "episode": (
        "select x.episode_id from memory_internal.search_episode_vector_cached("
        "%(project)s, %(q)s::vector, %(at)s, %(known_at)s, %(n)s) x",
        "episodes_embedding_idx",
    ),
    "fact": (
        "select x.fact_id from memory_internal.search_fact_vector_cached("
        "%(project)s, %(q)s::vector, %(at)s, %(known_at)s, %(n)s) x",
        "fact_embeddings_embedding_idx",
    ),
}


class Explained:
    """Runs a statement as the app role and returns the plans of the statements it
    ran inside functions (auto_explain, nested statements, JSON)."""

    def __init__(self, app: PlanData) -> None:
        self.app = app
        self.notices: list[str] = []

    def __call__(self, query: str, params: dict[str, Any]) -> tuple[Any, list[dict[str, Any]]]:
        self.notices.clear()
        row = self.app.conn.execute(query, params).fetchone()
        plans = []
        for message in self.notices:
            head, _, body = message.partition("plan:")
            if head.startswith("duration:") and body.strip():
                plan = json.loads(body)
                if not plan["Query Text"].lstrip().startswith(query.split("(")[0].strip()):
                    plans.append(plan)
        return (row[0] if row else None), plans


@pytest.fixture
def explained(app: PlanData) -> Iterator[Explained]:
    ex = Explained(app)
    conn = app.conn
    conn.execute("reset role")
    conn.execute("load 'auto_explain'")
    for setting in (
        "auto_explain.log_min_duration = 0",
        "auto_explain.log_nested_statements = on",
        "auto_explain.log_format = json",
        "auto_explain.log_level = notice",
    ):
        conn.execute(f"set local {setting}")
    conn.execute("set local role chronomem_app")

    def handler(d: psycopg.errors.Diagnostic) -> None:
        ex.notices.append(d.message_primary or "")

    conn.add_notice_handler(handler)
    try:
        yield ex
    finally:
        conn.remove_notice_handler(handler)


def _plan_nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    nodes: list[dict[str, Any]] = []

    def walk(node: dict[str, Any]) -> None:
        nodes.append(node)
        for child in node.get("Plans", []):
            walk(child)

    walk(plan["Plan"])
    return nodes


def _hnsw_under_limit(nodes: list[dict[str, Any]], index: str) -> bool:
    """The HNSW scan gives the LIMIT its order: no sort between them."""
    for n in nodes:
        if n["Node Type"] == "Limit":
            below = _plan_nodes({"Plan": n})[1:]
            scans = [m for m in below if m.get("Index Name") == index and m.get("Order By")]
            sorts = [m for m in below if m["Node Type"] in ("Sort", "Incremental Sort")]
            return bool(scans) and not sorts
    return False


@pytest.mark.parametrize("leg", sorted(CACHED))
def test_cached_vector_leg_keeps_the_hnsw_scan_as_its_generic_plan(
    explained: Explained, leg: str
) -> None:
    query, index = CACHED[leg]
    app = explained.app
    planned = (
        EPISODE_LEG_FUNCTION
        if leg == "episode"
        else "select x.fact_id from memory_internal.search_fact_vector("
        "%(project)s, %(q)s::vector, %(at)s, %(known_at)s, %(n)s) x"
    )
    for project in ("big", "mid"):
        for i, q in enumerate(app.queries + app.queries[:2]):  # 8 calls: past the plan cache's 5
            params = app.leg_params(project, q)
            _, plans = explained(query, params)
            [plan] = plans
            nodes = _plan_nodes(plan)
            assert _hnsw_under_limit(nodes, index), json.dumps(plan)[:3000]
            scan = next(n for n in nodes if n.get("Index Name") == index)
            assert "project_id = $1" in scan["Filter"], scan["Filter"]  # generic
            # The same answer as the leg planned for these values (a custom plan) where
            # that plan is the HNSW scan too (big: the tests above); mid's custom
            # plan may be an exact sort, which memory.search keeps for it (20,000).
            ids = [r[0] for r in app.conn.execute(query, params).fetchall()]
            direct = [r[0] for r in app.conn.execute(planned, params).fetchall()]
            assert len(ids) == K and (project == "mid" or ids == direct), (project, i)
    # Controls: a custom plan shows the project's value, and the plan check fails on
    # a plan without the HNSW scan (the index dropped in this rolled-back transaction:
    # the only way left is a sort).
    _, [plan] = explained(
        "select x.episode_id from memory_internal.search_episode_vector_planned(%(project)s,"
        " %(q)s::vector, null, %(at)s, %(known_at)s, %(n)s) x",
        app.leg_params("big"),
    )
    scan = next(n for n in _plan_nodes(plan) if n.get("Index Name") == "episodes_embedding_idx")
    assert "project_id = $1" not in scan["Filter"], scan["Filter"]
    app.conn.execute("reset role")
    app.conn.execute(f"drop index memory.{index}")
    app.conn.execute("set local role chronomem_app")
    _, [plan] = explained(query, app.leg_params("big"))
    assert not _hnsw_under_limit(_plan_nodes(plan), index), json.dumps(plan)[:3000]


def _set_sizes(app: PlanData, project: str, rows: int) -> None:
    """The project's counters say it holds `rows` fact versions and episodes (the
    fixture's rows were written with triggers off, so its counters hold nothing)."""
    conn = app.conn
    conn.execute("reset role")
    conn.execute(
        "insert into memory_internal.counters (org_id, project_id, metric, shard, value)"
        " select %(org)s, %(p)s, m, 0, %(n)s from unnest(array['facts_inserted',"
        " 'episodes_ingested']) m on conflict (org_id, project_id, metric, shard)"
        " do update set value = excluded.value",
        {"org": app.org, "p": app.projects[project], "n": rows},
    )
    conn.execute("set local role chronomem_app")


def test_search_runs_the_cached_legs_only_past_20000_rows(explained: Explained) -> None:
    app = explained.app
    search = (
        "select memory.search(%(project)s, %(question)s, %(q)s::vector, p_k => 10,"
        " p_legs => array['episode_vector', 'fact_vector'])"
    )
    params = {"project": app.projects["big"], "q": app.queries[1], "question": "zzz"}
    # pgvector's widest walk, which memory.search keeps: the cached plan's walk then
    # finds the nearest rows that the per-call plan (a sort, at this size) ranks, so the
    # two answers can be compared.
    app.conn.execute("set local hnsw.ef_search = 1000")

    def run(question: str = "zzz") -> tuple[Any, set[str]]:
        result, plans = explained(search, {**params, "question": question})
        # memory.search's own statements for the two legs (not those they call).
        texts = " ".join(
            p["Query Text"]
            for p in plans
            if p["Query Text"].startswith(("select array_agg(x.", "select array_agg(y."))
        )
        ran = {
            name
            for name in (
                "search_episode_vector_cached(",
                "search_episode_vector_planned(",
                "search_fact_vector_cached(",
                "search_fact_vector_planned(",
            )
            if name in texts
        }
        return result, ran

    # Counters empty (and at exactly 20,000 rows): planned per call.
    small, ran = run()
    assert ran == {"search_episode_vector_planned(", "search_fact_vector_planned("}, ran
    _set_sizes(app, "big", 20000)
    assert run()[1] == ran
    # Past 20,000: the cached legs, with the same answer.
    _set_sizes(app, "big", 20001)
    large, ran = run()
    assert ran == {"search_episode_vector_cached(", "search_fact_vector_cached("}, ran
    assert large["results"] == small["results"] and len(large["results"]) == 10
    # A question that names a period is planned per call (its period ranking).
    _, ran = run("zzz in March 2023")
    assert ran == {"search_episode_vector_planned(", "search_fact_vector_cached("}, ran


@pytest.mark.parametrize(
    ("leg", "leg_sql"), [("episode_vector", EPISODE_LEG), ("fact_vector", FACT_LEG)]
)
def test_vector_legs_walk_wide_enough_to_find_the_nearest_rows(
    app: PlanData, leg: str, leg_sql: str
) -> None:
    """At pgvector's default search width (hnsw.ef_search 40), the project-filtered HNSW
    walk over uniform random vectors (the hardest case for the graph) returns about half
    of each query's 10 nearest rows; memory.search walks wider for its legs
    (memory_internal.vector_ef_search) and returns (nearly) all of them, then gives the
    session its setting back. Control: the leg's own query at the session's 40."""
    app.conn.execute("set local hnsw.ef_search = 40")
    exact_sql = leg_sql.replace("limit %(n)s", "limit 10")
    product: list[float] = []
    control: list[float] = []
    for q in app.queries:
        params = app.leg_params("big", q)
        app.conn.execute("set local enable_indexscan = off")  # a sort: the exact answer
        want = {r[0] for r in app.conn.execute(exact_sql, params).fetchall()}
        app.conn.execute("set local enable_indexscan = on")
        assert len(want) == 10
        assert _hnsw_scan(app.explain(leg_sql, params), HNSW_INDEXES[leg == "fact_vector"])
        raw = [r[0] for r in app.conn.execute(leg_sql, params).fetchall()][:10]
        control.append(len(set(raw) & want) / 10)
        result = app.scalar(
            "select memory.search(%s, 'x', %s::vector, p_k => 10, p_legs => array[%s],"
            " p_fusion => 'rrf')",
            (params["project"], q, leg),
        )
        got = {uuid.UUID(r["id"]) for r in result["results"]}
        product.append(len(got & want) / 10)
    assert sum(product) / len(product) >= 0.85, product
    assert sum(control) / len(control) <= 0.7, control
    assert app.scalar("select current_setting('hnsw.ef_search')") == "40"


# -- the entity leg, planned before the first ANALYZE ------------------------------------

FIRST = ["ann", "bo", "cy", "dee", "eli", "fay", "gus", "hal", "ida", "jo"]
LAST = ["lee", "moss", "nash", "orr", "park", "quinn", "ross", "shaw", "tate", "vance"]


def _people_batch(day: int, copies: range) -> str:
    """Every first name with every last name, numbered (`copies`): people who share words,
    each on a plan written as a plain name."""
    return json.dumps([
        {"subject": f"{f} {ln} {i}", "predicate": "plan", "object": "pro",
         "valid_from": f"2024-03-{day:02d}"}
        for f in FIRST for ln in LAST for i in copies
    ])  # fmt: skip


def _reads(plan: str, table: str) -> list[tuple[str, str]]:
    """(index, Index Cond) of every index scan of `table` in the plan."""
    lines = plan.splitlines()
    out = []
    for i, line in enumerate(lines):
        if " Scan using " in line and f" on {table} " in line:
            index = line.split(" Scan using ", 1)[1].split(" ", 1)[0]
            cond = next((c.strip() for c in lines[i + 1 : i + 4] if "Index Cond" in c), "")
            out.append((index, cond))
    return out


def _assert_by_project(plans: list[str], table: str) -> None:
    """Each plan reads `table` by index scans whose condition names the project, and
    never by a sequential scan."""
    for plan in plans:
        assert f"Seq Scan on {table}" not in plan, plan
        scans = _reads(plan, table)
        assert scans, plan
        for index, cond in scans:
            assert "project_id = " in cond, (index, cond, plan)


@pytest.mark.parametrize("first_plans", ["empty", "grown"])
def test_entity_leg_of_a_new_install_reads_by_the_question_words(
    fresh_install: str, first_plans: str
) -> None:
    """The entity leg reads the names that are runs of the question (the name key), the
    name tokens of its words, and those candidates by id, whatever the planner knew when
    the session planned it: on a new install's empty tables, or after they grew with no
    ANALYZE yet. The question's words came from a CTE joined to the tables, and without
    statistics the plan read every entity and every name token of the project and
    filtered them by the join (11 ms per search at 2,000 entities, found by the API
    benchmark on a server with autovacuum off)."""
    question = "Which plan is Ann Lee 3 on?"

    def search(conn: psycopg.Connection[Any], project: uuid.UUID) -> list[Any]:
        answer = _one(
            conn,
            "select memory.search(%s, %s, p_legs => array['entity'])",
            (project, question),
        )
        return [r["text"] for r in answer["results"]]

    with psycopg.connect(fresh_install) as conn, conn.transaction():
        conn.execute("set local role chronomem_app")
        org = _one(conn, "select memory.create_org('entity leg plans')")
        conn.execute("select memory.use_org(%s)", (org,))
        project = _one(conn, "select memory.create_project(%s, 'p')", (org,))
        conn.execute(
            "select memory.assert_facts(%s, %s::jsonb)", (project, _people_batch(1, range(1)))
        )
        if first_plans == "empty":
            search(conn, project)  # the session's plans, on 100 entities
        # 2,100 people in all: 210 named Ann, 210 named Lee.
        for start in range(1, 21, 10):
            conn.execute(
                "select memory.assert_facts(%s, %s::jsonb)",
                (project, _people_batch(2, range(start, start + 10))),
            )
        if first_plans == "empty":
            plans, found = plans_in_this_session(conn, lambda c: search(c, project))
    if first_plans == "grown":
        plans, found = plans_in_a_new_session(fresh_install, org, lambda c: search(c, project))
    with psycopg.connect(fresh_install) as conn:
        analyzed = analyzed_tables(conn, ["memory.entities", "memory_internal.entity_name_tokens"])
    # Controls: nothing was analyzed meanwhile; the person the question names comes first
    # (a whole-name match), then people sharing a word with it.
    assert analyzed == [], analyzed
    assert found[0] == "ann lee 3" and len(found) == 10, found
    entities = [r for p in plans for r in _reads(p, "entities")]
    tokens = [r for p in plans for r in _reads(p, "entity_name_tokens")]
    assert entities and tokens, plans
    for index, cond in entities:
        # By a name of the question, or by id (the candidates, an alias's entity); never
        # a range of the project.
        assert "normalized_name = ANY" in cond or "entity_id = " in cond, (index, cond, plans)
    for index, cond in tokens:
        # The question's words: each counted (up to the budget), then the picked ones.
        assert "token = ANY" in cond or "token = w.token" in cond, (index, cond, plans)


def test_context_shares_of_a_new_install_read_each_hit_s_turns(fresh_install: str) -> None:
    """The context step of the fusion (each episode hit passes a share of its score to
    the turns next to it) reads the turns around each hit by session and turn, however
    many episodes the project holds when the planner has no statistics for them. With
    the project and visibility tests inside that read, a plan made without statistics
    guessed one row for every index and read the project's every episode by (org,
    project, occurred_at) once per search (a new install before its first ANALYZE)."""
    question = "Who adopted the greyhound?"

    def turns(session: int) -> str:
        return json.dumps([
            {"role": "user", "content": f"turn {j} of chat {session}: the weather in city {j % 13}",
             "occurred_at": f"2024-03-{1 + session:02d}T10:{j // 60:02d}:{j % 60:02d}Z"}
            for j in range(100)
        ])  # fmt: skip

    def search(conn: psycopg.Connection[Any], project: uuid.UUID) -> list[Any]:
        answer = _one(
            conn,
            "select memory.search(%s, %s, p_legs => array['episode_fulltext'])",
            (project, question),
        )
        return [(r["text"], r["ranks"]) for r in answer["results"]]

    with psycopg.connect(fresh_install) as conn, conn.transaction():
        conn.execute("set local role chronomem_app")
        org = _one(conn, "select memory.create_org('context share plans')")
        conn.execute("select memory.use_org(%s)", (org,))
        project = _one(conn, "select memory.create_project(%s, 'p')", (org,))
        for session in range(12):
            conn.execute(
                "select memory.ingest(%s, %s, %s::jsonb)", (project, f"s{session}", turns(session))
            )
        conn.execute(
            "select memory.ingest(%s, 'pets', %s::jsonb)",
            (project, json.dumps([{"role": "user", "content": "Maria adopted a greyhound"},
                                  {"role": "assistant", "content": "What is its name?"}])),
        )  # fmt: skip
    plans, found = plans_in_a_new_session(fresh_install, org, lambda c: search(c, project))
    with psycopg.connect(fresh_install) as conn:
        analyzed = analyzed_tables(conn, ["memory.episodes"])
    # Controls: nothing was analyzed; the hit comes first, and the turn after it, which
    # no leg returned, follows by its share.
    assert analyzed == [], analyzed
    assert found[0] == ("Maria adopted a greyhound", {"episode_fulltext": 1}), found
    assert ("What is its name?", {}) in found, found
    (fusion,) = [p for p in plans if "hit_episodes as materialized" in p]
    reads = _reads(fusion, "episodes")
    assert reads, fusion
    for index, cond in reads:
        assert "episode_id = " in cond or "session_id = " in cond, (index, cond, fusion)


def _project_with_facts(
    dsn: str,
    org_name: str,
    facts: list[dict[str, Any]],
    then: Callable[[psycopg.Connection[Any], uuid.UUID], Any] | None = None,
) -> tuple[uuid.UUID, uuid.UUID, Any]:
    """A new org and project holding `facts` (asserted 500 at a time, as the app role),
    committed; `then(conn, project)` runs last in the same transaction."""
    with psycopg.connect(dsn) as conn, conn.transaction():
        conn.execute("set local role chronomem_app")
        org = _one(conn, "select memory.create_org(%s)", (org_name,))
        conn.execute("select memory.use_org(%s)", (org,))
        project = _one(conn, "select memory.create_project(%s, 'p')", (org,))
        for start in range(0, len(facts), 500):
            conn.execute(
                "select memory.assert_facts(%s, %s::jsonb)",
                (project, json.dumps(facts[start : start + 500])),
            )
        extra = then(conn, project) if then else None
    return org, project, extra


def test_fact_details_of_a_new_install_read_the_hits_by_key(fresh_install: str) -> None:
    """The details of the fact hits (text, names, window) are read by the hits' ids,
    however many facts the project holds when the planner has no statistics for them.
    Read inside the fusion statement through readable_facts_at, a plan made without
    statistics took facts_identity_idx by the project alone and kept the ids asked: the
    project's every fact once per search (a new install before its first ANALYZE)."""

    def search(conn: psycopg.Connection[Any], project: uuid.UUID) -> list[Any]:
        answer = _one(
            conn,
            "select memory.search(%s, 'Who owns the greyhound?', p_legs => array['fact_fulltext'])",
            (project,),
        )
        return [(r["text"], r["subject"], r["object"]) for r in answer["results"]]

    facts = [
        {"subject": f"customer {i}", "predicate": "plan", "object": f"plan {i % 7}",
         "content": f"customer {i} is on plan {i % 7}"}
        for i in range(1500)
    ] + [{"subject": "Maria", "predicate": "owns", "object": "greyhound",
          "content": "Maria owns a greyhound"}]  # fmt: skip
    org, project, _ = _project_with_facts(fresh_install, "fact detail plans", facts)
    plans, found = plans_in_a_new_session(fresh_install, org, lambda c: search(c, project))
    with psycopg.connect(fresh_install) as conn:
        analyzed = analyzed_tables(conn, ["memory.facts", "memory.entities"])
    # Controls: nothing was analyzed; the fact is found with its names.
    assert analyzed == [], analyzed
    assert found == [("Maria owns a greyhound", "Maria", "greyhound")], found
    (details,) = [p for p in plans if "x.fact_id = any (p_ids)" in p]
    facts_reads = _reads(details, "facts")
    assert facts_reads, details
    for index, cond in facts_reads:
        assert "fact_id = ANY" in cond, (index, cond, details)
    for index, cond in _reads(details, "entities"):
        assert "entity_id = " in cond, (index, cond, details)


def test_context_communities_of_a_new_install_read_by_key(fresh_install: str) -> None:
    """memory.context's communities are read from the context's facts and entities by
    key (a fact by its id, its entities' memberships by entity, each community by id,
    the members' names by entity), however many communities the project holds when the
    planner has no statistics for them: never a range of the org or the project."""

    def context(conn: psycopg.Connection[Any], project: uuid.UUID) -> list[Any]:
        answer = _one(
            conn, "select memory.context(%s, 'Who owns the greyhound?', p_k => 5)", (project,)
        )
        return [sorted(c["members"]) for c in answer["communities"]]

    # 500 communities of three customers (3k knows 3k+1 knows 3k+2), and Maria's.
    facts = [
        {"subject": f"customer {i}", "predicate": "knows", "object": f"customer {i + 1}",
         "object_type": "entity"}
        for i in range(1500) if i % 3 != 2
    ] + [{"subject": "Maria", "predicate": "owns", "object": "greyhound",
          "object_type": "entity", "content": "Maria owns a greyhound"}]  # fmt: skip
    org, project, made = _project_with_facts(
        fresh_install,
        "context community plans",
        facts,
        lambda conn, project: _one(conn, "select memory.compute_communities(%s)", (project,)),
    )
    plans, found = plans_in_a_new_session(fresh_install, org, lambda c: context(c, project))
    with psycopg.connect(fresh_install) as conn:
        analyzed = analyzed_tables(
            conn, ["memory.communities", "memory.community_members", "memory.entities"]
        )
    # Controls: nothing was analyzed; 501 communities were made, and Maria's is found.
    assert analyzed == [], analyzed
    assert made["communities"] == 501, made
    assert found == [sorted(["Maria", "greyhound"])], found
    (reads,) = [p for p in plans if "memory.community_members m" in p]
    members = _reads(reads, "community_members")
    communities = _reads(reads, "communities")
    assert members and communities, reads
    for index, cond in members:
        assert "entity_id = " in cond or "community_id = " in cond, (index, cond, reads)
    for index, cond in communities:
        assert "community_id = " in cond, (index, cond, reads)
    for index, cond in _reads(reads, "entities") + _reads(reads, "facts"):
        assert "entity_id = " in cond or "fact_id = " in cond, (index, cond, reads)


def test_community_refresh_of_a_new_install_reads_its_project_only(fresh_install: str) -> None:
    """The communities job checks every project every 5 minutes: the check reads the
    current edges of that project through its key, never the org's, whatever the planner
    knew when the worker's session planned it (here: nothing, on a new install)."""
    chain = [
        {"subject": f"customer {i}", "predicate": "knows", "object": f"customer {i + 1}",
         "object_type": "entity"}
        for i in range(1500)
    ]  # fmt: skip
    org, big, _ = _project_with_facts(fresh_install, "community refresh plans", chain)
    with psycopg.connect(fresh_install) as conn, conn.transaction():
        conn.execute("set local role chronomem_app")
        conn.execute("select memory.use_org(%s)", (org,))
        small = _one(conn, "select memory.create_project(%s, 'small')", (org,))
        conn.execute(
            "select memory.assert_facts(%s, %s::jsonb)",
            (small, json.dumps([{**chain[0], "subject": "Ann", "object": "Ben"}])),
        )

    def refresh(conn: psycopg.Connection[Any]) -> list[Any]:
        return [_one(conn, "select memory.refresh_communities(%s)", (small,)) for _ in range(2)]

    plans, (first, second) = plans_in_a_new_session(fresh_install, org, refresh)
    with psycopg.connect(fresh_install) as conn:
        analyzed = analyzed_tables(conn, ["memory.edges"])
    # Controls: nothing analyzed; the first refresh computed, the second only checked.
    assert analyzed == [], analyzed
    assert first["computed"] and not second["computed"], (first, second)
    assert (first["edges"], second["edges"]) == (1, 1)
    reads = [p for p in plans if "memory.edges" in p and "bit_xor" in p]
    assert len(reads) == 2, plans  # the digest, once per refresh (computing or not)
    _assert_by_project(reads, "edges")
    assert big  # the other project of the org, whose 1,500 edges the check must not read


def test_backlog_of_a_new_install_reads_its_project_s_jobs_only(fresh_install: str) -> None:
    """A client polls GET /backlog: the read of memory.jobs takes the project's key
    (jobs_project_idx), not the queue of every org and project, whatever the planner
    knew when the session planned it (here: nothing, on a new install)."""
    messages = json.dumps([{"role": "user", "content": f"message {i}"} for i in range(100)])
    with psycopg.connect(fresh_install) as conn, conn.transaction():
        conn.execute("set local role chronomem_app")
        org = _one(conn, "select memory.create_org('backlog plans')")
        conn.execute("select memory.use_org(%s)", (org,))
        big = _one(conn, "select memory.create_project(%s, 'big')", (org,))
        small = _one(conn, "select memory.create_project(%s, 'small')", (org,))
        for n in range(20):  # 2,000 queued enrich jobs in the other project
            conn.execute("select memory.ingest(%s, %s, %s::jsonb)", (big, f"s{n}", messages))
        conn.execute(
            "select memory.ingest(%s, 's', %s::jsonb)",
            (small, json.dumps([{"role": "user", "content": "hi"}])),
        )

    def backlog(conn: psycopg.Connection[Any]) -> list[Any]:
        return [_one(conn, "select memory.project_backlog(%s)", (small,)) for _ in range(2)]

    plans, answers = plans_in_a_new_session(fresh_install, org, backlog)
    with psycopg.connect(fresh_install) as conn:
        analyzed = analyzed_tables(conn, ["memory.jobs"])
    # Controls: nothing analyzed; the answer counts the small project's jobs alone.
    assert analyzed == [], analyzed
    assert [a["kinds"]["enrich"]["queued"] for a in answers] == [1, 1], answers
    reads = [p for p in plans if "memory.jobs" in p and "count(" in p]
    assert reads, plans
    _assert_by_project(reads, "jobs")


def test_changes_of_a_new_install_read_the_project_s_events_by_their_span(
    fresh_install: str,
) -> None:
    """A client polls GET /changes: the read of memory.fact_events takes the project's
    key and the span's start (fact_events_project_idx), not the org's events, and each
    event's fact by its key, whatever the planner knew when the session planned it (here:
    nothing, on a new install)."""
    with psycopg.connect(fresh_install) as conn, conn.transaction():
        conn.execute("set local role chronomem_app")
        org = _one(conn, "select memory.create_org('changes plans')")
        conn.execute("select memory.use_org(%s)", (org,))
        big = _one(conn, "select memory.create_project(%s, 'big')", (org,))
        small = _one(conn, "select memory.create_project(%s, 'small')", (org,))
        for n in range(10):  # 2,000 events in the other project
            facts = [
                {"subject": f"person {n}-{i}", "predicate": "likes", "object": f"thing {i}"}
                for i in range(200)
            ]
            conn.execute("select memory.assert_facts(%s, %s::jsonb)", (big, json.dumps(facts)))
        conn.execute(
            "select memory.assert_facts(%s, %s::jsonb)",
            (small, json.dumps([{"subject": "Ann", "predicate": "likes", "object": "tea"}])),
        )

    def changes(conn: psycopg.Connection[Any]) -> list[Any]:
        return [_one(conn, "select memory.fact_changes(%s)", (small,)) for _ in range(2)]

    plans, answers = plans_in_a_new_session(fresh_install, org, changes)
    with psycopg.connect(fresh_install) as conn:
        analyzed = analyzed_tables(conn, ["memory.fact_events", "memory.facts"])
    # Controls: nothing analyzed; the answer is the small project's one event.
    assert analyzed == [], analyzed
    assert [[c["object"] for c in a["changes"]] for a in answers] == [["tea"], ["tea"]]
    reads = [p for p in plans if "fact_events" in p and "occurred_at" in p]
    assert reads, plans
    _assert_by_project(reads, "fact_events")
    for plan in reads:
        assert "Seq Scan on facts" not in plan, plan
        facts = _reads(plan, "facts")
        assert facts and all("fact_id = " in cond for _, cond in facts), plan
