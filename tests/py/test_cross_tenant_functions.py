"""Cross-tenant suite over every SQL function the app role may execute.

The table CASES has one entry per function of the schemas `memory` (the SQL API),
`memory_http` (the HTTP and MCP layer) and `memory_worker` (the worker protocol) that
chronomem_app can EXECUTE; test_every_app_function_has_a_case reads that list from the catalog, so a
new function without a case fails the build.

For a function that takes tenant-owned ids, each probe runs as the app role scoped to
org B (by B's own API key) with org A's ids, and again with random ids in their place:
the two answers (rows, or the error's SQLSTATE, message, detail and hint, with the ids
masked) must be identical, so B can neither read A's data nor learn that A's ids
exist. Afterwards A's data, read in A's scope, must be unchanged. The positive control
then runs the same call in A's scope and must succeed (and, for a writer, must change
what that comparison reads: the check can see the function's effect).

A function that takes no tenant-owned id has a `neutral` reason and a check that fits
it, run in B's scope.

The test reads tables (A's data, and the ids it needs) through `cross_tenant_reads.rows`,
a SECURITY DEFINER helper that reads as the owner under the same forced policies: the
API's writers run as the owner, and on Citus a transaction may not read a shard as one
role after another role wrote it (docs/scale-out.md).
"""

from __future__ import annotations

import hashlib
import random
import re
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.types.json import Jsonb

ALL_PERMISSIONS = [
    "project:read",
    "project:write",
    "project:manage",
    "configuration:read",
    "configuration:write",
    "members:read",
    "members:write",
    "memory:review",
]
# Placeholders that name something of org A's; the random run replaces each.
A_IDS = (
    "org", "project", "fact", "episode", "entity", "endpoint", "key", "job", "delivery_job",
    "conflict", "change", "attachment",
)  # fmt: skip
# The schemas whose functions the app role calls: the SQL API, the HTTP layer's and the
# worker's.
SCHEMAS = ("memory", "memory_http", "memory_worker")
THIN_API = Path(__file__).resolve().parents[2] / "thin_api"


@dataclass(frozen=True)
class Case:
    probes: tuple[str, ...] = ()  # run in B's scope; A's ids vs random ids
    control: str | None = None  # run in A's scope with A's ids: must return true
    mutates: bool = False  # the control changes A's data
    setup: str | None = None  # run in A's scope before anything else (same transaction)
    neutral: str | None = None  # why no tenant-owned id is involved
    check: str | None = None  # for neutral cases: run in B's scope, must return true


# A vector of the installation's dimension, for the embedding functions.
VEC = "array_fill(0.25::real, array[memory.embedding_dim()])::vector"
# Lease A's enrich job (or deliver_webhook job) to worker 'xt': claim_jobs works
# across orgs, so claim until A's job is among the claimed (all rolled back after).
LEASE = """do $$ begin
  for i in 1..50 loop
    exit when exists (select from cross_tenant_reads.rows(
                        'select 1 from memory.jobs where job_id = $1[1]::bigint'
                        ' and status = ''running'' and locked_by = ''xt''', {job}::text));
    perform memory_worker.claim_jobs('xt', array['{kind}'], 1000);
  end loop;
end $$"""
LEASE_ENRICH = LEASE.format(job="%(job)s", kind="enrich")
LEASE_DELIVERY = LEASE.format(job="%(delivery_job)s", kind="deliver_webhook")
# A's project gets an extraction schema; A's episode a rejection the worker recorded.
SET_SCHEMA = 'select {f}(%(project)s, \'{{"labels": [{{"name": "billing"}}]}}\'::jsonb)'
REJECT = (
    "select memory_worker.record_extraction_rejections(%(episode)s,"
    ' \'[{"section": "answer", "item": null, "reason": "parse_failure"}]\')'
)
WORKER_ONLY = (
    "worker entry point across orgs by design (the job row carries its org; "
    "test_11_jobs asserts it): tenants cannot reach it, no API route or MCP tool calls "
    "it and the analyst may not execute it"
)

# One model call of A's project, and a budget for it.
MODEL_CALL = (
    "select memory_worker.record_model_call(%(project)s, 'enrich', null, null, 'xt', 'chat', "
    "5, 1, 2, 'ok')"
)
MODEL_BUDGET = "select memory.set_model_budget(%(project)s, 1000, 'month')"
RECORD_MODEL_CALL = (
    "record_model_call(uuid,text,bigint,uuid,text,text,integer,integer,double precision,text)"
)

P = "memory."
H = "memory_http."
W = "memory_worker."
CASES: dict[str, Case] = {
    # ---- tenancy, projects -------------------------------------------------------
    P + "normalize_text(text)": Case(
        neutral="a pure function of its argument: reads no table",
        check="select memory.normalize_text('  Zürich,  ACME ') = 'zürich acme' "
        "and (select provolatile = 'i' from pg_proc where oid = "
        "'memory.normalize_text(text)'::regprocedure)",
    ),
    P + "use_org(uuid,boolean)": Case(
        neutral="it sets the scope itself: the app role picks the org (tenants reach an "
        "org only through an API key); an unknown org is refused and the scope kept",
        check="select memory_internal.current_org() = %(b_org)s",
        # More in test_use_org_refuses_unknown_orgs.
    ),
    P + "create_org(text)": Case(
        neutral="makes a new tenant from a name; the caller's scope is unchanged and "
        "the new org is not visible from it",
        check="with o as (select memory.create_org('xt new org') as id) "
        "select memory_internal.current_org() = %(b_org)s "
        "and not exists (select from cross_tenant_reads.rows("
        "'select 1 from memory.orgs where org_id = $1[1]::uuid', o.id::text)) from o",
    ),
    P + "create_project(uuid,text)": Case(
        probes=("select memory.create_project(%(org)s, 'intruder')",),
        control="select memory.create_project(%(org)s, 'xt control') is not null",
        mutates=True,
    ),
    P + "counters(uuid)": Case(
        probes=("select * from memory.counters(%(project)s)",),
        control="select count(*) > 0 from memory.counters(%(project)s)",
    ),
    P + "project_overview(uuid)": Case(
        probes=("select memory.project_overview(%(project)s)",),
        control="select (memory.project_overview(%(project)s) ->> 'facts_current')::int > 0",
    ),
    P + "fact_detail(uuid,uuid)": Case(
        probes=(
            "select memory.fact_detail(%(project)s, %(fact)s)",
            "select memory.fact_detail(%(b_project)s, %(fact)s)",
        ),
        control="select memory.fact_detail(%(project)s, %(fact)s) ->> 'subject' is not null",
    ),
    P + "get_project(uuid)": Case(
        probes=("select * from memory.get_project(%(project)s)",),
        control="select count(*) = 1 from memory.get_project(%(project)s)",
    ),
    # ---- fact reads --------------------------------------------------------------
    P + "facts_at(uuid,timestamptz,timestamptz)": Case(
        probes=("select * from memory.facts_at(%(project)s)",),
        control="select count(*) > 0 from memory.facts_at(%(project)s)",
    ),
    P + "readable_facts_at(uuid,timestamptz,timestamptz)": Case(
        probes=("select * from memory.readable_facts_at(%(project)s)",),
        control="select count(*) > 0 from memory.readable_facts_at(%(project)s)",
    ),
    P + "edges_at(uuid,timestamptz,timestamptz)": Case(
        probes=("select * from memory.edges_at(%(project)s)",),
        control="select count(*) > 0 from memory.edges_at(%(project)s)",
    ),
    P + "fact_history(uuid,uuid)": Case(
        probes=(
            "select * from memory.fact_history(%(project)s, %(fact)s)",
            "select * from memory.fact_history(%(b_project)s, %(fact)s)",
        ),
        control="select count(*) > 0 from memory.fact_history(%(project)s, %(fact)s)",
    ),
    H + "fact_history(uuid,uuid)": Case(
        probes=(
            "select memory_http.fact_history(%(project)s, %(fact)s)",
            "select memory_http.fact_history(%(b_project)s, %(fact)s)",
        ),
        control="select jsonb_array_length(memory_http.fact_history(%(project)s, %(fact)s) "
        "-> 'events') > 0",
    ),
    P + "subject_timeline(uuid,text,text)": Case(
        probes=("select * from memory.subject_timeline(%(project)s, 'Alice')",),
        control="select count(*) > 0 from memory.subject_timeline(%(project)s, 'Alice')",
    ),
    H + "timeline(uuid,text,text)": Case(
        probes=("select memory_http.timeline(%(project)s, 'Alice')",),
        control="select jsonb_array_length(memory_http.timeline(%(project)s, 'Alice') "
        "-> 'facts') > 0",
    ),
    P + "export_subject(uuid,text)": Case(
        probes=("select memory.export_subject(%(project)s, 'Alice')",),
        control="select jsonb_array_length(memory.export_subject(%(project)s, 'Ally') "
        "-> 'facts') > 0",
    ),
    H + "export_subject(uuid,text)": Case(
        probes=("select memory_http.export_subject(%(project)s, 'Alice')",),
        control="select jsonb_array_length(memory_http.export_subject(%(project)s, 'Alice') "
        "-> 'episodes') > 0",
    ),
    P + "list_facts(uuid,timestamptz,timestamptz,text,text,uuid,integer)": (
        Case(
            probes=(
                "select memory.list_facts(%(project)s)",
                # A's fact id as B's own cursor: B's page is the same as for any id.
                "select memory.list_facts(%(b_project)s, p_after => %(fact)s) - 'as_of' "
                "- 'known_at'",
            ),
            control="select jsonb_array_length(memory.list_facts(%(project)s) -> 'facts') > 0",
        )
    ),
    P + "fact_changes(uuid,timestamptz,timestamptz,text,integer)": Case(
        probes=("select memory.fact_changes(%(project)s) - 'until'",),
        control="select jsonb_array_length(memory.fact_changes(%(project)s) -> 'changes') > 0",
    ),
    P + "predicates_of(uuid)": Case(
        probes=("select * from memory.predicates_of(%(project)s)",),
        control="select count(*) > 0 from memory.predicates_of(%(project)s)",
    ),
    # ---- fact writes -------------------------------------------------------------
    P + "assert_facts(uuid,jsonb,text,uuid,boolean,text)": Case(
        probes=(
            "select memory.assert_facts(%(project)s, "
            """'[{"subject": "Alice", "predicate": "works at", "object": "Initech"}]')""",
        ),
        control="select (memory.assert_facts(%(project)s, "
        """'[{"subject": "Alice", "predicate": "works at", "object": "Initech",
              "object_type": "entity"}]') ->> 'inserted')::int = 1""",
        mutates=True,
    ),
    H + "assert_facts(uuid,jsonb,boolean)": Case(
        probes=(
            "select memory_http.assert_facts(%(project)s, "
            """'[{"subject": "Alice", "predicate": "likes", "object": "coffee"}]')""",
        ),
        control="select (memory_http.assert_facts(%(project)s, "
        """'[{"subject": "Alice", "predicate": "likes", "object": "coffee"}]')
           ->> 'inserted')::int = 1""",
        mutates=True,
    ),
    P + "retract_fact(uuid,uuid,text,text)": Case(
        probes=(
            "select memory.retract_fact(%(project)s, %(fact)s)",
            "select memory.retract_fact(%(b_project)s, %(fact)s)",
        ),
        control="select memory.retract_fact(%(project)s, %(fact)s) is not null",
        mutates=True,
    ),
    H + "retract_fact(uuid,uuid,text)": Case(
        probes=(
            "select memory_http.retract_fact(%(project)s, %(fact)s)",
            "select memory_http.retract_fact(%(b_project)s, %(fact)s)",
        ),
        control="select memory_http.retract_fact(%(project)s, %(fact)s) is not null",
        mutates=True,
    ),
    P + "close_fact(uuid,uuid,timestamptz,text,text,text)": Case(
        probes=(
            "select memory.close_fact(%(project)s, %(fact)s)",
            "select memory.close_fact(%(b_project)s, %(fact)s)",
        ),
        control="select memory.close_fact(%(project)s, %(fact)s) is not null",
        mutates=True,
    ),
    P + "declare_predicate(uuid,text,text)": Case(
        probes=("select memory.declare_predicate(%(project)s, 'likes', 'one')",),
        control="select memory.declare_predicate(%(project)s, 'xt pred', 'one') is not null",
        mutates=True,
    ),
    H + "declare_predicate(uuid,text,text)": Case(
        probes=("select * from memory_http.declare_predicate(%(project)s, 'likes', 'one')",),
        control="select count(*) = 1 from memory_http.declare_predicate(%(project)s, "
        "'xt pred', 'one')",
        mutates=True,
    ),
    # ---- redaction rules -----------------------------------------------------------
    P + "redaction_rules_of(uuid)": Case(
        setup="select memory.set_redaction_rule(%(project)s, 'ip', 'mask')",
        probes=("select * from memory.redaction_rules_of(%(project)s)",),
        control="select count(*) = 1 from memory.redaction_rules_of(%(project)s)",
    ),
    P + "set_redaction_rule(uuid,text,text,text)": Case(
        probes=("select * from memory.set_redaction_rule(%(project)s, 'email', 'mask')",),
        control="select count(*) = 1 from memory.set_redaction_rule(%(project)s, 'email', 'mask')",
        mutates=True,
    ),
    H + "set_redaction_rule(uuid,text,text,text)": Case(
        probes=("select * from memory_http.set_redaction_rule(%(project)s, 'email', 'mask')",),
        control="select count(*) = 1 from memory_http.set_redaction_rule("
        "%(project)s, 'ip', 'hash')",
        mutates=True,
    ),
    P + "delete_redaction_rule(uuid,text)": Case(
        setup="select memory.set_redaction_rule(%(project)s, 'ip', 'mask')",
        probes=("select memory.delete_redaction_rule(%(project)s, 'ip')",),
        control="select memory.delete_redaction_rule(%(project)s, 'ip')",
        mutates=True,
    ),
    H + "delete_redaction_rule(uuid,text)": Case(
        setup="select memory.set_redaction_rule(%(project)s, 'ip', 'mask')",
        probes=("select memory_http.delete_redaction_rule(%(project)s, 'ip')",),
        control="select memory_http.delete_redaction_rule(%(project)s, 'ip')",
        mutates=True,
    ),
    # ---- entities, graph, communities --------------------------------------------
    P + "upsert_entity(uuid,text,text,text)": Case(
        probes=("select memory.upsert_entity(%(project)s, 'Alice', null, 'changed')",),
        control="select memory.upsert_entity(%(project)s, 'Mallory') is not null",
        mutates=True,
    ),
    P + "add_alias(uuid,text,text)": Case(
        probes=("select memory.add_alias(%(project)s, 'Alice', 'Ace')",),
        control="select memory.add_alias(%(project)s, 'Alice', 'Ace') is not null",
        mutates=True,
    ),
    H + "upsert_entity(uuid,text,text,text,text[])": Case(
        probes=("select memory_http.upsert_entity(%(project)s, 'Alice', null, 'changed')",),
        control="select memory_http.upsert_entity(%(project)s, 'Mallory', null, null, "
        "array['Mal']) ->> 'name' = 'Mallory'",
        mutates=True,
    ),
    P + "merge_entities(uuid,text,text,boolean)": Case(
        probes=("select memory.merge_entities(%(project)s, 'Globex', 'Acme')",),
        control="select (memory.merge_entities(%(project)s, 'Globex', 'Acme') ->> 'merged')"
        "::boolean",
        mutates=True,
    ),
    P + "split_entity(uuid,text,boolean)": Case(
        probes=("select memory.split_entity(%(project)s, 'Ally')",),
        control="select memory.split_entity(%(project)s, 'Ally') ->> 'split_from' = "
        "%(entity)s::text",
        mutates=True,
    ),
    H + "split_entity(uuid,text,boolean)": Case(
        probes=("select memory_http.split_entity(%(project)s, 'Ally')",),
        control="select memory_http.split_entity(%(project)s, 'Ally') #>> '{entity,name}' = 'Ally'",
        mutates=True,
    ),
    H + "merge_entities(uuid,text,text,boolean)": Case(
        probes=("select memory_http.merge_entities(%(project)s, 'Globex', 'Acme')",),
        control="select memory_http.merge_entities(%(project)s, 'Globex', 'Acme') "
        "#>> '{entity,name}' = 'Globex'",
        mutates=True,
    ),
    P + "list_entities(uuid,text,integer)": Case(
        probes=("select memory.list_entities(%(project)s)",),
        control="select jsonb_array_length(memory.list_entities(%(project)s) -> 'entities') > 0",
    ),
    P + "graph_neighbors(uuid,text,integer,timestamptz,timestamptz,integer)": (
        Case(
            probes=("select memory.graph_neighbors(%(project)s, 'Alice')",),
            control="select jsonb_array_length(memory.graph_neighbors(%(project)s, 'Alice') "
            "-> 'edges') > 0",
        )
    ),
    P + "compute_communities(uuid,integer)": Case(
        probes=("select memory.compute_communities(%(project)s)",),
        control="select (memory.compute_communities(%(project)s) ->> 'communities')::int > 0",
        mutates=True,
    ),
    P + "refresh_communities(uuid,integer)": Case(
        probes=("select memory.refresh_communities(%(project)s)",),
        control="select (memory.refresh_communities(%(project)s) ->> 'communities')::int > 0",
        mutates=True,
    ),
    W + "queue_community_refreshes(integer)": Case(
        # No id: it sweeps the caller's org. B's run must neither list A's projects nor
        # queue a job for one.
        probes=("select memory_worker.queue_community_refreshes()",),
        control="select x -> 'queued' ? %(project)s::text or (x ->> 'pending')::int "
        "+ (x ->> 'unchanged')::int > 0 from memory_worker.queue_community_refreshes() x",
        mutates=True,
    ),
    H + "refresh_communities(uuid)": Case(
        probes=("select memory_http.refresh_communities(%(project)s)",),
        control="select (memory_http.refresh_communities(%(project)s) ->> 'communities')::int > 0",
    ),
    P + "list_communities(uuid,text,integer,integer)": Case(
        probes=("select memory.list_communities(%(project)s)",),
        control="select jsonb_array_length(memory.list_communities(%(project)s) "
        "-> 'communities') > 0",
    ),
    # Community summaries (functions/079_community_summaries.sql): A's communities are
    # computed, none summarized yet.
    W + "community_summary_inputs(uuid,integer,integer,integer)": Case(
        probes=("select memory_worker.community_summary_inputs(%(project)s)",),
        control="select jsonb_array_length("
        "memory_worker.community_summary_inputs(%(project)s)) > 0",
    ),
    W + "store_community_summaries(uuid,jsonb,text)": Case(
        probes=(
            "select memory_worker.store_community_summaries(%(project)s, '[]')",
            "select memory_worker.store_community_summaries(%(project)s, jsonb_build_array("
            "jsonb_build_object('community_id', gen_random_uuid(), 'members_digest', 0, "
            "'summary', 'x')))",
        ),
        control="select (memory_worker.store_community_summaries(%(project)s, "
        "jsonb_build_array(jsonb_build_object('community_id', c.r -> 'community_id', "
        "'members_digest', c.r -> 'members_digest', 'summary', 'A group.'))) ->> 'stored')::int "
        "= 1 from cross_tenant_reads.rows('select community_id, members_digest, size "
        "from memory.communities where project_id = $1[1]::uuid', %(project)s::text) c(r) "
        "order by (c.r ->> 'size')::int desc limit 1",
        mutates=True,
    ),
    P + "reconcile_edges(integer,uuid)": Case(
        # It heals drift only, so the control can just succeed: A's edges agree.
        probes=("select memory.reconcile_edges(1000, %(project)s)",),
        control="select memory.reconcile_edges(1000, %(project)s) ? 'keys_checked'",
    ),
    # ---- episodes, sessions, wipe ------------------------------------------------
    P + "ingest(uuid,text,jsonb,text,jsonb)": Case(
        probes=(
            "select memory.ingest(%(project)s, 'xt chat', "
            """'[{"role": "user", "content": "intruder"}]')""",
        ),
        control="select memory.ingest(%(project)s, 'xt chat', "
        """'[{"role": "user", "content": "more from Alice"}]') is not null""",
        mutates=True,
    ),
    H + "ingest(uuid,text,jsonb,text,jsonb)": Case(
        probes=(
            "select memory_http.ingest(%(project)s, 'xt chat', "
            """'[{"role": "user", "content": "intruder"}]')""",
        ),
        control="select memory_http.ingest(%(project)s, 'xt chat', "
        """'[{"role": "user", "content": "more from Alice"}]') is not null""",
        mutates=True,
    ),
    P + "ingest_attachments(uuid,text,jsonb,jsonb,bytea[],text,jsonb)": Case(
        probes=(
            "select memory.ingest_attachments(%(project)s, 'xt files', "
            """'[{"role": "user", "content": "intruder"}]', """
            """'[{"filename": "x.txt", "media_type": "text/plain", "pages": ["intruder"]}]', """
            "array['intruder'::bytea])",
        ),
        control="select jsonb_array_length(memory.ingest_attachments(%(project)s, 'xt files', "
        """'[{"role": "user", "content": "another file"}]', """
        """'[{"filename": "b.txt", "media_type": "text/plain", "pages": ["more"]}]', """
        "array['more'::bytea]) -> 'attachments') = 1",
        mutates=True,
    ),
    H + "ingest_attachments(uuid,text,jsonb,jsonb,bytea[],text,jsonb)": Case(
        probes=(
            "select memory_http.ingest_attachments(%(project)s, 'xt files', "
            """'[{"role": "user", "content": "intruder"}]', """
            """'[{"filename": "x.txt", "media_type": "text/plain", "pages": ["intruder"]}]', """
            "array['intruder'::bytea])",
        ),
        control="select jsonb_array_length(memory_http.ingest_attachments(%(project)s, "
        """'xt files', '[{"role": "user", "content": "another file"}]', """
        """'[{"filename": "b.txt", "media_type": "text/plain", "pages": ["more"]}]', """
        "array['more'::bytea]) -> 'attachments') = 1",
        mutates=True,
    ),
    P + "get_attachment(uuid,uuid)": Case(
        probes=(
            "select memory.get_attachment(%(project)s, %(attachment)s)",
            "select memory.get_attachment(%(b_project)s, %(attachment)s)",
        ),
        control="select memory.get_attachment(%(project)s, %(attachment)s) ->> 'filename' "
        "= 'a.txt'",
    ),
    P + "attachment_content(uuid,uuid)": Case(
        probes=(
            "select * from memory.attachment_content(%(project)s, %(attachment)s)",
            "select * from memory.attachment_content(%(b_project)s, %(attachment)s)",
        ),
        control="select count(*) = 1 from memory.attachment_content(%(project)s, %(attachment)s)",
    ),
    P + "session_messages(uuid,text,integer,integer)": Case(
        probes=("select memory.session_messages(%(project)s, 'xt chat')",),
        control="select jsonb_array_length(memory.session_messages(%(project)s, 'xt chat') "
        "-> 'messages') > 0",
    ),
    P + "list_sessions(uuid,text,integer)": Case(
        probes=("select memory.list_sessions(%(project)s)",),
        control="select jsonb_array_length(memory.list_sessions(%(project)s) -> 'sessions') > 0",
    ),
    P + "wipe(uuid,text,text,text)": Case(
        probes=(
            "select memory.wipe(%(project)s)",
            "select memory.wipe(%(project)s, 'xt chat')",
            "select memory.wipe(%(project)s, null, 'Alice')",
        ),
        control="select (memory.wipe(%(project)s) ->> 'facts')::int > 0",
        mutates=True,
    ),
    H + "wipe(uuid,text,text)": Case(
        probes=(
            "select memory_http.wipe(%(project)s)",
            "select memory_http.wipe(%(project)s, 'xt chat')",
        ),
        control="select (memory_http.wipe(%(project)s, 'xt chat') ->> 'episodes')::int > 0",
        mutates=True,
    ),
    P + "set_retention(uuid,interval,text)": Case(
        probes=("select memory.set_retention(%(project)s, '1 day')",),
        control="select (memory.set_retention(%(project)s, '1 day') ->> 'retention_seconds')::int"
        " = 86400",
        mutates=True,
    ),
    H + "set_retention(uuid,bigint)": Case(
        probes=("select memory_http.set_retention(%(project)s, 86400)",),
        control="select (memory_http.set_retention(%(project)s, 7200) ->> 'retention_seconds')"
        "::int = 7200",
        mutates=True,
    ),
    P + "purge_expired(uuid,text)": Case(
        # A's episodes are younger than its retention: A's own call erases nothing.
        setup="select memory.set_retention(%(project)s, '1 hour')",
        probes=("select memory.purge_expired(%(project)s)",),
        control="select memory.purge_expired(%(project)s) is null",
    ),
    P + "delete_project(uuid,text)": Case(
        probes=("select memory.delete_project(%(project)s)",),
        control="select (memory.delete_project(%(project)s) #>> '{wiped,facts}')::int > 0",
        mutates=True,
    ),
    H + "delete_project(uuid)": Case(
        probes=("select memory_http.delete_project(%(project)s)",),
        control="select (memory_http.delete_project(%(project)s) ->> 'deleted')::boolean",
        mutates=True,
    ),
    # ---- embeddings and extraction (the worker's calls) --------------------------
    P + "embedding_dim()": Case(
        neutral="the installation's embedding dimension (a column type), not tenant data",
        check="select memory.embedding_dim() = (select atttypmod from pg_attribute "
        "where attrelid = 'memory.fact_embeddings'::regclass and attname = 'embedding')",
    ),
    P + "embedding_model()": Case(
        neutral="the installation's embedding model name (a column comment), not tenant data",
        check="select memory.embedding_model() is not distinct from (select substring("
        "col_description('memory.episodes'::regclass, a.attnum) from '\\[model: ([^]]+)\\]') "
        "from pg_attribute a where a.attrelid = 'memory.episodes'::regclass "
        "and a.attname = 'embedding')",
    ),
    W + "embedding_inputs(uuid,text,uuid[])": Case(
        probes=tuple(
            f"select * from memory_worker.embedding_inputs(%({p})s, '{kind}', "
            f"array[%({i})s]::uuid[])"
            for kind, i in (("episode", "episode"), ("fact", "fact"), ("entity", "entity"))
            for p in ("project", "b_project")
        ),
        control="select (select count(*) from memory_worker.embedding_inputs(%(project)s, "
        "'episode', array[%(episode)s]::uuid[])) + (select count(*) from "
        "memory_worker.embedding_inputs(%(project)s, 'fact', array[%(fact)s]::uuid[])) "
        "+ (select count(*) from "
        "memory_worker.embedding_inputs(%(project)s, 'entity', array[%(entity)s]::uuid[])) = 3",
    ),
    W + "store_embeddings(text,uuid[],vector[])": Case(
        probes=tuple(
            f"select memory_worker.store_embeddings('{kind}', array[%({i})s]::uuid[], array[{VEC}])"
            for kind, i in (("episode", "episode"), ("fact", "fact"), ("entity", "entity"))
        ),
        control=f"select memory_worker.store_embeddings('episode', array[%(episode)s]::uuid[], "
        f"array[{VEC}]) + memory_worker.store_embeddings('fact', array[%(fact)s]::uuid[], "
        f"array[{VEC}]) + memory_worker.store_embeddings('entity', array[%(entity)s]::uuid[], "
        f"array[{VEC}]) = 3",
        mutates=True,
    ),
    W + "extraction_context(uuid,integer)": Case(
        probes=("select memory_worker.extraction_context(%(episode)s)",),
        control="select jsonb_array_length(memory_worker.extraction_context(%(episode)s) "
        "-> 'known_facts') > 0",
    ),
    W + "apply_extraction(uuid,jsonb,real,integer,jsonb)": Case(
        probes=(
            "select memory_worker.apply_extraction(%(episode)s, jsonb_build_object("
            "'contradictions', jsonb_build_array(jsonb_build_object('fact_id', %(fact)s)), "
            """'entities', '[{"name": "Intruder"}]'::jsonb))""",
        ),
        control="select (memory_worker.apply_extraction(%(episode)s, jsonb_build_object("
        "'contradictions', jsonb_build_array(jsonb_build_object('fact_id', %(fact)s)))) "
        "#>> '{contradictions,closed}')::int = 1",
        mutates=True,
    ),
    # ---- search (functions/077) --------------------------------------------------
    P + "search(uuid,text,vector,timestamptz,timestamptz,integer,text[],text,text[],jsonb)": (
        Case(
            probes=(
                "select memory.search(%(project)s, 'Alice Globex')",
                "select memory.search(%(project)s, 'Alice Globex', p_labels => array['x'])",
            ),
            control="select jsonb_array_length(memory.search(%(project)s, 'Alice Globex') "
            "-> 'results') > 0",
        )
    ),
    P + "search_rows(uuid,text,vector,timestamptz,timestamptz,integer,text[],text,text[],jsonb)": (
        Case(
            probes=("select * from memory.search_rows(%(project)s, 'Alice Globex')",),
            control="select count(*) > 0 from memory.search_rows(%(project)s, 'Alice Globex')",
        )
    ),
    P + "vector_query_text(uuid,text,timestamptz,timestamptz)": (
        Case(
            # A turn of A's by the participant Alice: in A's scope her name is left out.
            setup="select memory.ingest(%(project)s, 'xt speaker', jsonb_build_array("
            "jsonb_build_object('role', 'user', 'content', 'Globex was fun', "
            "'metadata', jsonb_build_object('speaker', 'Alice'))))",
            probes=("select memory.vector_query_text(%(project)s, 'What did Bob say of Globex?')",),
            control="select memory.vector_query_text(%(project)s, 'What did Alice say of Globex?') "
            "= 'What did say of Globex?'",
        )
    ),
    P + "context(uuid,text,vector,timestamptz,timestamptz,integer,integer,text[],jsonb)": (
        Case(
            probes=("select memory.context(%(project)s, 'Alice Globex')",),
            control="select memory.context(%(project)s, 'Alice Globex')::text ~ 'Globex'",
        )
    ),
    H + "search(uuid,text,vector,vector,timestamptz,timestamptz,integer,text[],text,"
    "text[],jsonb)": (
        Case(
            probes=("select memory_http.search(%(project)s, 'Alice Globex')",),
            control="select jsonb_array_length(memory_http.search(%(project)s, 'Alice Globex') "
            "-> 'results') > 0",
        )
    ),
    H + "context(uuid,text,vector,vector,timestamptz,timestamptz,integer,integer,text[],jsonb)": (
        Case(
            probes=("select memory_http.context(%(project)s, 'Alice Globex')",),
            control="select memory_http.context(%(project)s, 'Alice Globex')::text ~ 'Globex'",
        )
    ),
    # ---- extraction schemas (functions/074, 086_http_extraction) --------------------
    P + "set_extraction_schema(uuid,jsonb,text)": Case(
        probes=(SET_SCHEMA.format(f="memory.set_extraction_schema"),),
        control=SET_SCHEMA.format(f="memory.set_extraction_schema") + " ->> 'version' = '1'",
        mutates=True,
    ),
    H + "set_extraction_schema(uuid,jsonb)": Case(
        probes=(SET_SCHEMA.format(f="memory_http.set_extraction_schema"),),
        control=SET_SCHEMA.format(f="memory_http.set_extraction_schema") + " ->> 'version' = '1'",
        mutates=True,
    ),
    P + "extraction_schema(uuid,integer)": Case(
        setup=SET_SCHEMA.format(f="memory.set_extraction_schema"),
        probes=("select memory.extraction_schema(%(project)s)",),
        control="select memory.extraction_schema(%(project)s, 1) ->> 'version' = '1'",
    ),
    H + "extraction_schema(uuid,integer)": Case(
        setup=SET_SCHEMA.format(f="memory.set_extraction_schema"),
        probes=("select memory_http.extraction_schema(%(project)s)",),
        control="select memory_http.extraction_schema(%(project)s) ->> 'version' = '1'",
    ),
    P + "extraction_schema_versions(uuid)": Case(
        setup=SET_SCHEMA.format(f="memory.set_extraction_schema"),
        probes=("select * from memory.extraction_schema_versions(%(project)s)",),
        control="select count(*) = 1 from memory.extraction_schema_versions(%(project)s)",
    ),
    H + "extraction_schema_versions(uuid)": Case(
        setup=SET_SCHEMA.format(f="memory.set_extraction_schema"),
        probes=("select memory_http.extraction_schema_versions(%(project)s)",),
        control="select jsonb_array_length(memory_http.extraction_schema_versions(%(project)s)"
        " -> 'versions') = 1",
    ),
    P + "episode_extraction(uuid,uuid)": Case(
        setup=REJECT,
        probes=("select memory.episode_extraction(%(project)s, %(episode)s)",),
        control="select jsonb_array_length(memory.episode_extraction(%(project)s, %(episode)s)"
        " -> 'rejections') = 1",
    ),
    H + "episode_extraction(uuid,uuid)": Case(
        setup=REJECT,
        probes=("select memory_http.episode_extraction(%(project)s, %(episode)s)",),
        control="select jsonb_array_length(memory_http.episode_extraction(%(project)s,"
        " %(episode)s) -> 'rejections') = 1",
    ),
    P + "list_extraction_rejections(uuid,text,integer,bigint,uuid)": Case(
        setup=REJECT,
        probes=(
            "select * from memory.list_extraction_rejections(%(project)s)",
            "select * from memory.list_extraction_rejections(%(project)s,"
            " p_episode => %(episode)s)",
        ),
        control="select count(*) = 1 from memory.list_extraction_rejections(%(project)s)",
    ),
    H + "extraction_rejections(uuid,text,integer,bigint)": Case(
        setup=REJECT,
        probes=("select memory_http.extraction_rejections(%(project)s)",),
        control="select jsonb_array_length(memory_http.extraction_rejections(%(project)s)"
        " -> 'rejections') = 1",
    ),
    W + "record_extraction_rejections(uuid,jsonb,jsonb)": Case(
        probes=(REJECT,),
        control=REJECT + " = 1",
        mutates=True,
    ),
    # ---- jobs --------------------------------------------------------------------
    W + "claim_jobs(text,text[],integer,interval)": Case(neutral=WORKER_ONLY),
    W + "resume_waiting_jobs(text[])": Case(neutral=WORKER_ONLY),
    W + "enqueue_due_jobs()": Case(neutral=WORKER_ONLY),
    W + "complete_job(uuid,bigint,text,jsonb)": Case(
        setup=LEASE_ENRICH,
        probes=("select memory_worker.complete_job(%(org)s, %(job)s, 'xt')",),
        control="select memory_worker.complete_job(%(org)s, %(job)s, 'xt')",
        mutates=True,
    ),
    W + "fail_job(uuid,bigint,text,text,boolean)": Case(
        setup=LEASE_ENRICH,
        probes=("select memory_worker.fail_job(%(org)s, %(job)s, 'xt', 'intruder', false)",),
        control="select memory_worker.fail_job(%(org)s, %(job)s, 'xt', 'control', false) = 'dead'",
        mutates=True,
    ),
    P + "retry_dead_jobs(text,uuid)": Case(
        # A's enrich job, leased and failed for good: dead. Scoped to B, retrying
        # (even naming A's project) must leave it dead.
        setup=LEASE_ENRICH
        + ";\nselect memory_worker.fail_job(%(org)s, %(job)s, 'xt', 'gave up', false)",
        probes=("select memory.retry_dead_jobs('enrich', %(project)s)",),
        control="select memory.retry_dead_jobs('enrich', %(project)s) = 1",
        mutates=True,
    ),
    P + "project_backlog(uuid)": Case(
        probes=("select memory.project_backlog(%(project)s)",),
        control="select memory.project_backlog(%(project)s) ? 'caught_up'",
    ),
    # ---- model usage and budgets --------------------------------------------------
    W + RECORD_MODEL_CALL: (
        Case(
            probes=(
                "select memory_worker.record_model_call(%(project)s, 'enrich', %(job)s, "
                "%(episode)s, 'xt', 'chat', 5, 1, 2, 'ok')",
            ),
            control="select count(*) = 1 from memory_worker.record_model_call(%(project)s, "
            "'enrich', %(job)s, %(episode)s, 'xt', 'chat', 5, 1, 2, 'ok')",
            mutates=True,
        )
    ),
    P + "model_usage(uuid,timestamptz,timestamptz)": Case(
        setup=MODEL_CALL,
        probes=("select * from memory.model_usage(%(project)s)",),
        control="select count(*) = 1 from memory.model_usage(%(project)s)",
    ),
    H + "model_usage(uuid,timestamptz,timestamptz)": Case(
        setup=MODEL_CALL,
        probes=("select memory_http.model_usage(%(project)s)",),
        control="select jsonb_array_length(memory_http.model_usage(%(project)s) -> 'usage') = 1",
    ),
    P + "model_budget(uuid)": Case(
        setup=MODEL_BUDGET,
        probes=("select memory.model_budget(%(project)s)",),
        control="select (memory.model_budget(%(project)s) ->> 'tokens')::int = 1000",
    ),
    H + "model_budget(uuid)": Case(
        setup=MODEL_BUDGET,
        probes=("select memory_http.model_budget(%(project)s)",),
        control="select (memory_http.model_budget(%(project)s) ->> 'tokens')::int = 1000",
    ),
    P + "set_model_budget(uuid,bigint,text)": Case(
        probes=("select memory.set_model_budget(%(project)s, 5, 'day')",),
        control="select (memory.set_model_budget(%(project)s, 5, 'day') ->> 'tokens')::int = 5",
        mutates=True,
    ),
    H + "set_model_budget(uuid,bigint,text)": Case(
        probes=("select memory_http.set_model_budget(%(project)s, 5, 'day')",),
        control="select (memory_http.set_model_budget(%(project)s, 5, 'day') ->> 'tokens')::int "
        "= 5",
        mutates=True,
    ),
    W + "park_job(uuid,bigint,text,text)": Case(
        setup=LEASE_ENRICH,
        probes=("select memory_worker.park_job(%(org)s, %(job)s, 'xt', 'intruder')",),
        control="select memory_worker.park_job(%(org)s, %(job)s, 'xt', 'control')",
        mutates=True,
    ),
    W + "extend_lease(uuid,bigint,text,interval)": Case(
        setup=LEASE_ENRICH,
        probes=("select memory_worker.extend_lease(%(org)s, %(job)s, 'xt', '1 hour')",),
        control="select memory_worker.extend_lease(%(org)s, %(job)s, 'xt', '1 hour')",
        mutates=True,
    ),
    W + "purge_expired_episodes()": Case(
        # No id: it acts on the caller's org's projects with a retention period.
        setup="select memory.set_retention(%(project)s, '1 hour')",
        probes=("select memory_worker.purge_expired_episodes()",),
        control="select memory_worker.purge_expired_episodes() = '{}'::jsonb",
    ),
    W + "purge_done_jobs(interval)": Case(
        # No id: it acts on the caller's org. B's purge must leave A's done job.
        setup=LEASE_ENRICH + ";\nselect memory_worker.complete_job(%(org)s, %(job)s, 'xt')",
        probes=("select memory_worker.purge_done_jobs('-1 hour')",),
        control="select memory_worker.purge_done_jobs('-1 hour') > 0",
        mutates=True,
    ),
    P + "queue_stats()": Case(
        neutral="operator totals for /metrics across orgs: counts per kind, no id, no "
        "content, no org; the same whichever org calls",
        check="select not exists (select from pg_proc p, unnest(p.proallargtypes) t "
        "where p.oid = 'memory.queue_stats()'::regprocedure and t not in "
        "('text'::regtype, 'bigint'::regtype, 'interval'::regtype))",
    ),
    P + "metric_totals()": Case(
        neutral="operator totals for /metrics across orgs: one number per metric, no "
        "per-org detail",
        check="select not exists (select from pg_proc p, unnest(p.proallargtypes) t "
        "where p.oid = 'memory.metric_totals()'::regprocedure and t not in "
        "('text'::regtype, 'bigint'::regtype))",
    ),
    # ---- API keys and authentication ---------------------------------------------
    H + "permissions()": Case(
        neutral="the fixed permission vocabulary (a constant)",
        check="select memory_http.permissions() @> array['project:read', 'project:manage']",
    ),
    H + "create_api_key(uuid,text,text[])": Case(
        probes=(
            "select key_id is null from memory_http.create_api_key(%(project)s, 'x', "
            "array['project:read'])",
        ),
        control="select token like 'cmk_%%' from memory_http.create_api_key(%(project)s, 'x', "
        "array['project:read'])",
        mutates=True,
    ),
    H + "list_api_keys(uuid)": Case(
        probes=("select * from memory_http.list_api_keys(%(project)s)",),
        control="select count(*) > 0 from memory_http.list_api_keys(%(project)s)",
    ),
    H + "revoke_api_key(uuid,uuid)": Case(
        probes=(
            "select memory_http.revoke_api_key(%(project)s, %(key)s)",
            "select memory_http.revoke_api_key(%(b_project)s, %(key)s)",
        ),
        control="select memory_http.revoke_api_key(%(project)s, %(key)s) is not null",
        mutates=True,
    ),
    H + "authenticate(text)": Case(
        # The token is the credential: A's real token scopes to A by design. A's key
        # id with a wrong secret must look exactly like an unknown key id.
        probes=(
            "select *, memory_internal.current_org() from memory_http.authenticate('cmk_' || "
            "replace(%(key)s::text, '-', '') || '_' || repeat('0', 64))",
        ),
        control="select org_id = %(org)s from memory_http.authenticate(%(a_token)s)",
    ),
    H + "open_key_session(text,integer)": Case(
        # As authenticate: the key's token is the credential. A's key id with a wrong
        # secret opens nothing, exactly as an unknown key id.
        probes=(
            "select * from memory_http.open_key_session('cmk_' || replace(%(key)s::text, '-', '') "
            "|| '_' || repeat('0', 64))",
        ),
        control="select org_id = %(org)s from memory_http.open_key_session(%(a_token)s)",
    ),
    H + "close_session(text)": Case(
        probes=(
            "select memory_http.close_session('cms_' || replace(%(key)s::text, '-', '') || '_' "
            "|| repeat('0', 64))",
        ),
        control="select memory_http.close_session("
        "(select token from memory_http.open_key_session(%(a_token)s)))",
    ),
    H + "open_oidc_session(jsonb,integer)": Case(
        # Verified claims are the credential; they reach only an org whose owner mapped
        # them (memory.set_oidc_mapping, which no client role may execute).
        neutral="takes a verified JWT's claims, no id; only the mappings an org's owner "
        "made lead anywhere, and a transaction scoped to another org reaches none",
        probes=(
            "select * from memory_http.open_oidc_session(jsonb_build_object('iss', "
            "'https://idp.test', 'sub', 'x', 'aud', 'cm', 'exp', extract(epoch from now()) + 60))",
        ),
        check="select not has_function_privilege('chronomem_app', "
        "'memory.set_oidc_mapping(uuid,text,text,text,text,text[])', 'EXECUTE') "
        "and not has_table_privilege('chronomem_app', 'memory_internal.oidc_mappings', 'SELECT')",
    ),
    H + "authorize(text,text,uuid)": Case(
        probes=(
            "select * from memory_http.authorize(%(b_token)s, 'project:read', %(project)s)",
            "select * from memory_http.authorize('cmk_' || replace(%(key)s::text, '-', '') || '_' "
            "|| repeat('0', 64), 'project:read', %(project)s)",
        ),
        control="select org_id = %(org)s from memory_http.authorize(%(a_token)s, 'project:read', "
        "%(project)s)",
    ),
    H + "authorize_call(text,text,uuid,boolean)": Case(
        probes=(
            "select memory_http.authorize_call(%(b_token)s, 'memory.list_facts', %(project)s)",
            "select memory_http.authorize_call('cmk_' || replace(%(key)s::text, '-', '') || '_' "
            "|| repeat('0', 64), 'memory.list_facts', %(project)s)",
        ),
        control="select memory_http.authorize_call(%(a_token)s, 'memory.list_facts', "
        "%(project)s) is not null and memory_internal.current_org() = %(org)s",
    ),
    H + "call_permissions()": Case(
        neutral="the fixed table of which permission each call needs (a constant)",
        check="select count(*) > 30 from memory_http.call_permissions()",
    ),
    H + "call_permission(text)": Case(
        neutral="a lookup in the constant table of call permissions",
        check="select memory_http.call_permission('memory_http.assert_facts') = 'project:write'",
    ),
    H + "authorize_key(text)": Case(
        probes=(
            "select * from memory_http.authorize_key('cmk_' || replace(%(key)s::text, '-', '') "
            "|| '_' || repeat('0', 64))",
        ),
        control="select org_id = %(org)s from memory_http.authorize_key(%(a_token)s)",
    ),
    H + "authorize_own_project(text,text)": Case(
        probes=(
            "select * from memory_http.authorize_own_project('cmk_' || replace(%(key)s::text, "
            "'-', '') || '_' || repeat('0', 64), 'project:read')",
        ),
        control="select project_id = %(project)s from memory_http.authorize_own_project("
        "%(a_token)s, 'project:read')",
    ),
    H + "bootstrap_api_key(uuid,text,text,text,text[])": Case(
        probes=(
            "select memory_http.bootstrap_api_key(%(org)s, null, 'intruder', 'k', "
            "array['project:manage'])",
        ),
        control="select memory_http.bootstrap_api_key(%(org)s, null, 'xt boot', 'k', "
        "array['project:read']) ->> 'token' like 'cmk_%%'",
        mutates=True,
    ),
    H + "create_project(text)": Case(
        # No id: it creates in the authorized key's org. B's call stays in B.
        probes=("select org_id = %(b_org)s from memory_http.create_project('xt B project')",),
        control="select org_id = %(org)s from memory_http.create_project('xt A project')",
        mutates=True,
    ),
    H + "org()": Case(
        neutral="names no id: the authorized key's org, never another",
        check="select array_agg(org_id) = array[%(b_org)s] from memory_http.org()",
        control="select array_agg(org_id) = array[%(org)s] from memory_http.org()",
    ),
    H + "list_projects()": Case(
        neutral="names no id: the projects of the authorized key's org",
        check="select count(*) > 0 and bool_and(org_id = %(b_org)s) "
        "from memory_http.list_projects()",
        control="select %(project)s in (select project_id from memory_http.list_projects())",
    ),
    # ---- webhooks ----------------------------------------------------------------
    P + "webhook_event_types()": Case(
        neutral="the fixed event type vocabulary (a constant)",
        check="select count(*) > 0 from memory.webhook_event_types()",
    ),
    P + "create_webhook(uuid,text,text[])": Case(
        probes=("select memory.create_webhook(%(project)s, 'https://hooks.example.com/x')",),
        control="select memory.create_webhook(%(project)s, 'https://hooks.example.com/y') "
        "? 'secret'",
        mutates=True,
    ),
    H + "create_webhook(uuid,text,text[])": Case(
        probes=("select memory_http.create_webhook(%(project)s, 'https://hooks.example.com/x')",),
        control="select memory_http.create_webhook(%(project)s, "
        "'https://hooks.example.com/y') ? 'secret'",
        mutates=True,
    ),
    P + "list_webhooks(uuid)": Case(
        probes=("select * from memory.list_webhooks(%(project)s)",),
        control="select count(*) > 0 from memory.list_webhooks(%(project)s)",
    ),
    P + "rotate_webhook_secret(uuid,uuid)": Case(
        probes=(
            "select memory.rotate_webhook_secret(%(project)s, %(endpoint)s)",
            "select memory.rotate_webhook_secret(%(b_project)s, %(endpoint)s)",
        ),
        control="select memory.rotate_webhook_secret(%(project)s, %(endpoint)s) ? 'secret'",
        mutates=True,
    ),
    H + "rotate_webhook_secret(uuid,uuid)": Case(
        probes=(
            "select memory_http.rotate_webhook_secret(%(project)s, %(endpoint)s)",
            "select memory_http.rotate_webhook_secret(%(b_project)s, %(endpoint)s)",
        ),
        control="select memory_http.rotate_webhook_secret(%(project)s, %(endpoint)s) ? 'secret'",
        mutates=True,
    ),
    P + "update_webhook(uuid,uuid,text,text[],boolean)": Case(
        probes=(
            "select memory.update_webhook(%(project)s, %(endpoint)s, p_enabled => false)",
            "select memory.update_webhook(%(b_project)s, %(endpoint)s, p_enabled => false)",
        ),
        control="select not (memory.update_webhook(%(project)s, %(endpoint)s, "
        "p_enabled => false) ->> 'enabled')::boolean",
        mutates=True,
    ),
    H + "update_webhook(uuid,uuid,text,text[],boolean)": Case(
        probes=(
            "select memory_http.update_webhook(%(project)s, %(endpoint)s, p_enabled => false)",
            "select memory_http.update_webhook(%(b_project)s, %(endpoint)s, p_enabled => false)",
        ),
        control="select not (memory_http.update_webhook(%(project)s, %(endpoint)s, "
        "p_enabled => false) ->> 'enabled')::boolean",
        mutates=True,
    ),
    P + "delete_webhook(uuid,uuid)": Case(
        probes=(
            "select memory.delete_webhook(%(project)s, %(endpoint)s)",
            "select memory.delete_webhook(%(b_project)s, %(endpoint)s)",
        ),
        control="select memory.delete_webhook(%(project)s, %(endpoint)s) ? 'deleted'",
        mutates=True,
    ),
    H + "delete_webhook(uuid,uuid)": Case(
        probes=(
            "select memory_http.delete_webhook(%(project)s, %(endpoint)s)",
            "select memory_http.delete_webhook(%(b_project)s, %(endpoint)s)",
        ),
        control="select memory_http.delete_webhook(%(project)s, %(endpoint)s) ? 'deleted'",
        mutates=True,
    ),
    W + "webhook_target(uuid)": Case(
        probes=("select * from memory_worker.webhook_target(%(endpoint)s)",),
        control="select secret like 'whsec_%%' from memory_worker.webhook_target(%(endpoint)s)",
    ),
    W + "log_webhook_attempt(bigint,integer,text,integer,boolean)": Case(
        setup=LEASE_DELIVERY,
        probes=("select memory_worker.log_webhook_attempt(%(delivery_job)s, 200, null, 5, true)",),
        control="select memory_worker.log_webhook_attempt(%(delivery_job)s, 200, null, 5, true) "
        "= 'delivered'",
        mutates=True,
    ),
    P + "webhook_deliveries(uuid,uuid,integer,bigint)": Case(
        setup=LEASE_DELIVERY
        + ";\nselect memory_worker.log_webhook_attempt(%(delivery_job)s, 500, 'x', 5, true)",
        probes=(
            "select * from memory.webhook_deliveries(%(project)s, %(endpoint)s)",
            "select * from memory.webhook_deliveries(%(b_project)s, %(endpoint)s)",
            "select * from memory.webhook_deliveries(%(project)s)",
        ),
        control="select count(*) > 0 from memory.webhook_deliveries(%(project)s, %(endpoint)s)",
    ),
    H + "webhook_deliveries(uuid,uuid,integer,bigint)": Case(
        setup=LEASE_DELIVERY
        + ";\nselect memory_worker.log_webhook_attempt(%(delivery_job)s, 500, 'x', 5, true)",
        probes=(
            "select memory_http.webhook_deliveries(%(project)s, %(endpoint)s)",
            "select memory_http.webhook_deliveries(%(b_project)s, %(endpoint)s)",
        ),
        control="select jsonb_array_length(memory_http.webhook_deliveries(%(project)s, "
        "%(endpoint)s) -> 'deliveries') > 0",
    ),
    # ---- conflicts, reviews, learned cardinality -----------------------------------
    P + "list_conflicts(uuid,text,text,integer,timestamptz,uuid)": Case(
        probes=("select * from memory.list_conflicts(%(project)s, 'all')",),
        control="select count(*) > 0 from memory.list_conflicts(%(project)s)",
    ),
    P + "get_conflict(uuid,uuid)": Case(
        probes=(
            "select memory.get_conflict(%(project)s, %(conflict)s)",
            "select memory.get_conflict(%(b_project)s, %(conflict)s)",
        ),
        control="select memory.get_conflict(%(project)s, %(conflict)s) ->> 'status' = 'open'",
    ),
    P + "resolve_conflict(uuid,uuid,text,uuid,timestamptz,text,text)": Case(
        probes=(
            "select memory.resolve_conflict(%(project)s, %(conflict)s, 'keep_both')",
            "select memory.resolve_conflict(%(b_project)s, %(conflict)s, 'keep_both')",
        ),
        control="select memory.resolve_conflict(%(project)s, %(conflict)s, 'keep_both')"
        " ->> 'resolution' = 'kept'",
        mutates=True,
    ),
    P + "review_fact(uuid,uuid,text,text,text)": Case(
        probes=(
            "select memory.review_fact(%(project)s, %(fact)s, 'confirmed')",
            "select memory.review_fact(%(b_project)s, %(fact)s, 'confirmed')",
        ),
        control="select memory.review_fact(%(project)s, %(fact)s, 'confirmed') ->> 'standing'"
        " = 'confirmed'",
        mutates=True,
    ),
    P + "suggest_cardinality(uuid)": Case(
        probes=("select * from memory.suggest_cardinality(%(project)s)",),
        control="select count(*) > 0 from memory.suggest_cardinality(%(project)s)",
    ),
    P + "conflict_policy(uuid)": Case(
        probes=("select memory.conflict_policy(%(project)s)",),
        control="select memory.conflict_policy(%(project)s) ->> 'contradictions' = 'close'",
    ),
    P + "set_conflict_policy(uuid,text,boolean,boolean,real,integer,text)": Case(
        probes=("select memory.set_conflict_policy(%(project)s, 'conflict')",),
        control="select memory.set_conflict_policy(%(project)s, 'conflict') ->> 'contradictions'"
        " = 'conflict'",
        mutates=True,
    ),
    P + "predicate_changes(uuid,integer)": Case(
        probes=("select * from memory.predicate_changes(%(project)s)",),
        control="select count(*) > 0 from memory.predicate_changes(%(project)s)",
    ),
    P + "undo_predicate_change(uuid,bigint,text)": Case(
        probes=(
            "select memory.undo_predicate_change(%(project)s, %(change)s)",
            "select memory.undo_predicate_change(%(b_project)s, %(change)s)",
        ),
        control="select memory.undo_predicate_change(%(project)s, %(change)s) ->> 'cardinality'"
        " = 'unknown'",
        mutates=True,
    ),
    H + "list_conflicts(uuid,text,text,integer,timestamptz,uuid)": Case(
        probes=("select memory_http.list_conflicts(%(project)s, 'all')",),
        control="select jsonb_array_length(memory_http.list_conflicts(%(project)s)"
        " -> 'conflicts') > 0",
    ),
    H + "get_conflict(uuid,uuid)": Case(
        probes=(
            "select memory_http.get_conflict(%(project)s, %(conflict)s)",
            "select memory_http.get_conflict(%(b_project)s, %(conflict)s)",
        ),
        control="select memory_http.get_conflict(%(project)s, %(conflict)s) ->> 'status' = 'open'",
    ),
    H + "resolve_conflict(uuid,uuid,text,uuid,timestamptz,text)": Case(
        probes=(
            "select memory_http.resolve_conflict(%(project)s, %(conflict)s, 'keep_both')",
            "select memory_http.resolve_conflict(%(b_project)s, %(conflict)s, 'keep_both')",
        ),
        control="select memory_http.resolve_conflict(%(project)s, %(conflict)s, 'keep_both')"
        " ->> 'resolution' = 'kept'",
        mutates=True,
    ),
    H + "review_fact(uuid,uuid,text,text)": Case(
        probes=(
            "select memory_http.review_fact(%(project)s, %(fact)s, 'confirmed')",
            "select memory_http.review_fact(%(b_project)s, %(fact)s, 'confirmed')",
        ),
        control="select memory_http.review_fact(%(project)s, %(fact)s, 'confirmed') ->> 'standing'"
        " = 'confirmed'",
        mutates=True,
    ),
    H + "suggest_cardinality(uuid)": Case(
        probes=("select memory_http.suggest_cardinality(%(project)s)",),
        control="select jsonb_array_length(memory_http.suggest_cardinality(%(project)s)"
        " -> 'suggestions') > 0",
    ),
    H + "conflict_policy(uuid)": Case(
        probes=("select memory_http.conflict_policy(%(project)s)",),
        control="select memory_http.conflict_policy(%(project)s) ->> 'contradictions' = 'close'",
    ),
    H + "set_conflict_policy(uuid,jsonb)": Case(
        probes=(
            "select memory_http.set_conflict_policy(%(project)s, '{\"protect_confirmed\": true}')",
        ),
        control="select memory_http.set_conflict_policy(%(project)s,"
        " '{\"protect_confirmed\": true}') ->> 'protect_confirmed' = 'true'",
        mutates=True,
    ),
    H + "predicate_changes(uuid,integer)": Case(
        probes=("select memory_http.predicate_changes(%(project)s)",),
        control="select jsonb_array_length(memory_http.predicate_changes(%(project)s)"
        " -> 'changes') > 0",
    ),
    H + "undo_predicate_change(uuid,bigint)": Case(
        probes=(
            "select memory_http.undo_predicate_change(%(project)s, %(change)s)",
            "select memory_http.undo_predicate_change(%(b_project)s, %(change)s)",
        ),
        control="select memory_http.undo_predicate_change(%(project)s, %(change)s)"
        " ->> 'cardinality' = 'unknown'",
        mutates=True,
    ),
}


# ---- the world: org A with something of every kind, org B with a project -------------
@dataclass
class World:
    ids: dict[str, Any]  # placeholder -> value (A's ids, B's own ids, tokens)
    tables: list[str] = field(default_factory=list)  # a query of each readable table


def _one(conn: psycopg.Connection[Any], query: str, params: Any = None) -> Any:
    row = conn.execute(query, params).fetchone()
    assert row is not None, query
    return row[0]


def _tenant(
    conn: psycopg.Connection[Any], name: str
) -> tuple[uuid.UUID, uuid.UUID, str, uuid.UUID]:
    org = _one(conn, "select memory.create_org(%s)", (name,))
    conn.execute("select memory.use_org(%s)", (org,))
    project = _one(conn, "select memory.create_project(%s, 'main')", (org,))
    row = conn.execute(
        "select token, key_id from memory_http.create_api_key(%s, 'root', %s)",
        (project, ALL_PERMISSIONS),
    ).fetchone()
    assert row is not None
    return org, project, row[0], row[1]


def _owner_read(conn: psycopg.Connection[Any], query: str, *args: Any) -> Any:
    """The one column of the first row `query` reads through cross_tenant_reads.rows
    ($1[i] is args[i] as text), as JSON gives it (a uuid as its text)."""
    row = conn.execute(
        "select (select v from jsonb_each(r) e(k, v) limit 1)"
        " from cross_tenant_reads.rows(%s, variadic %s::text[]) r limit 1",
        (query, [str(a) for a in args]),
    ).fetchone()
    assert row is not None, query
    return row[0]


def build_world(conn: psycopg.Connection[Any]) -> World:
    """Made in the test's own transaction (rolled back): nothing of it is left in the
    shared test database, no queued job or webhook endpoint for later modules."""
    b_org, b_project, b_token, _ = _tenant(conn, "xt tenant B")
    org, project, a_token, _ = _tenant(conn, "xt tenant A")
    key = _one(
        conn,
        "select key_id from memory_http.create_api_key(%s, 'spare', array['project:read'])",
        (project,),
    )
    endpoint = uuid.UUID(
        _one(
            conn,
            "select memory.create_webhook(%s, 'https://hooks.example.com/a') ->> 'endpoint_id'",
            (project,),
        )
    )
    conn.execute("select memory.declare_predicate(%s, 'works at', 'one')", (project,))
    facts = [
        {"subject": "Alice", "predicate": "works at", "object": "Acme",
         "object_type": "entity", "valid_from": "2020-01-01T00:00:00Z"},
        {"subject": "Alice", "predicate": "likes", "object": "tea"},
    ]  # fmt: skip
    conn.execute("select memory.assert_facts(%s, %s)", (project, Jsonb(facts)))
    # Globex supersedes Acme: a fact event, so a deliver_webhook job for A.
    fact = _one(
        conn,
        "select (memory.assert_facts(%s, %s) #>> '{results,0,fact_id}')::uuid",
        (project, Jsonb([{**facts[0], "object": "Globex", "valid_from": "2022-01-01Z"}])),
    )
    conn.execute("select memory.add_alias(%s, 'Alice', 'Ally')", (project,))
    # Two places at once for an undeclared predicate: an open conflict.
    conflict = uuid.UUID(
        _one(
            conn,
            "select memory.assert_facts(%s, %s) #>> '{conflicts,0}'",
            (project, Jsonb([
                {"subject": "Alice", "predicate": "lives in", "object": "Oslo"},
                {"subject": "Alice", "predicate": "lives in", "object": "Rome"},
            ])),
        )
    )  # fmt: skip
    change = _one(conn, "select min(change_id) from memory.predicate_changes(%s)", (project,))
    ingested = _one(
        conn,
        "select memory.ingest(%s, 'xt chat', %s)",
        (project, Jsonb([{"role": "user", "content": "Alice still works at Globex"}])),
    )
    episode = uuid.UUID(ingested["episode_ids"][0])
    attachment = uuid.UUID(
        _one(
            conn,
            "select memory.ingest_attachments(%s, 'xt files', %s, %s, %s)"
            " #>> '{attachments,0,attachment_id}'",
            (
                project,
                Jsonb([{"role": "user", "content": "a file"}]),
                Jsonb(
                    [{"filename": "a.txt", "media_type": "text/plain", "pages": ["Alice's notes"]}]
                ),
                [b"Alice's notes"],
            ),
        )
    )
    conn.execute("select memory.compute_communities(%s)", (project,))
    entity = uuid.UUID(
        _owner_read(
            conn,
            "select entity_id from memory.entities"
            " where project_id = $1[1]::uuid and normalized_name = 'alice'",
            project,
        )
    )
    job = _owner_read(
        conn,
        "select job_id from memory.jobs where kind = 'enrich' and payload ->> 'episode_id' = $1[1]",
        episode,
    )
    delivery_job = _owner_read(
        conn,
        "select min(job_id) as job_id from memory.jobs where kind = 'deliver_webhook'"
        " and project_id = $1[1]::uuid and status = 'queued'",
        project,
    )
    # What the app role reads of each table it may: the rows of the scope's org (its
    # policy, tenant_isolation; the owner's own policies see more), or all of a table
    # without orgs.
    tables = [
        r[0]
        for r in conn.execute(
            "select 'select * from ' || c.oid::regclass::text"
            " || case when exists (select from pg_attribute a where a.attrelid = c.oid"
            "                        and a.attname = 'org_id' and not a.attisdropped)"
            "         then ' where org_id = memory_internal.current_org()' else '' end"
            " from pg_class c "
            "where c.relnamespace in ('memory'::regnamespace, 'memory_internal'::regnamespace) "
            "and c.relkind in ('r', 'p') and has_table_privilege(c.oid, 'SELECT') order by 1"
        )
    ]
    ids = {
        "org": org, "project": project, "fact": fact, "episode": episode, "entity": entity,
        "endpoint": endpoint, "key": key, "job": job, "delivery_job": delivery_job,
        "conflict": conflict, "change": change, "attachment": attachment,
        "a_token": a_token, "b_org": b_org, "b_project": b_project, "b_token": b_token,
    }  # fmt: skip
    assert delivery_job is not None, "the supersession should have queued a delivery"
    return World(ids, tables)


def _random_ids(ids: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(ids)
    for name in A_IDS:
        out[name] = random.randrange(10**12, 10**13) if isinstance(ids[name], int) else uuid.uuid4()
    return out


def _mask(text: str, ids: Mapping[str, Any]) -> str:
    for name in A_IDS:
        value = ids[name]
        if isinstance(value, uuid.UUID):
            text = text.replace(str(value), f"<{name}>").replace(value.hex, f"<{name}>")
        else:  # a job id: a whole number, not digits inside a uuid or another number
            text = re.sub(rf"(?<![0-9a-f-]){value}(?![0-9a-f-])", f"<{name}>", text)
    return text


def _outcome(conn: psycopg.Connection[Any], query: str, ids: Mapping[str, Any]) -> str:
    """The answer B gets, ids masked; the effects stay (savepoint released) unless it
    raised."""
    try:
        with conn.transaction():
            rows = conn.execute(query, ids).fetchall()
        return _mask(f"rows {rows!r}", ids)
    except psycopg.Error as err:
        d = err.diag
        return _mask(
            f"error {d.sqlstate} {d.message_primary} | {d.message_detail} | {d.message_hint}", ids
        )


def _as(conn: psycopg.Connection[Any], token: str) -> None:
    """Scope the transaction to a key's org (memory.use_org, plus the key for api_*)."""
    row = conn.execute("select org_id from memory_http.authenticate(%s)", (token,)).fetchone()
    assert row is not None and row[0] is not None


def _digest(conn: psycopg.Connection[Any], w: World) -> dict[str, str]:
    """A's data as A sees it: every readable table, its keys and webhook secrets."""
    conn.execute("select memory.use_org(%s)", (w.ids["org"],))
    out: dict[str, str] = {}
    for table in w.tables:
        text = _one(
            conn,
            "select coalesce(string_agg(r::text, e'\\n' order by r::text), '')"
            " from cross_tenant_reads.rows(%s) r",
            (table,),
        )
        out[table] = hashlib.sha256(text.encode()).hexdigest()
    for name, query in (
        # (Through the project row: after delete_project's control there is none.)
        (
            "keys",
            "select k.* from cross_tenant_reads.rows('select project_id from memory.projects"
            " where project_id = $1[1]::uuid', %(project)s::text) p(r)"
            " cross join lateral memory_http.list_api_keys((p.r ->> 'project_id')::uuid) k"
            " order by k.key_id",
        ),
        (
            "secrets",
            "select e.r ->> 'endpoint_id', t.* from cross_tenant_reads.rows("
            "'select endpoint_id from memory.webhook_endpoints') e(r)"
            " cross join lateral memory_worker.webhook_target((e.r ->> 'endpoint_id')::uuid) t"
            " order by 1",
        ),
    ):
        out[name] = repr(conn.execute(query, w.ids).fetchall())
    return out


def test_every_app_function_has_a_case(app_dsn: str) -> None:
    with psycopg.connect(app_dsn) as conn:
        executable = {
            # Keys are shorter with the type's alias (regprocedure reads either).
            r[0].replace("timestamp with time zone", "timestamptz")
            for r in conn.execute(
                "select p.oid::regprocedure::text from pg_proc p "
                "where p.pronamespace::regnamespace::text = any (%s) "
                "and has_function_privilege('chronomem_app', p.oid, 'EXECUTE')",
                (list(SCHEMAS),),
            )
        }
    # The scan sees every schema (a wrong schema list would find nothing there).
    for schema in SCHEMAS:
        assert any(k.startswith(schema + ".") for k in executable), schema
    missing = sorted(executable - CASES.keys())
    stale = sorted(CASES.keys() - executable)
    assert not missing, f"functions the app role can execute without a cross-tenant case: {missing}"
    assert not stale, f"cases for functions the app role cannot execute (renamed?): {stale}"


# Rows read as the owner, under the policies as forced on the owner (in the caller's
# scope), so that a read may follow the API's writes in one transaction on Citus too.
OWNER_READS = """
create schema cross_tenant_reads;
create function cross_tenant_reads.rows(p_query text, variadic p_args text[] default '{}')
  returns setof jsonb language plpgsql security definer set search_path = pg_catalog as $$
begin
  -- Materialized: Citus returns the rows of a subquery it pushes down unnamed (f1, ...).
  return query execute format('with t as materialized (%s) select to_jsonb(t) from t', p_query)
    using p_args;
end $$;
revoke all on function cross_tenant_reads.rows(text, text[]) from public;
grant usage on schema cross_tenant_reads to chronomem_app;
grant execute on function cross_tenant_reads.rows(text, text[]) to chronomem_app;
"""


@pytest.fixture(scope="module", autouse=True)
def owner_reads(owner_dsn: str) -> Iterator[None]:
    """cross_tenant_reads.rows for this module's tests, dropped after them (the schema
    lints of other modules see only the product's schemas)."""
    with psycopg.connect(owner_dsn, autocommit=True) as c:
        c.execute("drop schema if exists cross_tenant_reads cascade")
        c.execute(OWNER_READS)
    yield
    with psycopg.connect(owner_dsn, autocommit=True) as c:
        c.execute("drop schema cross_tenant_reads cascade")


@pytest.fixture
def conn(app_dsn: str) -> Iterator[psycopg.Connection[Any]]:
    # Client-side binding: the setups pass ids into DO blocks.
    with psycopg.connect(app_dsn, cursor_factory=psycopg.ClientCursor) as c:
        yield c
        c.rollback()


@pytest.fixture
def world(conn: psycopg.Connection[Any]) -> World:
    return build_world(conn)


@pytest.mark.parametrize("name", sorted(CASES))
def test_cross_tenant(world: World, conn: psycopg.Connection[Any], name: str) -> None:
    case = CASES[name]
    ids = world.ids
    assert conn.execute("select current_user").fetchone() == ("chronomem_app",)
    if case.neutral:
        assert len(case.neutral) > 20
    if case.setup:
        _as(conn, ids["a_token"])
        conn.execute(case.setup, ids)
    before = _digest(conn, world)

    if case.check:
        _as(conn, ids["b_token"])
        assert _one(conn, case.check, ids) is True, case.check
    if case.neutral == WORKER_ONLY:
        # Worker/operator functions across orgs: not reachable by a tenant.
        fname = name.split("(")[0].split(".")[-1]
        assert _one(
            conn,
            "select not has_function_privilege('chronomem_analyst', %s::regprocedure, 'EXECUTE')",
            (name,),
        )
        users = [
            p.name for p in THIN_API.rglob("*.py") if re.search(rf"\b{fname}\(", p.read_text())
        ]
        assert not users, f"{fname} is reachable from the API: {users}"
        return

    for probe in case.probes:
        _as(conn, ids["b_token"])
        real = _outcome(conn, probe, ids)
        # No answer shows A's data (Alice) in any form.
        assert "Alice" not in real and "alice" not in real, real
        if not any(f"%({n})s" in probe for n in A_IDS):
            continue  # no id of A's to compare with a random one
        _as(conn, ids["b_token"])
        with pytest.raises(_Rollback), conn.transaction():
            fake = _outcome(conn, probe, _random_ids(ids))
            raise _Rollback
        assert real == fake, f"{probe}\nB with A's ids:    {real}\nB with random ids: {fake}"

    assert _digest(conn, world) == before, "B's calls changed A's data"

    if case.control:
        _as(conn, ids["a_token"])
        assert _one(conn, case.control, ids) is True, case.control
        if case.mutates:
            assert _digest(conn, world) != before, "the control's effect is invisible to the check"


class _Rollback(Exception):
    pass


def test_use_org_refuses_unknown_orgs(world: World, conn: psycopg.Connection[Any]) -> None:
    ids = world.ids
    _as(conn, ids["b_token"])
    with pytest.raises(psycopg.errors.NoDataFound), conn.transaction():
        conn.execute("select memory.use_org(%s)", (uuid.uuid4(),))
    assert _one(conn, "select memory_internal.current_org()") == ids["b_org"]
    # Positive control: a real org is accepted (the app role chooses the org).
    assert _one(conn, "select memory.use_org(%s)", (ids["org"],)) == ids["org"]
